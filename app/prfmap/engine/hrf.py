"""SPM canonical haemodynamic response, its derivatives, and exact per-TR convolution matrices.

The stimulus is constant over each TR, so the response of volume ``k`` is ``Σ_j s_j K[k - j]`` with
``K[m]`` the integral of the HRF over one TR. The HRF is a difference of gamma densities, so the integral is
a difference of gamma CDFs: exact, however long or short the TR.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy import stats

# SPM / nilearn defaults
DELAY = 6.0
UNDERSHOOT = 16.0
DISPERSION = 1.0
U_DISPERSION = 1.0
RATIO = 0.167
TIME_LENGTH = 32.0
# finite-difference steps nilearn uses for the derivatives
TIME_STEP = 0.1
DISPERSION_STEP = 0.01

HRF_BASES = ("canonical", "derivative", "dispersion")


def _gamma_difference(t: np.ndarray, dispersion: float, cumulative: bool) -> np.ndarray:
    f = stats.gamma.cdf if cumulative else stats.gamma.pdf
    t = np.asarray(t, dtype=np.float64)
    peak = f(t, DELAY / dispersion, scale=dispersion)
    under = f(t, UNDERSHOOT / U_DISPERSION, scale=U_DISPERSION)
    return (peak - RATIO * under) / (1.0 - RATIO)


def spm_hrf(t: np.ndarray, basis: str = "canonical", cumulative: bool = False) -> np.ndarray:
    """SPM canonical HRF of unit integral (or one of its derivatives) at times ``t`` in seconds.

    Parameters
    ----------
    t : ndarray
        Times after the impulse, in seconds.
    basis : {"canonical", "derivative", "dispersion"}
        The canonical response, its temporal derivative or its dispersion derivative, defined as nilearn
        defines them (finite differences of 0.1 s and 0.01).
    cumulative : bool
        Return the integral from 0 to ``t`` instead of the value.

    Returns
    -------
    ndarray
        Same shape as ``t``.
    """
    if basis == "canonical":
        return _gamma_difference(t, DISPERSION, cumulative)
    if basis == "derivative":
        return (
            _gamma_difference(t, DISPERSION, cumulative)
            - _gamma_difference(np.asarray(t) - TIME_STEP, DISPERSION, cumulative)
        ) / TIME_STEP
    if basis == "dispersion":
        return (
            _gamma_difference(t, DISPERSION, cumulative)
            - _gamma_difference(t, DISPERSION + DISPERSION_STEP, cumulative)
        ) / DISPERSION_STEP
    raise ValueError(f"unknown HRF basis {basis!r}; choose from {HRF_BASES}")


def hrf_kernels(
    tr: float, n_basis: int = 1, slice_time_ref: float = 0.5, time_length: float = TIME_LENGTH
) -> np.ndarray:
    """Per-TR integrated HRF kernels.

    Parameters
    ----------
    tr : float
        Repetition time in seconds.
    n_basis : {1, 3}
        Canonical only, or canonical + temporal + dispersion derivatives.
    slice_time_ref : float
        Where in the TR each volume is sampled (0 = start, 0.5 = middle, fMRIPrep's default).
    time_length : float
        Support of the HRF in seconds.

    Returns
    -------
    ndarray, shape (n_basis, n_taps)
        ``K[b, m]`` is the response of a volume to a unit stimulus ``m`` TRs earlier.
    """
    if tr <= 0:
        raise ValueError(f"TR must be positive, got {tr}")
    n_taps = int(np.ceil(time_length / tr)) + 2
    edges = (np.arange(n_taps + 1) - 1.0 + slice_time_ref) * tr
    edges = np.clip(edges, 0.0, None)
    return np.stack(
        [np.diff(spm_hrf(edges, basis, cumulative=True)) for basis in HRF_BASES[:n_basis]]
    )


def convolution_matrices(kernels: np.ndarray, run_lengths: Sequence[int]) -> np.ndarray:
    """Lower-triangular Toeplitz matrices that convolve each run separately.

    Parameters
    ----------
    kernels : ndarray, shape (n_basis, n_taps)
    run_lengths : sequence of int
        Frames per run; the convolution restarts at each run.

    Returns
    -------
    ndarray, shape (n_basis, frames, frames)
        ``prediction = neural @ H[b].T``.
    """
    n_frames = int(sum(run_lengths))
    out = np.zeros((kernels.shape[0], n_frames, n_frames))
    start = 0
    for length in run_lengths:
        lag = np.arange(length)[:, None] - np.arange(length)[None, :]
        valid = (lag >= 0) & (lag < kernels.shape[1])
        block = np.where(valid[None], kernels[:, np.clip(lag, 0, kernels.shape[1] - 1)], 0.0)
        out[:, start : start + length, start : start + length] = block
        start += length
    return out
