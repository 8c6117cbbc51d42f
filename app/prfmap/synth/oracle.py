"""What a synthetic participant's stimulus lets any model comparison see: an identifiability oracle.

A CSS or DoG pRF is only recognisable where no Gaussian reproduces its time course within the noise.
For each pRF unit of a ``prfmap-synth`` dataset the oracle knows what no fit knows: the noise-free
response (:func:`noise_free_responses`, the generator's own forward model with the unit's true
parameters and HRF) and the noise (its standard deviation and lag-1 autocorrelation, measured on the
data minus that response, :func:`noise_of`). It fits the best Gaussian to the noise-free response
(:func:`best_gaussian_misfit`: the unit's true HRF, the amplitude and the drifts free, position and
size searched on a grid and polished by Nelder–Mead) and asks how often a test that knows both
responses and the noise would tell them apart over the dataset's runs (:func:`oracle_power`): a
one-sided z test of the part the Gaussian misses, at prfmap's level (``alpha / (models - 1)``). A
unit is *distinguishable* where that power is at least :data:`POWER`. No test on fitted data can do
better than this oracle, so recognition rates are reported over distinguishable units.

    from prfmap.synth.oracle import identifiability
    table = identifiability(bids_root)   # per unit: misfit, noise, power, distinguishable
"""

from __future__ import annotations

import json
import os
import warnings
from dataclasses import dataclass, fields
from pathlib import Path

import nibabel as nib
import numpy as np
from nilearn.signal import create_cosine_drift
from scipy.linalg import toeplitz
from scipy.optimize import minimize
from scipy.stats import norm

from prfmap.synth.config import PRF_MODELS, SynthConfig
from prfmap.synth.dataset import load_truth
from prfmap.synth.model import convolve_units, unit_kernels
from prfmap.synth.response import gaussian_overlap, prf_overlap, stimulus_apertures

ALPHA = 0.05 / 3
"""prfmap's error rate per unit for each of three models compared with the Gaussian (``--model all``)."""
POWER = 0.8
"""The oracle power from which a unit counts as distinguishable."""
HIGH_PASS_HZ = 0.01
"""The drifts removed before the comparison (prfmap's default ``--high-pass``)."""


@dataclass(frozen=True)
class Identifiability:
    """Per pRF unit (in the BOLD's unit order, NaN or False where no pRF), what the stimulus allows.

    Attributes
    ----------
    model : ndarray
        True model's index in :data:`~prfmap.synth.config.PRF_MODELS`.
    misfit : ndarray
        Fraction of the noise-free response's variance (after the drifts) that the best Gaussian
        leaves, per run.
    energy : ndarray
        What it leaves, summed over one run, in (percent signal change)².
    signal_sd : ndarray
        Standard deviation of the noise-free response once the drifts are out (percent signal change).
    noise_sd, noise_rho : ndarray
        The unit's noise: standard deviation (percent signal change) and lag-1 autocorrelation.
    power : ndarray
        The oracle's power over all runs with a response.
    distinguishable : ndarray
        ``power >= POWER`` (bool); False for Gaussian units.
    """

    model: np.ndarray
    misfit: np.ndarray
    energy: np.ndarray
    signal_sd: np.ndarray
    noise_sd: np.ndarray
    noise_rho: np.ndarray
    power: np.ndarray
    distinguishable: np.ndarray


def dataset_config(root: str | os.PathLike) -> SynthConfig:
    """The :class:`~prfmap.synth.config.SynthConfig` a dataset was written with (its ``truth.json``)."""
    settings = json.loads((Path(root) / "derivatives" / "prfsynth" / "truth.json").read_text())["Settings"]
    known = {f.name for f in fields(SynthConfig)}
    return SynthConfig(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in settings.items() if k in known}
    )


def noise_free_responses(
    truth: dict[str, np.ndarray], config: SynthConfig, design: np.ndarray, units: np.ndarray
) -> np.ndarray:
    """The response of ``units`` to one run, in percent of the noise-free run mean (what prfmap fits).

    Returns
    -------
    ndarray
        (len(units), frames).
    """
    params = {
        "x": truth["x"][units],
        "y": truth["y"][units],
        "sigma": truth["sigma"][units],
        "model": truth.get("truemodel", np.zeros(len(truth["x"])))[units].astype(int),
    }
    if "truemodel" in truth:
        params["n"] = truth["n"][units]
        params["sigma_surround"] = truth["sigmasurround"][units]
        params["surround_ratio"] = truth["amplitudesurround"][units] / truth["amplitude"][units]
    overlap = prf_overlap(design, config.fov_deg, params)
    kernels = unit_kernels(
        config.tr, truth["sampletime"][units], truth["hrfdelay"][units], truth["hrfdispersion"][units]
    )
    return truth["amplitude"][units, None] * convolve_units(overlap, kernels)


