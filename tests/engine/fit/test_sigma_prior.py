"""The empirical-Bayes prior on log σ (issue 37): its estimate, each unit's posterior mode, what it
does to σ's recovery and intervals, and the same answer on every backend."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import FOV, TR, bar_design
from helpers import backend_result
from prfmap.engine import FitOptions, NoiseModel, Stimulus, catalog, estimate_sigma_prior, fit_prf, predict
from prfmap.engine.catalog import Z95
from prfmap.engine.catalog.result import Uncertainty
from prfmap.engine.fit.sigma_prior import (
    PROFILE_POINTS,
    SigmaPrior,
    map_log_sigma,
    posterior_uncertainty,
    prior_from_profiles,
    profile_limits,
    profile_upper_limit,
)

RUNS = (148, 148)
GRID = np.linspace(np.log(0.1), np.log(20.0), PROFILE_POINTS)


def gaussian_profiles(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Profiles ((log σ − m) / se)² of units whose true log σ follows log σ ~ N(−0.9 + 0.14 ecc, 0.2²),
    each measured as m with error se (from sharp to nearly flat); returns profiles, ecc, se."""
    ecc = rng.uniform(0.0, 9.0, n)
    true = -0.9 + 0.14 * ecc + rng.normal(0.0, 0.2, n)
    se = np.exp(rng.uniform(np.log(0.05), np.log(3.0), n))
    measured = true + rng.normal(0.0, 1.0, n) * se
    return ((GRID[None, :] - measured[:, None]) / se[:, None]) ** 2, ecc, se


def test_the_marginal_likelihood_recovers_the_prior_whatever_each_unit_s_precision():
    profiles, ecc, _ = gaussian_profiles(4000, np.random.default_rng(0))
    prior = prior_from_profiles(GRID, profiles, ecc)
    assert prior is not None and prior.units == 4000
    assert abs(prior.intercept + 0.9) < 0.05 and abs(prior.slope - 0.14) < 0.01, prior
    assert abs(prior.spread - 0.2) < 0.03, prior


def test_too_few_units_give_no_prior():
    profiles, ecc, _ = gaussian_profiles(10, np.random.default_rng(1))
    assert prior_from_profiles(GRID, profiles, ecc) is None


def test_the_posterior_mode_of_gaussian_profiles_is_the_precision_weighted_mean():
    rng = np.random.default_rng(2)
    profiles, ecc, se = gaussian_profiles(500, rng)
    measured = GRID[np.argmin(profiles, axis=1)]  # on the grid: the profiles' own minima
    profiles = ((GRID[None, :] - measured[:, None]) / se[:, None]) ** 2
    prior = SigmaPrior(-0.9, 0.14, 0.2, 500)
    mean = prior.mean(ecc)
    expected = (measured / se**2 + mean / 0.2**2) / (1 / se**2 + 1 / 0.2**2)
    inside = (expected > GRID[1]) & (expected < GRID[-2])
    step = GRID[1] - GRID[0]
    got = map_log_sigma(GRID, profiles, ecc, prior)
    assert np.abs(got - expected)[inside].max() < 0.1 * step


def simulated(level: float, n: int = 400, seed: int = 3) -> tuple[dict, np.ndarray, Stimulus, np.ndarray]:
    """pRFs whose log σ grows with eccentricity (0.25° + 0.12 ecc, spread 0.2), AR(1) noise."""
    rng = np.random.default_rng(seed)
    stim = Stimulus(np.concatenate([bar_design(RUNS[0], size=101)] * 2), FOV, run_lengths=RUNS)
    ecc, angle = 9 * np.sqrt(rng.uniform(0, 1, n)), rng.uniform(0, 2 * np.pi, n)
    truth = {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": (0.25 + 0.12 * ecc) * np.exp(rng.normal(0, 0.2, n)),
        "amplitude": rng.uniform(1, 3, n),
        "baseline": np.zeros(n),
    }
    clean = predict(truth, stim, TR, dtype="float64")
    noise = np.empty_like(clean)
    start = 0
    for frames in RUNS:
        e = rng.standard_normal((n, frames))
        for t in range(1, frames):
            e[:, t] = 0.3 * e[:, t - 1] + np.sqrt(1 - 0.09) * e[:, t]
        noise[:, start : start + frames] = e
        start += frames
    nuisance = np.zeros((sum(RUNS), 2))
    nuisance[: RUNS[0], 0] = nuisance[RUNS[0] :, 1] = 1.0
    return truth, clean + level * clean.std(axis=1, keepdims=True) * noise, stim, nuisance


