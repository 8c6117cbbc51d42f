"""The forward model of ``prfmap-synth`` besides the pRF's overlap with the aperture.

Per-unit haemodynamic responses read at each unit's own sample time, the acquisition's slice timing, slow
drifts and noise.

Plain numpy and scipy, independent of prfmap's engine (the tests compare the two). The HRF is SPM's
two-gamma response as nilearn defines it (peak delay 6 s, undershoot delay 16 s, dispersions 1,
ratio 0.167) with unit integral; a unit's delay shifts both gammas' delays, its dispersion scales the
peak gamma. A stimulus frame ``j`` covers ``[j TR, (j + 1) TR)`` and volume ``k`` of a unit samples
the response at ``k TR + s`` with ``s`` the unit's sample time within the TR (its slice's acquisition
time, or the slice-timing correction's reference time), so the response of volume ``k`` to frame
``k - m`` is the HRF's integral over ``[m TR + s - TR, m TR + s]``: exact, through gamma CDFs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special

HRF_DELAY = 6.0
HRF_UNDERSHOOT = 16.0
HRF_U_DISPERSION = 1.0
HRF_RATIO = 0.167
HRF_SECONDS = 32.0
AR1 = 0.3
NOISE_MODELS = ("realistic", "global", "ar1")
NOISE_SHARES = {
    "realistic": {"ar1": 0.8, "physiological": 0.2, "global": 0.0},
    "global": {"ar1": 0.7, "physiological": 0.2, "global": 0.1},
}
"""Variance shares of each noise model: AR(1) thermal/system noise, aliased respiration and
cardiac cycles, and a slow fluctuation shared by every unit. A shared fluctuation correlates with
the stimulus by chance differently in each participant: with 10 % of the variance it moves a
participant's median σ bias by about ±0.1° from seed to seed (docs/validation.md), so it is its
own model (``global``), not part of the default."""
NOISE_SD_SPREAD = 0.3
"""Standard deviation of the log of the units' noise levels (tSNR varies across the cortex)."""
RESPIRATION_HZ = (0.2, 0.35)
CARDIAC_HZ = (0.9, 1.3)


def hrf_integral(
    t: np.ndarray, delay: np.ndarray | float = HRF_DELAY, dispersion: np.ndarray | float = 1.0
) -> np.ndarray:
    """Integral from 0 to ``t`` (seconds) of the unit-integral two-gamma HRF.

    Parameters
    ----------
    t : ndarray
        Times after the impulse; negative times give 0.
    delay : float or ndarray
        Peak delay (SPM's 6 s); the undershoot's delay moves with it (16 s + ``delay`` - 6 s).
    dispersion : float or ndarray
        Dispersion of the peak gamma (SPM's 1).

    Returns
    -------
    ndarray
        Broadcast shape of the arguments.
    """
    t = np.maximum(np.asarray(t, dtype=np.float64), 0.0)
    delay = np.asarray(delay, dtype=np.float64)
    # the gamma distribution's CDF, gammainc(shape, t / scale) (as scipy.stats.gamma.cdf computes it)
    peak = special.gammainc(delay / dispersion, t / dispersion)
    under = special.gammainc((HRF_UNDERSHOOT + delay - HRF_DELAY) / HRF_U_DISPERSION, t / HRF_U_DISPERSION)
    return (peak - HRF_RATIO * under) / (1.0 - HRF_RATIO)


def unit_kernels(
    tr: float, sample_time: np.ndarray, delay: np.ndarray, dispersion: np.ndarray, n_taps: int | None = None
) -> np.ndarray:
    """Each unit's response to a unit stimulus shown for one TR, ``m`` TRs before its volume.

    Parameters
    ----------
    tr : float
        Repetition time, seconds.
    sample_time, delay, dispersion : ndarray
        (units,) sample time within the TR (s), HRF peak delay (s) and peak dispersion.
    n_taps : int, optional
        Kernel length in TRs (default: the HRF's 32 s plus two TRs).

    Returns
    -------
    ndarray
        (units, n_taps); each row sums to about 1 (a sustained stimulus gives a response of 1).
    """
    n_taps = n_taps or int(np.ceil(HRF_SECONDS / tr)) + 2
    edges = (np.arange(n_taps + 1)[None, :] - 1.0) * tr + np.asarray(sample_time)[:, None]
    cdf = hrf_integral(edges, np.asarray(delay)[:, None], np.asarray(dispersion)[:, None])
    return np.diff(cdf, axis=1)


