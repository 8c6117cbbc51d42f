"""SPM canonical haemodynamic response, its derivatives, and exact per-TR convolution matrices.

The stimulus is constant over each TR, so the response of volume ``k`` is ``Σ_j s_j K[k - j]`` with
``K[m]`` the integral of the HRF over one TR. The HRF is a difference of gamma densities, so the integral is
a difference of gamma CDFs: exact, however long or short the TR.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

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


@dataclass(frozen=True)
class HRF:
    """A two-gamma HRF of unit integral: SPM's canonical one at ``delay=6`` and ``dispersion=1``.

    Attributes
    ----------
    delay : float
        Delay (shape times scale) of the peak gamma, seconds; the undershoot's delay moves with it
        (16 s + ``delay`` - 6 s), so a longer delay shifts the whole response later.
    dispersion : float
        Dispersion (scale) of the peak gamma.
    option : str
        Which of :data:`prfmap.engine.catalog.HRF_OPTIONS` produced it.
    units : int
        Units it was estimated from (0 when it was not estimated).
    delay_sd : float
        Between-unit standard deviation of the delay around this response, seconds, estimated with
        it (0 when it was not; the standard errors then assume a default).
    """

    delay: float = DELAY
    dispersion: float = DISPERSION
    option: str = "canonical"
    units: int = 0
    delay_sd: float = 0.0

    @property
    def bases(self) -> tuple[str, ...]:
        """The bases a fit with this response regresses on: its derivatives too for ``vertex``."""
        return HRF_BASES if self.option == "vertex" else HRF_BASES[:1]

    def peak_s(self) -> float:
        """Time of the response's maximum, seconds (0.01 s resolution).

        Returns
        -------
        float
        """
        t = np.arange(0.0, TIME_LENGTH, 0.01)
        return float(t[np.argmax(spm_hrf(t, delay=self.delay, dispersion=self.dispersion))])

    def describe(self) -> dict[str, Any]:
        """The JSON-able record of the HRF for ``FitResult.settings`` and the sidecars.

        Returns
        -------
        dict
            ``option``, ``delay_s``, ``dispersion``, ``peak_s``, ``units``.
        """
        return {
            "option": self.option,
            "delay_s": round(float(self.delay), 4),
            "dispersion": round(float(self.dispersion), 4),
            "peak_s": round(self.peak_s(), 2),
            "units": int(self.units),
            **({"delay_sd_s": round(float(self.delay_sd), 4)} if self.delay_sd else {}),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any] | None) -> HRF:
        """The HRF a :meth:`describe` record holds (canonical for None).

        Parameters
        ----------
        record : dict or None
            A :meth:`describe` record.

        Returns
        -------
        HRF
        """
        if not record:
            return cls()
        return cls(
            float(record["delay_s"]),
            float(record["dispersion"]),
            str(record["option"]),
            int(record.get("units", 0)),
            float(record.get("delay_sd_s", 0.0)),
        )


CANONICAL = HRF()


def _gamma_difference(t: np.ndarray, dispersion: float, cumulative: bool, delay: float = DELAY) -> np.ndarray:
    f = stats.gamma.cdf if cumulative else stats.gamma.pdf
    t = np.asarray(t, dtype=np.float64)
    peak = f(t, delay / dispersion, scale=dispersion)
    under = f(t, (UNDERSHOOT + delay - DELAY) / U_DISPERSION, scale=U_DISPERSION)
    return (peak - RATIO * under) / (1.0 - RATIO)


def spm_hrf(
    t: np.ndarray,
    basis: str = "canonical",
    cumulative: bool = False,
    *,
    delay: float = DELAY,
    dispersion: float = DISPERSION,
) -> np.ndarray:
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
    delay, dispersion : float
        Delay and dispersion of the peak gamma (:class:`HRF`); SPM's 6 s and 1 by default.

    Returns
    -------
    ndarray
        Same shape as ``t``.
    """

    def value(times: np.ndarray, disp: float) -> np.ndarray:
        return _gamma_difference(times, disp, cumulative, delay)

    if basis == "canonical":
        return value(t, dispersion)
    if basis == "derivative":
        return (value(t, dispersion) - value(np.asarray(t) - TIME_STEP, dispersion)) / TIME_STEP
    if basis == "dispersion":
        return (value(t, dispersion) - value(t, dispersion + DISPERSION_STEP)) / DISPERSION_STEP
    raise ValueError(f"unknown HRF basis {basis!r}; choose from {HRF_BASES}")


def hrf_kernels(
    tr: float,
    n_basis: int = 1,
    slice_time_ref: float = 0.5,
    time_length: float = TIME_LENGTH,
    hrf: HRF = CANONICAL,
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
    hrf : HRF
        The response (and the derivatives') delay and dispersion; SPM's canonical by default.

    Returns
    -------
    ndarray, shape (n_basis, n_taps)
        ``K[b, m]`` is the response of a volume to a unit stimulus ``m`` TRs earlier.
    """
    if tr <= 0:
        raise ValueError(f"TR must be positive, got {tr}")
    n_taps = int(np.ceil((time_length + max(hrf.delay - DELAY, 0.0)) / tr)) + 2
    edges = (np.arange(n_taps + 1) - 1.0 + slice_time_ref) * tr
    edges = np.clip(edges, 0.0, None)
    return np.stack(
        [
            np.diff(spm_hrf(edges, basis, cumulative=True, delay=hrf.delay, dispersion=hrf.dispersion))
            for basis in HRF_BASES[:n_basis]
        ]
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
