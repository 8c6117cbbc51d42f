"""``estimate_noise``: a participant's noise model, estimated once before its fits.

A random sample of units is screened with a grid fit (canonical or the given HRF); the projected data
of the units the stimulus does not drive are pooled (:mod:`prfmap.engine.noise`): nothing fitted to
them is subtracted, since a pRF fitted to pure noise is chosen for what it explains of that noise and
its residual's autocorrelation comes out low (ρ 0.27 for 0.3 on 300 frames). Where nearly every
unit is driven, the residuals of the best units' refined fits are pooled instead; the class the
catalogue entry names estimates its model from them (the built-in ``ar<p>``: an AR(p) model). Like the
participant HRF, one stage before the fits, estimated per cross-validation fold from its training
runs alone.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from prfmap.engine import catalog
from prfmap.engine.batching import ProgressFn
from prfmap.engine.fit import fit_prf
from prfmap.engine.hrf import HRF
from prfmap.engine.noise import OLS, BaseNoiseModel, noise_class
from prfmap.engine.problem import FitCache, nuisance_basis
from prfmap.engine.stimulus import Stimulus

__all__ = ["NOISE_UNITS", "estimate_noise"]

NOISE_UNITS = 4000
"""Units sampled for the screen (at most)."""
DRIVEN_R2 = 0.1
"""Grid r² from which a sampled unit counts as driven by the stimulus."""
FEWEST_QUIET = 200
DRIVEN_UNITS = 1000
FEWEST_DRIVEN = 50
"""The estimate pools the projected data of the sampled units the stimulus does not drive (grid r²
below ``DRIVEN_R2``), where there are ``FEWEST_QUIET`` of them (a whole brain or cortex); else the
residuals of the refined fits of the (at most ``DRIVEN_UNITS``) best driven units, whose fits absorb
some of the noise (ρ 0.25 for 0.3 on 120 frames)."""


def estimate_noise(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    option: str = "ar1",
    *,
    nuisance: np.ndarray | None = None,
    seed: int = 0,
    progress: ProgressFn | None = None,
    cache: FitCache | None = None,
    **fit_options: Any,
) -> BaseNoiseModel:
    """The noise model ``option`` (a key of ``catalog.NOISE_MODELS``) of ``data``, pooled over units.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        Preprocessed time courses.
    stim : Stimulus
        Their apertures (its ``run_lengths``: lags never cross a run's end).
    tr : float
        Repetition time, s.
    option : str
        The noise model.
    nuisance : ndarray, shape (frames, k), optional
        Regressors that preprocessing removed (as :func:`prfmap.engine.fit_prf`).
    seed : int
        Seed of the sample of units.
    progress : callable, optional
        As :func:`prfmap.engine.fit_prf`.
    cache : FitCache, optional
        As :func:`prfmap.engine.fit_prf`'s: shared with the caller's fits of the same design.
    **fit_options
        Options of the grid fit (``hrf``: ``canonical`` or an HRF, ``slice_time_ref``,
        ``mem_gb``, ``dtype``), as :func:`prfmap.engine.fit_prf`'s.

    Returns
    -------
    BaseNoiseModel
        The entry's class, from its ``estimate``; :data:`~prfmap.engine.noise.OLS` for an entry
        without one (``ols``) or when no unit has usable data.
    """
    spec = catalog.get_noise_model(option)
    if spec.implementation is None:
        return OLS
    cls = noise_class(spec)
    data = np.asarray(data, dtype=np.float64)
    usable = np.flatnonzero(np.all(np.isfinite(data), axis=1) & (np.ptp(data, axis=1) > 0))
    if usable.size == 0:
        return OLS
    rng = np.random.default_rng(seed)
    sample = np.sort(rng.choice(usable, size=min(NOISE_UNITS, usable.size), replace=False))
    hrf = fit_options.pop("hrf", "canonical")
    common = {
        "hrf": hrf if isinstance(hrf, HRF) else "canonical",
        "nuisance": nuisance,
        "uncertainty": False,
        "progress": progress,
        "cache": FitCache() if cache is None else cache,
        **fit_options,
    }
    screen = fit_prf(data[sample], stim, tr, model="gauss", refine="none", **common)
    q = nuisance_basis(stim.n_frames, nuisance)
    projector = np.eye(stim.n_frames) - q @ q.T
    r2 = np.nan_to_num(screen.r2, nan=0.0)
    quiet = sample[r2 < DRIVEN_R2]
    driven = sample[np.argsort(-r2)[: min(DRIVEN_UNITS, int(np.sum(r2 >= DRIVEN_R2)))]]
    if quiet.size >= FEWEST_QUIET or driven.size < FEWEST_DRIVEN:
        resid, used = data[quiet] @ projector, int(quiet.size)
    else:  # nearly every unit responds (a region of interest): the residuals of their refined fits
        fit = fit_prf(data[driven], stim, tr, model="gauss", refine="lm", return_predictions=True, **common)
        kept = np.all(np.isfinite(fit.predictions), axis=1)
        resid, used = (data[driven] - fit.predictions)[kept], int(kept.sum())
    return cls.estimate(resid, projector, stim.run_lengths, option=option, units=used, **spec.options)
