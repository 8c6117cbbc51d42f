"""The noise model (issue 17): AR estimates against nilearn's, the whitening, and the correction for
the nuisance projection."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import toeplitz

from conftest import FOV, TR, bar_design, random_params
from prfmap.engine import Stimulus, estimate_noise, predict
from prfmap.engine.noise import (
    NoiseModel,
    ar_autocorrelation,
    noise_order,
    pooled_autocorrelation,
    yule_walker,
)
from prfmap.engine.problem import nuisance_basis


def ar_noise(phi: list[float], units: int, frames: int, rng: np.random.Generator) -> np.ndarray:
    """Stationary AR(p) noise (units, frames) of unit innovation variance, 200 frames of burn-in."""
    e = rng.standard_normal((units, frames + 200))
    out = np.zeros_like(e)
    for t in range(e.shape[1]):
        out[:, t] = e[:, t] + sum(c * out[:, t - j - 1] for j, c in enumerate(phi) if t - j - 1 >= 0)
    return out[:, 200:]


def dct_nuisance(run_lengths: tuple[int, ...], cosines: int = 3) -> np.ndarray:
    """Per-run constants and the first ``cosines`` DCT regressors: a high-pass filter's basis."""
    total, start, cols = sum(run_lengths), 0, []
    for n in run_lengths:
        t = np.arange(n)
        for k in range(cosines + 1):
            c = np.zeros(total)
            c[start : start + n] = np.cos(np.pi * k * (t + 0.5) / n)
            cols.append(c)
        start += n
    return np.array(cols).T


def test_yule_walker_agrees_with_nilearn():
    from nilearn.glm.first_level.first_level import _yule_walker

    series = ar_noise([0.4, -0.2], 1, 20000, np.random.default_rng(0))
    ours = yule_walker(pooled_autocorrelation(series - series.mean(), (series.shape[1],), 3))
    np.testing.assert_allclose(ours, _yule_walker(series[0], 2), atol=2e-3)
    np.testing.assert_allclose(ours, [0.4, -0.2], atol=0.03)


def test_autocorrelation_of_the_model_solves_the_yule_walker_equations():
    phi = np.array([0.5, -0.3, 0.1])
    rho = ar_autocorrelation(phi, 10)
    np.testing.assert_allclose(yule_walker(rho[:4]), phi, atol=1e-12)
    for k in range(4, 10):
        assert rho[k] == pytest.approx(phi @ rho[k - 1 : k - 4 : -1], abs=1e-12)


def test_whitening_inverts_each_runs_correlation_and_never_mixes_runs():
    model = NoiseModel("ar2", (0.4, -0.2), 10)
    w = model.whitening((30, 20))
    for a, b in ((0, 30), (30, 50)):
        block = w[a:b, a:b]
        sigma = toeplitz(model.autocorrelation(b - a))
        np.testing.assert_allclose(block @ sigma @ block.T, np.eye(b - a), atol=1e-10)
        np.testing.assert_allclose(block, np.tril(block), atol=0)  # causal: no frame sees the future
    assert not w[:30, 30:].any() and not w[30:, :30].any()
    assert NoiseModel().whitening((30, 20)) is None


def test_estimate_corrects_for_the_nuisance_projection():
    """Pure AR(1) noise (ρ 0.3) through a high-pass projection: the raw residual autocorrelation reads
    ρ ≈ 0.27; the estimate recovers 0.3."""
    rng = np.random.default_rng(1)
    runs = (148, 148)  # four sweeps of 37 frames
    data = np.hstack([ar_noise([0.3], 3000, n, rng) for n in runs])
    nuisance = dct_nuisance(runs)
    q = nuisance_basis(sum(runs), nuisance)
    projected = data - (data @ q) @ q.T
    naive = yule_walker(pooled_autocorrelation(projected, runs, 2))[0]
    stim = Stimulus(np.concatenate([bar_design(148)] * 2), FOV, run_lengths=runs)
    noise = estimate_noise(data, stim, TR, "ar1", nuisance=nuisance)
    assert noise.option == "ar1" and 2900 < noise.units <= 3000  # the units no pRF explains
    assert abs(noise.coefficients[0] - 0.3) < 0.015
    assert abs(naive - 0.3) > 2 * abs(noise.coefficients[0] - 0.3)


def test_estimate_from_driven_units_recovers_the_coefficient(stim):
    """Every unit has a pRF (SNR about 1) in AR(1) noise: the residuals of their refined fits give ρ,
    biased low by what the fits absorb of the noise (120 frames, 4 parameters)."""
    rng = np.random.default_rng(2)
    params = random_params("gauss", 400, rng)
    clean = predict(params, stim, TR, dtype="float64")
    noise = ar_noise([0.3], 400, stim.n_frames, rng) * np.sqrt(1 - 0.09)
    data = clean + clean.std(axis=1, keepdims=True) * noise
    estimate = estimate_noise(data, stim, TR, "ar1", nuisance=dct_nuisance((stim.n_frames,)))
    assert estimate.units >= 300  # the driven units' residuals
    assert 0.22 < estimate.coefficients[0] < 0.3


def test_ols_needs_no_estimate_and_unknown_options_are_refused():
    stim = Stimulus(bar_design(), FOV)
    data = np.random.default_rng(0).standard_normal((5, 120))
    assert estimate_noise(data, stim, TR, "ols") == NoiseModel()
    assert [noise_order(o) for o in ("ols", "ar1", "ar3")] == [0, 1, 3]
    for bad in ("ar0", "ar9", "arma", "white"):
        with pytest.raises(ValueError, match="noise model"):
            noise_order(bad)