def _residual_maker(n_frames: int, tr: float) -> np.ndarray:
    """(frames, k) orthonormal basis of a constant and the drifts below :data:`HIGH_PASS_HZ`."""
    with warnings.catch_warnings():  # a cut-off above Nyquist: every cosine, as asked
        warnings.simplefilter("ignore", UserWarning)
        basis = create_cosine_drift(HIGH_PASS_HZ, np.arange(n_frames) * tr)  # the constant is its last column
    return np.linalg.qr(basis)[0]


def best_gaussian_misfit(
    response: np.ndarray,
    design: np.ndarray,
    fov_deg: float,
    kernel: np.ndarray,
    start: tuple[float, float, float],
    nuisance: np.ndarray,
) -> np.ndarray:
    """What the best Gaussian pRF with this HRF ``kernel`` leaves of ``response``: (frames,) series.

    The drifts (``nuisance``, orthonormal) are projected out of both; the Gaussian's amplitude is
    the least-squares one (free in sign, as a DoG's can be); its centre and size are searched on a
    grid around ``start`` (x, y ± 1°, σ from 0.1° to half the field of view) and polished by
    Nelder–Mead from the grid's best.
    """
    target = response - nuisance @ (nuisance.T @ response)

    def left(x: np.ndarray, y: np.ndarray, sigma: np.ndarray) -> np.ndarray:
        overlap = gaussian_overlap(design, fov_deg, x, y, sigma)
        pred = convolve_units(overlap, np.broadcast_to(kernel, (len(x), kernel.size)))
        pred -= (pred @ nuisance) @ nuisance.T
        beta = (pred @ target) / np.maximum((pred * pred).sum(axis=1), 1e-300)
        return ((target[None] - beta[:, None] * pred) ** 2).sum(axis=1)

    x0, y0, _ = start
    steps = np.linspace(-1.0, 1.0, 5)
    gx, gy, gs = (g.ravel() for g in np.meshgrid(x0 + steps, y0 + steps, np.geomspace(0.1, fov_deg / 2, 20)))
    grid = left(gx, gy, gs)
    i = int(np.argmin(grid))
    found = minimize(
        lambda p: float(left(p[:1], p[1:2], np.exp(p[2:]))[0]),
        np.array([gx[i], gy[i], np.log(gs[i])]),
        method="Nelder-Mead",
        options={"xatol": 1e-4, "fatol": 1e-9 * float(target @ target), "maxiter": 300},
    )
    x, y, log_sigma = found.x if found.fun < grid[i] else (gx[i], gy[i], np.log(gs[i]))
    pred = convolve_units(
        gaussian_overlap(design, fov_deg, np.array([x]), np.array([y]), np.exp([log_sigma])), kernel[None]
    )[0]
    pred -= nuisance @ (nuisance.T @ pred)
    return target - (pred @ target) / max(float(pred @ pred), 1e-300) * pred


def ar1_correlation(n_frames: int, rho: float) -> np.ndarray:
    """(frames, frames) correlation matrix of an AR(1) process."""
    return toeplitz(rho ** np.arange(n_frames))