def test_the_prior_lowers_sigma_s_error_keeps_its_intervals_and_leaves_the_floor():
    """At an SNR where σ's likelihood is flat below the bar's width (noise 0.9 of the response's SD)."""
    truth, data, stim, nuisance = simulated(0.9)
    noise = NoiseModel("ar1", (0.3,), 1)
    plain = fit_prf(data, stim, TR, nuisance=nuisance, noise=noise)
    mapped = fit_prf(data, stim, TR, nuisance=nuisance, noise=noise, sigma_prior="eccentricity")
    record = mapped.settings.sigma_prior
    assert record["option"] == "eccentricity" and record["units"] > 300
    assert 0.1 < record["log_sigma_slope_per_deg"] < 0.2 and 0.15 < record["log_sigma_spread"] < 0.35
    assert plain.settings.sigma_prior is None
    # the maximum-likelihood σ and its errors are kept beside the posterior's: the fit's without it
    kept = mapped.uncertainty
    refined = np.isfinite(plain.uncertainty.se["sigma"])
    np.testing.assert_allclose(kept.likelihood["sigma"], plain.params["sigma"], rtol=1e-6, equal_nan=True)
    for errors, plain_errors in (
        (kept.likelihood_se, plain.uncertainty.se),
        (kept.noise_se, plain.uncertainty.noise_se),
    ):
        np.testing.assert_allclose(errors["sigma"][refined], plain_errors["sigma"][refined], rtol=1e-6)
    assert not np.allclose(kept.likelihood["sigma"][refined], mapped.params["sigma"][refined])
    assert plain.uncertainty.likelihood == {} and plain.uncertainty.likelihood_se == {}
    out = {}
    for name, res in (("plain", plain), ("prior", mapped)):
        keep = ~catalog.doubtful(res.status) & np.isfinite(res.uncertainty.se["sigma"])
        unc, sigma = res.uncertainty, res.params["sigma"]
        floor = (catalog.status_codes(res.status) & catalog.STATUS_BITS["size_at_floor"]) > 0
        out[name] = {
            "error": float(np.median(np.abs(sigma - truth["sigma"])[keep])),
            "coverage": float(
                np.mean(
                    ((unc.lower["sigma"] <= truth["sigma"]) & (truth["sigma"] <= unc.upper["sigma"]))[keep]
                )
            ),
            "floor": float(np.mean(floor[keep])),
        }
    assert out["prior"]["error"] < 0.8 * out["plain"]["error"], out
    # the maximum-likelihood interval (σ's likelihood path) holds the truth at its nominal rate; the
    # prior's (the posterior widened to hold it) never less, and more: its spread is wider than the σ's
    # scatter (docs/validation.md, "Where σ's intervals over- and under-cover")
    assert 0.93 <= out["plain"]["coverage"] <= 0.97, out
    assert out["prior"]["coverage"] >= out["plain"]["coverage"], out
    assert out["prior"]["floor"] <= 0.01 < out["plain"]["floor"], out


def test_the_participant_estimate_is_the_prior_a_fit_of_the_pilot_units_states():
    """``estimate_sigma_prior`` stops the fit after the prior (no final fit, no standard errors) and
    leaves units without data out of its pilot: the prior is the one a whole fit of those units reports."""
    _, data, stim, nuisance = simulated(0.9, n=120, seed=5)
    options = FitOptions(noise=NoiseModel("ar1", (0.3,), 1))
    fitted = fit_prf(data, stim, TR, options=options, nuisance=nuisance, sigma_prior="eccentricity")
    outside = np.full((40, data.shape[1]), np.nan)  # e.g. outside --roi: no pilot units
    prior = estimate_sigma_prior(np.vstack([outside, data]), stim, TR, options=options, nuisance=nuisance)
    assert prior is not None and prior.describe() == fitted.settings.sigma_prior
    assert estimate_sigma_prior(outside, stim, TR, options=options, nuisance=nuisance) is None


MAPPED = (
    "import numpy as np\n"
    "from test_sigma_prior import simulated\n"
    "from conftest import TR\n"
    "from prfmap.engine import NoiseModel, fit_prf\n"
    "truth, data, stim, nuisance = simulated(0.9, n=120, seed=5)\n"
    "noise = NoiseModel('ar1', (0.3,), 1)\n"
    "res = fit_prf(data, stim, TR, nuisance=nuisance, noise=noise, sigma_prior='eccentricity')\n"
    "record = res.settings.sigma_prior\n"
    "keys = ('log_sigma_intercept', 'log_sigma_slope_per_deg', 'log_sigma_spread')\n"
    "result = {'sigma': res.params['sigma'].tolist(), 'se': res.uncertainty.se['sigma'].tolist(),\n"
    "          'prior': [record[k] for k in keys]}\n"
)


