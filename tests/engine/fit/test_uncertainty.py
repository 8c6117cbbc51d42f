"""Per-unit uncertainty (issue 17): Laplace standard errors against an independent float64
computation, interval coverage under AR(1) noise, the ``uncertain`` flag, and the same standard
errors on every backend."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from statsmodels.stats.sandwich_covariance import S_nw_panel, weights_bartlett

from conftest import FOV, TR, bar_design, random_params
from helpers import backend_result
from prfmap.engine import HRF, NoiseModel, Stimulus, catalog, fit_prf, predict
from prfmap.engine.fit import HRF_VARIABILITY
from prfmap.engine.fit.uncertainty import (
    PATH_REACH_LIMIT,
    PATH_STEPS,
    Z95,
    CovarianceRecipe,
    Uncertainty,
    _covariance,
    _inverse,
    doubtful_uncertainty,
    parameter_uncertainty,
    root_deviance_reach,
)
from prfmap.engine.hrf import CANONICAL
from prfmap.engine.models import get_model
from prfmap.engine.problem import Units, make_problem, nuisance_basis

RUNS = (148, 148)


def two_run_stimulus() -> Stimulus:
    return Stimulus(np.concatenate([bar_design(RUNS[0])] * 2), FOV, run_lengths=RUNS)


def run_constants() -> np.ndarray:
    out = np.zeros((sum(RUNS), 2))
    out[: RUNS[0], 0] = 1.0
    out[RUNS[0] :, 1] = 1.0
    return out


def ar1_data(params: dict, stim: Stimulus, rho: float, level: float, seed: int) -> np.ndarray:
    """Noise-free responses plus AR(1) noise (run by run) of ``level`` times each response's SD."""
    rng = np.random.default_rng(seed)
    clean = predict(params, stim, TR, dtype="float64")
    noise = np.empty_like(clean)
    start = 0
    for n in RUNS:
        e = rng.standard_normal((clean.shape[0], n))
        block = np.empty_like(e)
        block[:, 0] = e[:, 0]
        for t in range(1, n):
            block[:, t] = rho * block[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
        noise[:, start : start + n] = block
        start += n
    return clean + level * clean.std(axis=1, keepdims=True) * noise


def independent_standard_errors(
    params: dict,
    data: np.ndarray,
    stim: Stimulus,
    noise: NoiseModel,
    nuisance: np.ndarray,
    covariance: str = "laplace",
    path: bool = True,
    hrf_term: bool = True,
) -> dict:
    """Standard errors of x, y, σ by finite differences of ``predict`` in float64 numpy.

    The whitened, projected Jacobian of (x, y, log σ, amplitude); ``laplace``: the residual variance
    over its degrees of freedom times the inverse information; ``sandwich``: that plus the inverse
    information around the difference of statsmodels' panel Newey–West meat (runs as the panel's
    groups, Bartlett weights) and its expectation where the model is right (the same kernel over
    the residual's projection ``I − q qᵀ − H`` times the residual variance); then the HRF term
    (:data:`HRF_VARIABILITY`) from predictions with the HRF's delay and dispersion moved by ± their
    spread; last, x's, y's and log σ's rows and columns times their likelihood-path factor: along each
    one's profile path by the Laplace covariance, the amplitude least-squares at every point, where
    the residual sum of squares has risen by 1.96² residual variances each way (``np.interp``), over
    1.96, at least 1 (x and y: the two sides' mean; log σ: each side its own, which sets that end of
    σ's interval, their mean its standard error; ``path=False``: the curvature's alone;
    ``hrf_term=False``: without the HRF term, as ``Uncertainty.noise_se``).
    """
    w = noise.whitening(stim.run_lengths)
    q, _ = np.linalg.qr(w @ nuisance_basis(stim.n_frames, nuisance))
    out = {k: [] for k in ("x", "y", "sigma", "sigma_lower", "sigma_upper")}
    for i in range(len(data)):
        p = {k: float(v[i]) for k, v in params.items()}

        def pred(values: np.ndarray, hrf: HRF = CANONICAL, p=p) -> np.ndarray:
            x, y, log_sigma, amplitude = values
            q_p = {**p, "x": x, "y": y, "sigma": np.exp(log_sigma), "amplitude": amplitude, "baseline": 0.0}
            series = (
                w @ predict({k: np.array([v]) for k, v in q_p.items()}, stim, TR, dtype="float64", hrf=hrf)[0]
            )
            return series - q @ (q.T @ series)

        theta = np.array([p["x"], p["y"], np.log(p["sigma"]), p["amplitude"]])
        steps = 1e-5 * (1 + np.abs(theta))
        jac = np.stack(
            [
                (pred(theta + s * e) - pred(theta - s * e)) / (2 * s)
                for s, e in zip(steps, np.eye(4), strict=True)
            ],
            axis=1,
        )
        y = w @ data[i]
        resid = (y - q @ (q.T @ y)) - pred(theta)
        dof = stim.n_frames - q.shape[1] - 4
        inverse = np.linalg.inv(jac.T @ jac)
        cov = inverse * (resid @ resid) / dof
        reaches = path_reaches(pred, y - q @ (q.T @ y), theta, cov, (resid @ resid) / dof) if path else None
        if covariance == "sandwich":
            lags = int(np.floor(4 * (np.mean(RUNS) / 100) ** (2 / 9)))
            groups = [(int(a), int(a + n)) for a, n in zip(np.cumsum((0, *RUNS[:-1])), RUNS, strict=True)]
            meat = S_nw_panel(jac * resid[:, None], weights_bartlett(lags), groups)
            run = np.repeat(np.arange(len(RUNS)), RUNS)
            distance = np.abs(np.subtract.outer(np.arange(stim.n_frames), np.arange(stim.n_frames)))
            kernel = np.where(run[:, None] == run[None, :], np.clip(1 - distance / (lags + 1), 0, None), 0)
            projection = np.eye(stim.n_frames) - q @ q.T - jac @ inverse @ jac.T
            expected = jac.T @ (kernel * projection) @ jac * (resid @ resid) / dof
            cov = cov + inverse @ (meat - expected) @ inverse
        for name, sd in HRF_VARIABILITY if hrf_term else ():
            for sign in (1.0, -1.0):
                moved = replace(CANONICAL, **{name: getattr(CANONICAL, name) + sign * sd})
                step = inverse @ (jac.T @ (pred(theta, moved) - pred(theta)))
                cov += 0.5 * np.outer(step, step)
        sides = [1.0, 1.0]
        scale = np.ones(4)
        if reaches is not None:
            scale[:2] = [max(1.0, sum(r) / (2 * Z95)) for r in reaches[:2]]
            sides = [max(1.0, r / Z95) for r in reaches[2]]
            scale[2] = sum(sides) / 2
        cov = cov * np.outer(scale, scale)
        se = np.sqrt(np.diag(cov))
        out["x"].append(se[0])
        out["y"].append(se[1])
        out["sigma"].append(se[2] * p["sigma"])
        # σ's interval: log σ ∓ 1.96 × the curvature's SD times its own side's path factor
        out["sigma_lower"].append(p["sigma"] * np.exp(-Z95 * se[2] * sides[0] / scale[2]))
        out["sigma_upper"].append(p["sigma"] * np.exp(Z95 * se[2] * sides[1] / scale[2]))
    return {k: np.array(v) for k, v in out.items()}


def path_reaches(pred, y: np.ndarray, theta: np.ndarray, cov: np.ndarray, variance: float) -> list:
    """x's, y's and log σ's likelihood-path reaches below and above the estimate
    (``independent_standard_errors``), in float64 numpy."""

    def rss(values: np.ndarray) -> float:
        unit = pred(np.concatenate([values[:3], [1.0]]))
        return float(y @ y - (unit @ y) ** 2 / (unit @ unit))

    base = rss(theta)
    reaches = []
    for j in (0, 1, 2):
        direction = cov[:, j] / np.sqrt(cov[j, j])
        reach = []
        for sign in (-1.0, 1.0):
            roots = [
                np.sqrt(max(rss(theta + sign * t * direction) - base, 0.0) / variance) for t in PATH_STEPS
            ]
            reach.append(float(np.interp(Z95, [0.0, *roots], [0.0, *PATH_STEPS])))
        reaches.append(reach)
    return reaches


def test_standard_errors_match_an_independent_float64_computation():
    """At the fit's own estimates, the engine's standard errors (whitened, Laplace, HRF term) equal a
    finite-difference computation on ``predict`` within 2 %."""
    stim = two_run_stimulus()
    truth = random_params("gauss", 12, np.random.default_rng(3), max_ecc=6.0)
    truth["sigma"] = np.clip(truth["sigma"], 0.8, 2.5)
    data = ar1_data(truth, stim, 0.3, 0.7, seed=4)
    noise = NoiseModel("ar1", (0.3,), 1)
    result = fit_prf(data, stim, TR, nuisance=run_constants(), noise=noise)
    fitted = {k: result.params[k] for k in ("x", "y", "sigma", "amplitude")}
    expected = independent_standard_errors(fitted, data, stim, noise, run_constants())
    for key in ("x", "y", "sigma"):
        np.testing.assert_allclose(result.uncertainty.se[key], expected[key], rtol=0.02, err_msg=key)
    # σ's interval: in log σ, each side its own path's reach
    for end in ("lower", "upper"):
        np.testing.assert_allclose(
            getattr(result.uncertainty, end)["sigma"], expected[f"sigma_{end}"], rtol=0.02, err_msg=end
        )
    noise_only = independent_standard_errors(fitted, data, stim, noise, run_constants(), hrf_term=False)
    for key in ("x", "y", "sigma"):
        np.testing.assert_allclose(result.uncertainty.noise_se[key], noise_only[key], rtol=0.02, err_msg=key)
        assert np.all(result.uncertainty.noise_se[key] < result.uncertainty.se[key])


def test_the_likelihood_path_reach_is_1_96_where_the_deviance_is_quadratic_and_further_where_flatter():
    """``root_deviance_reach``: the first crossing of 1.96 from the estimate, interpolated; quadratic
    extrapolation beyond the last step, capped."""
    quadratic = np.asarray(PATH_STEPS)[None, :]
    flatter = 0.8 * quadratic
    steeper = 1.25 * quadratic
    turning = np.full((1, len(PATH_STEPS)), 1.0)
    turning[0, 0] = 2.5  # crosses before the first step, then falls back
    short = np.full((1, len(PATH_STEPS)), 0.1)  # far flatter: extrapolated, then capped
    reach = root_deviance_reach(PATH_STEPS, np.concatenate([quadratic, flatter, steeper, turning, short]))
    np.testing.assert_allclose(reach[:3], [Z95, Z95 / 0.8, Z95 / 1.25], rtol=1e-12)
    np.testing.assert_allclose(reach[3], PATH_STEPS[0] * Z95 / 2.5, rtol=1e-12)
    assert reach[4] == PATH_REACH_LIMIT * PATH_STEPS[-1]


def test_the_likelihood_path_leaves_high_snr_intervals_alone_and_widens_low_snr_ones():
    """At high SNR the residual sum of squares is quadratic over the interval and the centre's and σ's
    errors are the curvature's; at low SNR some units' are wider, none narrower, and σ's interval is
    asymmetric in log σ where its likelihood is."""
    stim = two_run_stimulus()
    truth = random_params("gauss", 40, np.random.default_rng(8), max_ecc=6.0)
    truth["sigma"] = np.clip(truth["sigma"], 0.5, 2.0)
    noise = NoiseModel("ar1", (0.3,), 1)
    ratios, skew = {}, {}
    for level in (0.05, 1.5):
        data = ar1_data(truth, stim, 0.3, level, seed=9)
        res = fit_prf(data, stim, TR, nuisance=run_constants(), noise=noise)
        curvature = independent_standard_errors(
            {k: res.params[k] for k in ("x", "y", "sigma", "amplitude")},
            data,
            stim,
            noise,
            run_constants(),
            path=False,
        )
        ratios[level] = np.concatenate([res.uncertainty.se[k] / curvature[k] for k in ("x", "y", "sigma")])
        log_ends = np.log(res.uncertainty.upper["sigma"] * res.uncertainty.lower["sigma"])
        skew[level] = np.abs(log_ends - 2 * np.log(res.params["sigma"]))
    centre, sigma = slice(0, 80), slice(80, 120)
    assert np.all(np.abs(ratios[0.05][centre] - 1) < 0.02), ratios[0.05]
    # a pRF small against the bar (σ 0.53° at 0.78°) is a few percent non-quadratic even at this SNR
    assert (
        np.all(np.abs(ratios[0.05][sigma] - 1) < 0.05) and np.median(np.abs(ratios[0.05][sigma] - 1)) < 0.005
    )
    assert np.all(ratios[1.5] > 0.98) and np.mean(ratios[1.5] > 1.03) > 0.1, ratios[1.5]
    assert np.mean(ratios[1.5][sigma] > 1.03) > 0.1, ratios[1.5][sigma]
    assert np.all(skew[0.05] < 0.03) and np.mean(skew[1.5] > 0.05) > 0.1, skew


def interval_coverage(res, truth: dict) -> dict:
    """Share of the fit's unflagged units whose 95 % intervals of x, y and σ hold the truth."""
    keep = ~catalog.doubtful(res.status) & np.isfinite(res.params["x"])
    unc = res.uncertainty
    inside = {k: np.abs(res.params[k] - truth[k]) <= Z95 * unc.se[k] for k in ("x", "y")}
    inside["sigma"] = (unc.lower["sigma"] <= truth["sigma"]) & (truth["sigma"] <= unc.upper["sigma"])
    return {k: float(np.mean(v[keep])) for k, v in inside.items()}


def test_sandwich_standard_errors_match_statsmodels_newey_west():
    """The sandwich covariance (``covariance="sandwich"``) equals one built on statsmodels' panel
    Newey–West meat from a float64 finite-difference Jacobian, within 2 %; and it differs from the
    Laplace one (the test would pass for no reason if the option changed nothing)."""
    stim = two_run_stimulus()
    truth = random_params("gauss", 12, np.random.default_rng(3), max_ecc=6.0)
    truth["sigma"] = np.clip(truth["sigma"], 0.8, 2.5)
    data = ar1_data(truth, stim, 0.5, 0.7, seed=4)  # ρ 0.5 noise, fitted as ρ 0.3: not white
    noise = NoiseModel("ar1", (0.3,), 1)
    result = fit_prf(data, stim, TR, nuisance=run_constants(), noise=noise, covariance="sandwich")
    assert result.settings.covariance == "sandwich"
    fitted = {k: result.params[k] for k in ("x", "y", "sigma", "amplitude")}
    expected = independent_standard_errors(fitted, data, stim, noise, run_constants(), "sandwich")
    laplace = independent_standard_errors(fitted, data, stim, noise, run_constants())
    for key in ("x", "y", "sigma"):
        np.testing.assert_allclose(result.uncertainty.se[key], expected[key], rtol=0.02, err_msg=key)
        assert np.median(np.abs(expected[key] / laplace[key] - 1)) > 0.05, key


def test_sandwich_intervals_hold_under_autocorrelation_the_noise_model_ignores():
    """AR(1) noise (ρ 0.3) fitted as white noise (OLS): the Laplace intervals are too narrow (x / y / σ
    0.864 / 0.846 / 0.884), the sandwich's (autocorrelation-consistent) come closer to 95 %
    (0.914 / 0.912 / 0.926: Bartlett's weights over 4 lags leave out part of the long-run variance,
    as HAC estimators do in short series)."""
    stim = two_run_stimulus()
    rng = np.random.default_rng(5)
    truth = random_params("gauss", 500, rng, max_ecc=7.0)
    data = ar1_data(truth, stim, 0.3, 1.0, seed=6)
    coverage = {}
    for option in ("laplace", "sandwich"):
        res = fit_prf(data, stim, TR, nuisance=run_constants(), noise="ols", covariance=option)
        coverage[option] = interval_coverage(res, truth)
    for key, share in coverage["sandwich"].items():
        assert 0.88 <= share <= 0.98, (key, coverage)
        assert coverage["laplace"][key] < share - 0.02, (key, coverage)


def test_an_unknown_covariance_is_refused_before_the_fit():
    with pytest.raises(ValueError, match="covariance must be one of"):
        fit_prf(np.zeros((2, sum(RUNS))), two_run_stimulus(), TR, covariance="bootstrap")


def test_prewhitened_intervals_hold_the_truth_and_ordinary_ones_do_not():
    """AR(1) noise (ρ 0.3): generalised least squares gives 93–97 % coverage of x, y and σ; ordinary
    least squares, whose residual variance ignores the autocorrelation, covers less."""
    stim = two_run_stimulus()
    rng = np.random.default_rng(5)
    truth = random_params("gauss", 500, rng, max_ecc=7.0)
    data = ar1_data(truth, stim, 0.3, 1.0, seed=6)
    coverage = {}
    for option, noise in (("gls", NoiseModel("ar1", (0.3,), 1)), ("ols", "ols")):
        res = fit_prf(data, stim, TR, nuisance=run_constants(), noise=noise)
        coverage[option] = interval_coverage(res, truth)
    for key, share in coverage["gls"].items():
        assert 0.92 <= share <= 0.98, (key, coverage)
    assert coverage["ols"]["x"] < coverage["gls"]["x"] - 0.03
    assert coverage["ols"]["y"] < coverage["gls"]["y"] - 0.03


def test_singular_information_gives_infinite_errors_and_the_uncertain_flag():
    info = np.array([[[2.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]])
    inverse = _inverse(info)
    np.testing.assert_allclose(inverse[0], np.diag([0.5, 1.0]))
    assert np.isinf(np.diagonal(inverse[1])).all()
    params = {"x": np.array([1.0, 2.0, 9.5, 1.0, np.nan]), "y": np.zeros(5), "sigma": np.ones(5)}
    unc = Uncertainty(
        se={
            "x": np.array([0.1, np.inf, 0.5, 2.5, np.nan]),
            "y": np.full(5, 0.1),
            "sigma": np.full(5, 0.1),
            "eccentricity": np.array([0.1, np.inf, 0.5, 2.5, np.nan]),
        },
        lower={"sigma": np.full(5, 0.8)},
        upper={"sigma": np.full(5, 1.2)},
    )
    # fine; singular; the centre's interval leaves a 10° field; centre SE above a fifth of the
    # radius; not fitted
    assert doubtful_uncertainty(unc, params, 10.0).tolist() == [False, True, True, True, False]
    wide = Uncertainty(unc.se, unc.lower, {"sigma": np.full(5, 11.0)})
    assert doubtful_uncertainty(wide, params, 10.0)[0]  # σ's interval wider than the radius


def test_refined_units_have_errors_and_grid_only_units_none(stim):
    """Standard errors for every refined unit (and with ``refine="none"`` every fitted one); units the
    refinement skipped (grid r² below ``refine_r2_min``) get NaN and are never flagged uncertain."""
    params = random_params("gauss", 30, np.random.default_rng(8))
    data = predict(params, stim, TR, dtype="float64") + np.random.default_rng(9).normal(0, 0.5, (30, 120))
    data[:4] = np.random.default_rng(10).normal(0, 1, (4, 120))  # noise only
    res = fit_prf(data, stim, TR, refine_r2_min=0.3)
    codes = catalog.status_codes(res.status)
    fitted = np.isfinite(res.params["x"])
    grid_only = (codes & catalog.STATUS_BITS["grid_only"]) != 0
    assert grid_only.any() and (fitted & ~grid_only).any()
    for key in ("x", "y", "sigma", "amplitude", "eccentricity", "polar_angle"):
        assert (res.uncertainty.se[key][fitted & ~grid_only] > 0).all(), key
        assert np.isnan(res.uncertainty.se[key][~fitted | grid_only]).all(), key
    assert not (codes[grid_only] & catalog.STATUS_BITS["uncertain"]).any()
    assert set(res.stat_maps()) >= {
        ("se", "x"),
        ("se", "polarangle"),
        ("ci95lower", "sigma"),
        ("ci95upper", "sigma"),
    }
    unrefined = fit_prf(data, stim, TR, refine="none")
    assert (unrefined.uncertainty.se["x"][np.isfinite(unrefined.params["x"])] > 0).all()


def test_an_estimate_at_the_end_of_its_range_is_on_a_bound_with_a_one_sided_interval(stim):
    """CSS fitted to Gaussian pRFs: n ends at 1, the end of its range. Such a unit is flagged at_bound,
    n's standard error is finite and positive (not the 0 of a vanishing derivative), its 95 % interval
    is one-sided up to exactly 1, and the centre's errors are those of a regular fit, not infinite."""
    rng = np.random.default_rng(31)
    truth = random_params("gauss", 80, rng)
    data = predict(truth, stim, TR, dtype="float64") + rng.normal(0, 0.3, (80, stim.n_frames))
    res = fit_prf(data, stim, TR, model="css")
    n, unc = res.params["n"], res.uncertainty
    ends = n >= 1 - 1e-6
    assert ends.sum() >= 3, ends.sum()
    codes = catalog.status_codes(res.status)
    assert ((codes[ends] & catalog.STATUS_BITS["at_bound"]) > 0).all()
    se = unc.se["n"][ends]
    assert np.all(se > 0) and np.isfinite(se).mean() >= 0.8, se  # inf: the information is singular
    assert np.all(unc.upper["n"][ends] == 1.0)
    np.testing.assert_allclose(unc.lower["n"][ends], np.maximum(0.0, n[ends] - 1.6448536 * se), rtol=1e-6)
    regular = np.isfinite(se)
    for key in ("x", "y", "sigma"):
        assert np.all(np.isfinite(unc.se[key][ends][regular]) & (unc.se[key][ends][regular] > 0)), key
    uncertain = (codes[ends] & catalog.STATUS_BITS["uncertain"]) > 0
    assert np.all(uncertain[~regular])
    inside = np.isfinite(n) & ~ends & ((codes & catalog.STATUS_BITS["grid_only"]) == 0)
    assert np.all(unc.lower["n"][inside] < n[inside]) and np.all(n[inside] < unc.upper["n"][inside])


def test_a_fixed_parameter_has_no_standard_error(stim):
    """Issue 36: DN's baseline_norm, held at 1, was written with a standard-error map of zeros."""
    rng = np.random.default_rng(41)
    truth = random_params("dn", 12, rng)
    data = predict(truth, stim, TR, "dn", dtype="float64") + rng.normal(0, 0.3, (12, stim.n_frames))
    res = fit_prf(data, stim, TR, model="dn")
    assert "baseline_norm" not in res.uncertainty.se and "amplitude_norm" in res.uncertainty.se
    assert ("se", "baselinenorm") not in res.stat_maps() and ("se", "amplitudenorm") in res.stat_maps()


ERRORS = (
    "import numpy as np\n"
    "from test_uncertainty import two_run_stimulus, ar1_data, run_constants\n"
    "from conftest import random_params, TR\n"
    "from prfmap.engine import NoiseModel, fit_prf\n"
    "stim = two_run_stimulus(); truth = random_params('gauss', 60, np.random.default_rng(11))\n"
    "data = ar1_data(truth, stim, 0.3, 0.8, seed=12)\n"
    "result = {}\n"
    "for option in ('laplace', 'sandwich'):\n"
    "    res = fit_prf(data, stim, TR, nuisance=run_constants(), noise=NoiseModel('ar1', (0.3,), 1),\n"
    "                  covariance=option)\n"
    "    result |= {f'{option} {k}': res.uncertainty.se[k].tolist() for k in ('x', 'y', 'sigma')}\n"
)


def test_standard_errors_agree_across_backends(tmp_path, backend):
    """Issues 17 and 37: the median relative difference of the Laplace and the sandwich standard
    errors is at most 2 %."""
    if backend != "jax":
        pytest.skip("the cross-backend comparison runs once, in the jax session")
    results = {b: backend_result(b, ERRORS, tmp_path) for b in ("jax", "torch", "tensorflow")}
    for key in results["jax"]:
        ref = np.array(results["jax"][key])
        for other in ("torch", "tensorflow"):
            rel = np.abs(np.array(results[other][key]) - ref) / ref
            assert np.nanmedian(rel) <= 0.02, (key, other, np.nanmedian(rel))


def test_a_pRF_below_sigma_s_floor_gets_the_data_s_upper_limit_not_a_flag():
    """pRFs smaller than the aperture's pixel end on σ's floor: σ's upper limit comes from the profile
    likelihood (under a degree, where the Laplace curvature at the floor gave a median of 7°), the centre's
    standard errors are evaluated there, and the flag is not raised for what is estimated."""
    rng = np.random.default_rng(12)
    stim = Stimulus(np.concatenate([bar_design(RUNS[0], size=101)] * 2), FOV, run_lengths=RUNS)
    n = 200
    ecc, angle = rng.uniform(0.5, 6.0, n), rng.uniform(0, 2 * np.pi, n)
    pixel = FOV / 101
    truth = {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": np.full(n, 0.6 * pixel),
        "amplitude": rng.uniform(1, 3, n),
        "baseline": np.zeros(n),
    }
    data = ar1_data(truth, stim, 0.3, 1.0, seed=13)
    res = fit_prf(data, stim, TR, nuisance=run_constants(), noise=NoiseModel("ar1", (0.3,), 1))
    status = catalog.status_codes(res.status)
    floor = (status & catalog.STATUS_BITS["size_at_floor"]) > 0
    uncertain = (status & catalog.STATUS_BITS["uncertain"]) > 0
    unc = res.uncertainty
    assert floor.mean() > 0.5, floor.mean()
    upper = unc.upper["sigma"][floor]
    assert np.all(upper >= res.params["sigma"][floor]) and np.median(upper) < 2.0, np.median(upper)
    assert np.all(upper >= truth["sigma"][floor])
    assert uncertain[floor].mean() <= 0.05, uncertain[floor].mean()
    z = np.abs(res.params["x"] - truth["x"]) / unc.se["x"]
    assert 0.9 <= np.mean(z[floor] <= Z95) <= 1.0, np.mean(z[floor] <= Z95)


def test_errors_at_sigma_s_upper_limit_equal_each_unit_evaluated_alone(stim):
    """A floor unit's errors are also evaluated at σ's upper limit (batched with every unit's at its
    estimate): each unit's errors are what it gets evaluated alone, σ's upper end is the profile's
    limit where it gave one (the interval's own where it gave none), and the other errors the larger
    of those at the estimate and at that upper end."""
    rng = np.random.default_rng(21)
    model = get_model("gauss")
    prob = make_problem(model, stim, TR, 1, None, "float64", 0.5, CANONICAL)
    q = nuisance_basis(stim.n_frames, None)
    n = 9
    truth = random_params("gauss", n, rng)
    y = predict(truth, stim, TR, dtype="float64") + rng.normal(0, 0.5, (n, stim.n_frames))
    units = Units(np.arange(n), y - (y @ q) @ q.T, y, n)
    u = model.internal(model.from_report(truth))
    free, recipe = np.ones(u.shape[1]), CovarianceRecipe()
    k = model.names.index("sigma")
    limit = np.full(n, np.nan)
    limit[[1, 4, 6]] = 3.0 * truth["sigma"][[1, 4, 6]]  # profiled
    limit[7] = np.inf  # on the floor, no limit from the profile
    which = np.ones(n, dtype=bool)
    which[4] = False  # not wanted: no errors, its limit unused

    got = parameter_uncertainty(prob, units, u, free, recipe, mem_gb=1.0, which=which, floor_upper=limit)

    for i in range(n):
        one = np.arange(n) == i
        alone = _covariance(prob, units, u, free, recipe, 1.0, one)
        if not which[i]:
            assert all(np.isnan(values[i]) for values in got.se.values())
            continue
        upper = alone.upper["sigma"][i] if i == 7 else limit[i]
        if np.isnan(upper):
            expected = {key: values[i] for key, values in alone.se.items()}
        else:
            wider = u.copy()
            wider[i, k] = np.log(upper)
            there = _covariance(prob, units, wider, free, recipe, 1.0, one)
            expected = {
                key: values[i] if key == "sigma" else max(values[i], there.se[key][i])
                for key, values in alone.se.items()
            }
            assert there.se["x"][i] != alone.se["x"][i]
        np.testing.assert_allclose(
            got.upper["sigma"][i], upper if np.isfinite(upper) else alone.upper["sigma"][i]
        )
        for key, value in expected.items():
            np.testing.assert_allclose(got.se[key][i], value, rtol=1e-9, err_msg=f"unit {i}, {key}")