def _lag_ratio_and_trace(nuisance: np.ndarray, rho: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Expected lag-1 ratio and sum of squares of unit-variance AR(1) noise once the drifts are out.

    For each ``rho``: the expected lag-1 cross-product over the expected sum of squares, and that
    expected sum of squares.
    """
    n = nuisance.shape[0]
    ratio, trace = np.empty(len(rho)), np.empty(len(rho))
    for i, r in enumerate(rho):
        cov = ar1_correlation(n, r)
        kept = cov - nuisance @ (nuisance.T @ cov)  # (I - N Nᵀ) Σ
        kept -= (kept @ nuisance) @ nuisance.T  # (I - N Nᵀ) Σ (I - N Nᵀ)
        trace[i] = np.trace(kept)
        ratio[i] = np.trace(kept, offset=1) / trace[i]
    return ratio, trace


def noise_of(residual: np.ndarray, nuisance: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Standard deviation and lag-1 autocorrelation of the AR(1) noise in (runs, units, frames) residuals.

    The drifts (``nuisance``, orthonormal) are projected out first, which removes part of the
    noise's slow power: the autocorrelation is the AR(1) coefficient whose expected lag-1 ratio
    after that projection equals the measured one, and the variance is corrected alike.
    """
    cleaned = residual - (residual @ nuisance) @ nuisance.T
    squares = (cleaned**2).sum(axis=-1).sum(axis=0)
    lagged = (cleaned[..., 1:] * cleaned[..., :-1]).sum(axis=-1).sum(axis=0)
    grid = np.linspace(-0.6, 0.95, 32)
    ratio, trace = _lag_ratio_and_trace(nuisance, grid)
    rho = np.interp(lagged / squares, ratio, grid)
    sd = np.sqrt(squares / cleaned.shape[0] / np.interp(rho, grid, trace))
    return sd, rho


def oracle_power(
    difference: np.ndarray, sd: np.ndarray, rho: np.ndarray, runs: int, alpha: float = ALPHA
) -> np.ndarray:
    """Power of a one-sided z test of a known (units, frames) ``difference`` per run in AR(1) noise.

    The test statistic is the difference's cross-product with the data: over ``runs`` independent
    runs, its mean is ``runs · dᵀd`` and its variance ``runs · sd² · dᵀ C(rho) d``.
    """
    difference = np.atleast_2d(difference)
    effect = np.zeros(len(difference))
    for i, d in enumerate(difference):
        energy = float(d @ d)
        if energy > 0:
            spread = sd[i] * np.sqrt(float(d @ ar1_correlation(d.size, rho[i]) @ d))
            effect[i] = np.sqrt(runs) * energy / spread
    return norm.sf(norm.isf(alpha) - effect)


def _runs_bold(root: Path, subject: str, config: SynthConfig, prf_units: int) -> list[np.ndarray]:
    """Each run's BOLD as (units, frames) in load_truth's unit order, dummy scans dropped."""
    func = root / "derivatives" / "fmriprep" / f"sub-{subject}" / "func"
    runs = []
    for run in range(1, config.runs + 1):
        stem = f"sub-{subject}_task-{config.task}_run-{run}"
        gifti = sorted(func.glob(f"{stem}_hemi-*_bold.func.gii"))
        if gifti:
            by_hemi = {("L" if "hemi-L" in p.name else "R"): p for p in gifti}
            data = np.concatenate(
                [np.column_stack([d.data for d in nib.load(by_hemi[h]).darrays]) for h in "LR"]
            )
        elif cifti := sorted(func.glob(f"{stem}_*bold.dtseries.nii")):
            data = np.asarray(nib.load(cifti[0]).get_fdata(dtype=np.float32)).T
        else:
            (volume,) = sorted(func.glob(f"{stem}_*desc-preproc_bold.nii.gz"))
            (mask,) = sorted(func.glob(f"{stem}_*desc-brain_mask.nii.gz"))
            inside = np.asanyarray(nib.load(mask).dataobj) > 0
            data = np.asanyarray(nib.load(volume).dataobj)[inside]
        runs.append(np.asarray(data, np.float64)[:, config.dummy_scans :])
    if runs and runs[0].shape[0] != prf_units:
        raise ValueError(f"the BOLD has {runs[0].shape[0]} units, the truth {prf_units}")
    return runs


def identifiability(
    root: str | os.PathLike, subject: str = "01", units: np.ndarray | None = None, alpha: float = ALPHA
) -> Identifiability:
    """The oracle for the pRF units (all, or the indices ``units``) of a synthetic participant.

    Runs of pure noise (``--noise-runs``) count for the noise but not for the power.
    """
    root = Path(root)
    config = dataset_config(root)
    truth = load_truth(root, subject)
    design = stimulus_apertures(config)
    n_units, n_frames = truth["x"].size, design.shape[0]
    chosen = np.flatnonzero(truth["mask"]) if units is None else np.asarray(units)
    nuisance = _residual_maker(n_frames, config.tr)
    response = noise_free_responses(truth, config, design, chosen)
    bold = _runs_bold(root, subject, config, n_units)
    psc = np.stack([100 * run[chosen] / run[chosen].mean(axis=1, keepdims=True) - 100 for run in bold])
    responding = np.arange(config.runs) >= config.noise_runs  # the first noise_runs runs are noise
    psc[responding] -= response[None]
    sd, rho = noise_of(psc, nuisance)
    kernels = unit_kernels(
        config.tr, truth["sampletime"][chosen], truth["hrfdelay"][chosen], truth["hrfdispersion"][chosen]
    )
    model = truth.get("truemodel", np.zeros(n_units))[chosen].astype(int)
    difference = np.zeros_like(response)
    clean = response - (response @ nuisance) @ nuisance.T
    total = (clean**2).sum(axis=1)
    for i in np.flatnonzero(model != PRF_MODELS.index("gauss")):
        start = (truth["x"][chosen[i]], truth["y"][chosen[i]], truth["sigma"][chosen[i]])
        difference[i] = best_gaussian_misfit(response[i], design, config.fov_deg, kernels[i], start, nuisance)
    energy = (difference**2).sum(axis=1)
    power = oracle_power(difference, sd, rho, int(responding.sum()), alpha)

    def per_unit(values: np.ndarray, fill: float | bool = np.nan) -> np.ndarray:
        out = np.full(n_units, fill, dtype=np.asarray(values).dtype if fill is False else np.float64)
        out[chosen] = values
        return out

    return Identifiability(
        model=per_unit(model),
        misfit=per_unit(energy / np.maximum(total, 1e-300)),
        energy=per_unit(energy),
        signal_sd=per_unit(np.sqrt(total / (n_frames - nuisance.shape[1]))),
        noise_sd=per_unit(sd),
        noise_rho=per_unit(rho),
        power=per_unit(power),
        distinguishable=per_unit((power >= POWER) & (model != PRF_MODELS.index("gauss")), False),
    )
