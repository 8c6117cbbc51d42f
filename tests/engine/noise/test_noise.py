"""The noise model (issue 17): AR estimates against nilearn's, the whitening, and the correction for
the nuisance projection; a second noise model (tests/toys.py) through the same registry."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import cho_factor, solve_triangular, toeplitz

import toys
from conftest import FOV, TR, bar_design, random_params
from prfmap.engine import Stimulus, catalog, estimate_noise, fit_prf, predict
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
    for a, b in ((0, 30), (30, 50)):  # the contract's whitening is the AR model's arithmetic of before
        chol, _ = cho_factor(toeplitz(model.autocorrelation(b - a)), lower=True)
        before = solve_triangular(np.tril(chol), np.eye(b - a), lower=True)
        np.testing.assert_array_equal(w[a:b, a:b], before)


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


def lagged_correlation(w: np.ndarray, lag: int) -> float:
    """The units' mean normalised autocorrelation of ``w`` (units, frames) at ``lag``."""
    return float(np.mean(np.sum(w[:, lag:] * w[:, :-lag], axis=1) / np.sum(w * w, axis=1)))


def test_a_second_noise_model_is_one_class_and_one_entry_and_whitens_what_ar1_cannot():
    """AR(1) (φ 0.7) plus as much white noise (tests/toys.py's ``toyarw``): an ARMA(1, 1) process. The
    toy recovers φ and the white share through ``estimate_noise`` and whitens lags 1 and 2; the
    built-in AR(1) leaves lag 2 correlated. A fit takes either model and records which."""
    rng = np.random.default_rng(11)
    stim = Stimulus(np.concatenate([bar_design(148)] * 2), FOV, run_lengths=(148, 148))
    coloured = np.hstack([ar_noise([0.7], 600, 148, rng) * np.sqrt(1 - 0.49) for _ in range(2)])
    data = coloured + rng.standard_normal(coloured.shape)
    with toys.registered():
        assert catalog.get_noise_model("toyarw").implementation == "toys:AR1PlusWhite"
        toy = estimate_noise(data, stim, TR, "toyarw")
        ar1 = estimate_noise(data, stim, TR, "ar1")
        assert isinstance(toy, toys.AR1PlusWhite) and toy.units > 500
        assert toy.phi == pytest.approx(0.7, abs=0.06) and toy.white_fraction == pytest.approx(0.5, abs=0.06)
        centred = data - data.mean(axis=1, keepdims=True)
        by_toy, by_ar1 = (
            centred @ toy.whitening(stim.run_lengths).T,
            centred @ ar1.whitening(stim.run_lengths).T,
        )
        assert abs(lagged_correlation(by_toy, 1)) < 0.03 and abs(lagged_correlation(by_toy, 2)) < 0.03
        assert lagged_correlation(by_ar1, 2) > 0.06
        params = random_params("gauss", 20, rng)
        clean = predict(params, stim, TR, dtype="float64")
        signal = clean + 0.3 * clean.std(axis=1, keepdims=True) * data[:20]
        res = fit_prf(signal, stim, TR, noise=toy)
        assert res.settings.noise_model["option"] == "toyarw"
        assert res.settings.noise_model["coefficients"] == [round(toy.phi, 6), round(toy.white_fraction, 6)]
        assert np.median(np.hypot(res.params["x"] - params["x"], res.params["y"] - params["y"])) < 0.3
    with pytest.raises(ValueError, match="noise model"):
        estimate_noise(data, stim, TR, "toyarw")  # unregistered again
    with pytest.raises(ValueError, match="implementation"):
        catalog.register_noise_model(catalog.NoiseSpec("nothing", "no class"))