def convolve_units(neural: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    """Causal convolution of each unit's (units, frames) input with its own per-TR kernel."""
    n = neural.shape[1]
    out = np.zeros_like(neural, dtype=np.float64)
    for m in range(min(kernels.shape[1], n)):
        out[:, m:] += kernels[:, m : m + 1] * neural[:, : n - m]
    return out


def interleaved_slice_timing(n_slices: int, tr: float) -> np.ndarray:
    """Acquisition time (s) of each slice of an interleaved acquisition (even slices, then odd).

    The slices are spread evenly over the TR, as ``SliceTiming`` lists them (slice order).
    """
    order = np.concatenate([np.arange(0, n_slices, 2), np.arange(1, n_slices, 2)])
    times = np.empty(n_slices)
    times[order] = np.arange(n_slices) * tr / n_slices
    return np.round(times, 6)


def slice_of(position: np.ndarray, n_slices: int) -> np.ndarray:
    """The slice (0 = lowest) of each position along the slice axis, slices covering its range."""
    lo, hi = float(np.min(position)), float(np.max(position))
    frac = (np.asarray(position, dtype=np.float64) - lo) / max(hi - lo, 1e-9)
    return np.minimum((frac * n_slices).astype(int), n_slices - 1)


def drift(n_units: int, n_volumes: int, scale: float, rng: np.random.Generator) -> np.ndarray:
    """Slow drifts (units, volumes) in percent.

    A linear trend (sd 0.7 % over the run) and a half cosine (sd 0.5 %), both times ``scale``.
    """
    t = np.arange(n_volumes) / max(n_volumes - 1, 1)
    linear = rng.normal(0, 0.7, (n_units, 1)) * (t - 0.5)
    cosine = rng.normal(0, 0.5, (n_units, 1)) * np.cos(np.pi * t)
    return scale * (linear + cosine)


def ar1_noise(sd: np.ndarray, n_volumes: int, rng: np.random.Generator, rho: float = AR1) -> np.ndarray:
    """Stationary AR(1) noise (units, volumes) with per-unit standard deviation ``sd``."""
    sd = np.asarray(sd, dtype=np.float64)[:, None]
    out = np.empty((sd.shape[0], n_volumes))
    out[:, 0] = rng.normal(0, 1, sd.shape[0])
    innovations = rng.normal(0, np.sqrt(1 - rho**2), (sd.shape[0], n_volumes))
    for k in range(1, n_volumes):
        out[:, k] = rho * out[:, k - 1] + innovations[:, k]
    return sd * out


@dataclass(frozen=True)
class Acquisition:
    """When each unit's volumes are sampled.

    Attributes
    ----------
    tr : float
        Repetition time, seconds.
    sample_time : ndarray
        (units,) time within each TR at which the unit's volumes sample the signal, seconds.
    """

    tr: float
    sample_time: np.ndarray

    def times(self, n_volumes: int) -> np.ndarray:
        """(units, volumes) sample times from the start of the run, seconds."""
        return np.arange(n_volumes)[None, :] * self.tr + self.sample_time[:, None]


def realistic_noise(
    sd: np.ndarray,
    acquisition: Acquisition,
    n_volumes: int,
    rng: np.random.Generator,
    model: str = "realistic",
) -> np.ndarray:
    """Noise (units, volumes) of total per-unit standard deviation ``sd`` (percent).

    AR(1) noise, respiration and cardiac cycles sampled at each unit's own times (so aliased, the rates drawn
    once per run), and (``model="global"``) a slow fluctuation shared by every unit with per-unit loadings;
    the variance shares are :data:`NOISE_SHARES` ``[model]``.
    """
    sd = np.asarray(sd, dtype=np.float64)
    n = sd.shape[0]
    shares = NOISE_SHARES[model]
    out = ar1_noise(sd * np.sqrt(shares["ar1"]), n_volumes, rng)
    t = acquisition.times(n_volumes)
    physio = np.zeros((n, n_volumes))
    for low, high in (RESPIRATION_HZ, CARDIAC_HZ):
        rate = rng.uniform(low, high)
        phase = rng.uniform(0, 2 * np.pi, (n, 1))
        weight = rng.uniform(0.5, 1.5, (n, 1))
        physio += weight * np.sin(2 * np.pi * rate * t + phase)
    physio /= max(float(np.sqrt(np.mean(physio**2))), 1e-12)
    out += sd[:, None] * np.sqrt(shares["physiological"]) * physio
    if not shares["global"]:
        return out
    shared = ar1_noise(np.ones(1), n_volumes, rng, rho=0.9)[0]
    shared /= max(float(shared.std()), 1e-12)
    loading = rng.normal(1.0, 0.3, (n, 1))
    out += sd[:, None] * np.sqrt(shares["global"]) * loading * shared[None, :]
    return out


def unit_noise_levels(n_units: int, noise: float, model: str, rng: np.random.Generator) -> np.ndarray:
    """Per-unit noise standard deviations.

    ``noise`` everywhere (``ar1``) or log-normally spread around it (``realistic``, ``global``; median
    ``noise``).
    """
    if model == "ar1":
        return np.full(n_units, float(noise))
    return float(noise) * np.exp(rng.normal(0, NOISE_SD_SPREAD, n_units))
