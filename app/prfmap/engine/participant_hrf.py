"""The participant-level HRF: the two-gamma delay that best predicts a participant's best units.

:func:`prfmap.engine.fit.estimate_hrf` fits every unit with the canonical HRF (grid and linear fit),
keeps the best units by r² (:func:`top_units`), fits them with per-unit temporal and dispersion
derivative weights, and then searches, with those units' pRFs held fixed, the delay of one
two-gamma response (:class:`prfmap.engine.hrf.HRF`, SPM's shape otherwise) that explains most of
their variance (:func:`best_hrf`). Every unit is then fitted with that response held fixed: one
parameter per participant estimated from up to 200 units, where per-unit derivative weights trade
off with each unit's pRF size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.signal import lfilter

from prfmap.engine.hrf import DELAY, DISPERSION, HRF, hrf_kernels

TOP_FRACTION = 0.05
"""Share of the units (with a finite fit) an estimate uses, clipped to [MIN_UNITS, MAX_UNITS]."""
MIN_UNITS = 50
MAX_UNITS = 200
MIN_R2 = 0.1
"""A unit whose canonical fit explains less of its variance does not inform the HRF."""
FEWEST_UNITS = 20
"""With fewer informative units the participant keeps the canonical HRF."""
HRF_PASSES = 2
"""Rounds of refitting the best units' pRFs (with derivative weights, then with the HRF found) and
searching the HRF again with them held fixed."""
DELAYS = np.arange(3.0, 10.0001, 0.25)
"""The coarse search of the delay; a finer one (0.05 s) follows around its best point."""


def top_units(
    r2: np.ndarray,
    fraction: float = TOP_FRACTION,
    min_units: int = MIN_UNITS,
    max_units: int = MAX_UNITS,
    min_r2: float = MIN_R2,
) -> np.ndarray:
    """Indices of the units an HRF estimate uses, best first.

    Parameters
    ----------
    r2 : ndarray
        (units,) variance explained by each unit's canonical fit; NaN where it has none.
    fraction, min_units, max_units : float, int, int
        The best ``fraction`` of the units with a finite ``r2``, at least ``min_units`` and at
        most ``max_units`` of them.
    min_r2 : float
        Units below it are never used, however few remain.

    Returns
    -------
    ndarray of int
    """
    r2 = np.asarray(r2, dtype=np.float64)
    finite = np.isfinite(r2)
    wanted = int(np.clip(round(fraction * finite.sum()), min_units, max_units))
    usable = np.flatnonzero(finite & (r2 >= min_r2))
    return usable[np.argsort(-r2[usable], kind="stable")][:wanted]


def explained(
    neural: np.ndarray,
    y: np.ndarray,
    q: np.ndarray,
    tr: float,
    run_lengths: Sequence[int],
    slice_time_ref: float,
    hrf: HRF,
) -> float:
    """Mean over units of the variance of ``y`` that ``neural`` convolved with ``hrf`` explains.

    Parameters
    ----------
    neural : ndarray
        (units, frames) neural time courses of fixed pRFs.
    y : ndarray
        (units, frames) data, already projected off the nuisance basis ``q`` (frames, k).
    tr, run_lengths, slice_time_ref : float, sequence of int, float
        The acquisition; the convolution restarts at each run.
    hrf : HRF

    Returns
    -------
    float
        Mean of ``max(c, 0)²`` with ``c`` each unit's correlation with its projected prediction.
    """
    kernel = hrf_kernels(tr, 1, slice_time_ref, hrf=hrf)[0]
    bounds = np.cumsum([0, *run_lengths])
    pred = np.concatenate(
        [
            lfilter(kernel, [1.0], neural[:, a:b], axis=1)
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        ],
        axis=1,
    )
    pred -= (pred @ q) @ q.T
    cross = np.sum(pred * y, axis=1)
    norms = np.sqrt(np.sum(pred**2, axis=1) * np.sum(y**2, axis=1))
    corr = np.where(norms > 0, cross / np.maximum(norms, 1e-300), 0.0)
    return float(np.mean(np.maximum(corr, 0.0) ** 2))


def best_hrf(
    neural: np.ndarray,
    y: np.ndarray,
    q: np.ndarray,
    tr: float,
    run_lengths: Sequence[int],
    slice_time_ref: float,
) -> tuple[HRF, float]:
    """The delay that explains most of the units' variance, and that mean r².

    A coarse grid (:data:`DELAYS`), then a fine one (0.05 s) around its best point; arguments as
    :func:`explained`. The dispersion stays SPM's: with the pRFs held fixed it trades off with their
    sizes (on noiseless data delayed by 1.5 s, a joint search found dispersion 0.88 for 1.0 and
    biased every σ by +0.05°), while the delay does not.
    """

    def search(delays: np.ndarray) -> tuple[float, float]:
        return max(
            (explained(neural, y, q, tr, run_lengths, slice_time_ref, HRF(d, DISPERSION)), d)
            for d in delays
            if d > 1.0
        )

    _, delay = search(DELAYS)
    score, delay = search(delay + np.arange(-0.2, 0.2001, 0.05))
    return HRF(float(round(delay, 4)), DISPERSION, "participant", len(y)), score


def canonical_fallback() -> HRF:
    """The participant HRF when too few units inform it: the canonical one, with no units."""
    return HRF(DELAY, DISPERSION, "participant", 0)