def test_the_posterior_sigma_agrees_across_backends(tmp_path, backend):
    if backend != "jax":
        pytest.skip("the cross-backend comparison runs once, in the jax session")
    results = {b: backend_result(b, MAPPED, tmp_path) for b in ("jax", "torch", "tensorflow")}
    ref = results["jax"]
    for other in ("torch", "tensorflow"):
        np.testing.assert_allclose(results[other]["prior"], ref["prior"], atol=0.01, err_msg=other)
        for key in ("sigma", "se"):
            rel = np.abs(np.array(results[other][key]) - np.array(ref[key])) / np.array(ref[key])
            assert np.nanmedian(rel) <= 0.02, (key, other, np.nanmedian(rel))


def test_a_tight_prior_never_makes_sigma_s_interval_leave_out_what_the_data_allow():
    """A prior estimated from data whose σ are all biased one way can be tight (spread 0.05); σ's
    reported interval still holds the maximum-likelihood interval on both sides, and its standard
    error is the one that interval implies where the posterior's is smaller."""
    sigma_ml = np.array([0.3, 1.0, 2.0, 0.2])
    lower = np.array([0.2, 0.8, 1.2, 0.2])  # the last: on the floor, an upper limit only
    upper = np.array([0.9, 1.3, 3.5, 0.7])
    se = {"x": np.full(4, 0.1), "sigma": (np.log(upper) - np.log(lower)) / (2 * Z95) * sigma_ml}
    noise_se = {"x": np.full(4, 0.08), "sigma": 0.9 * se["sigma"]}
    unc = Uncertainty(se, {"sigma": lower}, {"sigma": upper}, 100.0, 0.0, noise_se=noise_se)
    prior = SigmaPrior(np.log(0.25), 0.0, 0.05, 500)
    mapped = np.array([0.26, 0.6, 0.27, 0.25])  # posterior modes pulled toward the prior's 0.25°
    out = posterior_uncertainty(unc, mapped, prior, sigma_ml)
    np.testing.assert_array_equal(out.likelihood["sigma"], sigma_ml)  # what the data alone say, kept
    np.testing.assert_array_equal(out.likelihood_se["sigma"], se["sigma"])
    assert out.noise_se is noise_se  # the maximum-likelihood errors without the HRF term, as they were
    assert np.all(out.lower["sigma"] <= lower) and np.all(out.upper["sigma"] >= upper)
    assert np.all(out.lower["sigma"] <= mapped) and np.all(out.upper["sigma"] >= mapped)
    data_sd = (np.log(upper) - np.log(lower)) / (2 * Z95)
    posterior_sd = 1 / np.sqrt(1 / data_sd**2 + 1 / 0.05**2)
    spanned = (np.log(out.upper["sigma"]) - np.log(out.lower["sigma"])) / (2 * Z95)
    np.testing.assert_allclose(out.se["sigma"], mapped * np.fmax(posterior_sd, spanned), rtol=1e-12)
    assert np.all(out.se["sigma"] > mapped * posterior_sd)  # the tight prior's error alone: too small
    np.testing.assert_array_equal(out.se["x"], se["x"])


def test_profile_limits_are_where_the_likelihood_ratio_reaches_its_level():
    """On Gaussian profiles in log σ the two-sided limits are the mode ± 1.96 SE; a profile rising from
    the floor has the floor as its lower end and its one-sided limit at 1.645 SE."""
    grid = np.linspace(np.log(0.2), np.log(20.0), 64)
    mode, se = np.array([np.log(1.0), np.log(3.0)]), np.array([0.3, 0.5])
    profiles = ((grid[None, :] - mode[:, None]) / se[:, None]) ** 2
    lower, upper = profile_limits(grid, profiles, Z95**2)
    # linear interpolation of a parabola between grid points: within a few percent of the step
    step = grid[1] - grid[0]
    np.testing.assert_allclose(np.log(lower), mode - Z95 * se, atol=0.05 * step)
    np.testing.assert_allclose(np.log(upper), mode + Z95 * se, atol=0.05 * step)
    rising = ((grid - grid[0]) / 0.4) ** 2
    low, high = profile_limits(grid, rising[None, :], Z95**2)
    assert low[0] == pytest.approx(0.2)
    one_sided = profile_upper_limit(grid, rising[None, :])[0]
    assert np.log(one_sided) - grid[0] == pytest.approx(1.6448536 * 0.4, abs=0.05 * step)
    assert np.log(high[0]) - grid[0] == pytest.approx(Z95 * 0.4, abs=0.05 * step)
    flat = profile_upper_limit(grid, np.zeros((1, grid.size)))
    assert flat[0] == pytest.approx(20.0)
