"""Estimators that run once before a participant's fits, each calling ``fit_prf``.

The participant HRF (:mod:`.hrf`) and the noise model (:mod:`.noise`).
"""
