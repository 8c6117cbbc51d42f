"""Estimators that run once before a participant's fits, each calling ``fit_prf`` or its stages.

The participant HRF (:mod:`.hrf`), the noise model (:mod:`.noise`) and the prior on log σ
(:mod:`.sigma_prior`).
"""
