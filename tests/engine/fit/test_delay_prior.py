"""The prior on each unit's HRF delay (issue 37): the delay each unit takes, what it does to σ's
one-sided bias from a late response, the final fit under the unit's own HRF, and every backend."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import FOV, TR, bar_design
from helpers import ar1_noise, backend_result
from prfmap.engine import FitOptions, NoiseModel, Stimulus, catalog, fit_prf, kernels, predict
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import compiled
from prfmap.engine.fit.delay_prior import DEFAULT_DELAY_SD, DELAY_STEP, delay_prior
from prfmap.engine.hrf import HRF
from prfmap.engine.models import get_model
from prfmap.engine.problem import make_problem

RUN = 148
DELAYS = (5.0, 6.0, 7.0)
"""The units' own HRF delays, a third each; the fit's HRF peaks at 6 s."""
SPREAD = 1 / np.sqrt(3)
"""The between-unit SD the fit is told (a delay uniform in ± 1 s)."""


def delayed(
    level: float, n: int = 360, seed: int = 11
) -> tuple[dict, np.ndarray, np.ndarray, Stimulus, np.ndarray]:
    """pRFs whose log σ grows with eccentricity, each third with one of :data:`DELAYS`, AR(1) noise.

    Returns truth, each unit's delay, data, stimulus and the runs' nuisance regressors.
    """
    rng = np.random.default_rng(seed)
    stim = Stimulus(np.concatenate([bar_design(RUN, size=101)] * 2), FOV, run_lengths=(RUN, RUN))
    ecc, angle = 8 * np.sqrt(rng.uniform(0.02, 1, n)), rng.uniform(0, 2 * np.pi, n)
    truth = {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": (0.25 + 0.12 * ecc) * np.exp(rng.normal(0, 0.2, n)),
        "amplitude": rng.uniform(1, 3, n),
        "baseline": np.zeros(n),
    }
    delay = np.asarray(DELAYS)[np.arange(n) % 3]
    clean = np.empty((n, 2 * RUN))
    for value in DELAYS:
        rows = delay == value
        clean[rows] = predict(
            {k: v[rows] for k, v in truth.items()}, stim, TR, dtype="float64", hrf=HRF(value)
        )
    e = ar1_noise(rng, clean.shape, RUN)
    nuisance = np.zeros((2 * RUN, 2))
    nuisance[:RUN, 0] = nuisance[RUN:, 1] = 1.0
    return truth, delay, clean + level * clean.std(axis=1, keepdims=True) * e, stim, nuisance


def test_the_delays_tried_are_the_fit_s_and_its_spread_either_side():
    prior = delay_prior(HRF(6.2, 1.1, delay_sd=0.4))
    np.testing.assert_allclose(prior.offsets, [0.0, -DELAY_STEP * 0.4, DELAY_STEP * 0.4])
    assert [h.delay for h in prior.hrfs] == pytest.approx(
        [6.2, 6.2 - DELAY_STEP * 0.4, 6.2 + DELAY_STEP * 0.4]
    )
    assert all(h.dispersion == 1.1 for h in prior.hrfs)
    assert delay_prior(HRF()).sd == DEFAULT_DELAY_SD  # no estimate of its own: the default spread
    np.testing.assert_allclose(prior.penalties, [0.0, DELAY_STEP**2, DELAY_STEP**2])
    # what each unit's posterior over the offsets leaves of the spread, down to half a step's rounding
    step = DELAY_STEP * 0.4
    certain = np.eye(3)[[0, 1, 2]]
    np.testing.assert_allclose(prior.residual_variance(certain), step**2 / 12)
    undecided = np.array([[0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    np.testing.assert_allclose(
        prior.residual_variance(undecided), [step**2 / 4 + step**2 / 12, 2 * step**2 / 3 + step**2 / 12]
    )


def test_each_unit_takes_its_own_delay_and_sigma_loses_the_late_response_s_bias():
    truth, delay, data, stim, nuisance = delayed(0.25)
    common = {
        "nuisance": nuisance,
        "noise": NoiseModel("ar1", (0.3,), 2),
        "sigma_prior": "eccentricity",
        "hrf": HRF(6.0, delay_sd=SPREAD),
    }
    plain = fit_prf(data, stim, TR, **common)
    fitted = fit_prf(data, stim, TR, delay_prior="spread", **common)
    assert plain.settings.delay_prior is None
    record = fitted.settings.delay_prior
    refined = int(np.sum(np.isfinite(fitted.uncertainty.se["sigma"])))
    assert record["option"] == "spread" and sum(record["units_per_offset"]) == refined
    assert record["offsets_s"] == pytest.approx([0.0, -DELAY_STEP * SPREAD, DELAY_STEP * SPREAD], abs=1e-4)
    assert record["residual_delay_sd_s"] < SPREAD
    # the centre was estimated under the fit's HRF: its standard errors are that HRF's, as without
    refined_rows = np.isfinite(plain.uncertainty.se["x"]) & np.isfinite(fitted.uncertainty.se["x"])
    for key in ("x", "y"):
        same = np.isclose(fitted.uncertainty.se[key], plain.uncertainty.se[key], rtol=1e-6)[refined_rows]
        assert same.mean() >= 0.98, (key, same.mean())
    late, early = delay == DELAYS[2], delay == DELAYS[0]
    step = DELAY_STEP * SPREAD
    for truth_delay, taken in ((DELAYS[0], 6.0 - step), (DELAYS[1], 6.0), (DELAYS[2], 6.0 + step)):
        assert np.mean(np.isclose(fitted.params["hrf_delay"][delay == truth_delay], taken)) > 0.8, truth_delay
    better = {}
    for name, res in (("plain", plain), ("delay", fitted)):
        keep = ~catalog.doubtful(res.status) & np.isfinite(res.uncertainty.se["sigma"])
        error = res.params["sigma"] - truth["sigma"]
        unc = res.uncertainty
        inside = (unc.lower["sigma"] <= truth["sigma"]) & (truth["sigma"] <= unc.upper["sigma"])
        better[name] = {
            "late_error": float(np.median(error[keep & late])),
            "early_error": float(np.median(error[keep & early])),
            "coverage": float(np.mean(inside[keep])),
            "late_r2": float(np.median(res.r2[keep & late])),
        }
    # a late response widens σ under the fit's HRF; under its own delay that bias is gone
    assert better["plain"]["late_error"] > 0.04, better
    assert abs(better["delay"]["late_error"]) < 0.5 * better["plain"]["late_error"], better
    assert abs(better["delay"]["early_error"]) < 0.03, better
    # (over 0.97 here: every delay is one of those tried, yet the errors keep half a step's rounding)
    assert better["delay"]["coverage"] >= max(0.93, better["plain"]["coverage"]), better
    # the final linear fit is under the unit's own HRF: the late units' r² rises
    assert better["delay"]["late_r2"] > better["plain"]["late_r2"], better


def test_predictions_follow_each_unit_s_own_delay():
    """``predict`` with the fit's ``hrf_delay`` gives the fit's own time courses (what cross-validation
    predicts a held-out run with); with the fit's one HRF, the moved units' are off."""
    _, _, data, stim, nuisance = delayed(0.25, n=90, seed=4)
    hrf = HRF(6.0, delay_sd=SPREAD)
    fitted = fit_prf(
        data, stim, TR, nuisance=nuisance, hrf=hrf, delay_prior="spread", return_predictions=True
    )
    moved = np.isfinite(fitted.params["hrf_delay"]) & (fitted.params["hrf_delay"] != 6.0)
    assert moved.sum() > 30

    def centred(values: np.ndarray) -> np.ndarray:
        out = values.copy()
        for run in (slice(0, RUN), slice(RUN, 2 * RUN)):
            out[:, run] -= out[:, run].mean(axis=1, keepdims=True)
        return out

    own = centred(predict(fitted.params, stim, TR, hrf=hrf, dtype="float64"))
    common = centred(predict({k: v for k, v in fitted.params.items() if k != "hrf_delay"}, stim, TR, hrf=hrf))
    fitted_courses = centred(fitted.predictions)
    scale = np.abs(fitted_courses[moved]).max(axis=1)
    assert np.all(np.abs(own[moved] - fitted_courses[moved]).max(axis=1) < 1e-3 * scale)
    assert np.all(np.abs(common[moved] - fitted_courses[moved]).max(axis=1) > 1e-2 * scale)


def test_the_delay_prior_needs_one_hrf_and_a_known_option():
    with pytest.raises(ValueError, match="delay_prior must be one of"):
        FitOptions(delay_prior="vertex")
    truth, _, data, stim, nuisance = delayed(0.25, n=60)
    fitted = fit_prf(data, stim, TR, nuisance=nuisance, hrf="vertex", delay_prior="spread")
    assert fitted.settings.delay_prior is None  # per-unit derivative weights fit the delay themselves
    alone = fit_prf(data, stim, TR, nuisance=nuisance, delay_prior="spread")  # without a prior on σ
    assert alone.settings.sigma_prior is None and alone.settings.delay_prior["option"] == "spread"
    assert np.nanmedian(np.abs(alone.params["x"] - truth["x"])) < 0.2


DELAYED = (
    "import numpy as np\n"
    "from test_delay_prior import delayed, SPREAD\n"
    "from conftest import TR\n"
    "from prfmap.engine import NoiseModel, fit_prf\n"
    "from prfmap.engine.hrf import HRF\n"
    "truth, delay, data, stim, nuisance = delayed(0.25, n=120, seed=5)\n"
    "res = fit_prf(data, stim, TR, nuisance=nuisance, noise=NoiseModel('ar1', (0.3,), 2),\n"
    "              sigma_prior='eccentricity', delay_prior='spread', hrf=HRF(6.0, delay_sd=SPREAD))\n"
    "result = {'sigma': res.params['sigma'].tolist(), 'se': res.uncertainty.se['sigma'].tolist(),\n"
    "          'x_se': res.uncertainty.se['x'].tolist(),\n"
    "          'counts': res.settings.delay_prior['units_per_offset']}\n"
)


def test_the_delays_and_their_standard_errors_agree_across_backends(tmp_path, backend):
    if backend != "jax":
        pytest.skip("the cross-backend comparison runs once, in the jax session")
    results = {b: backend_result(b, DELAYED, tmp_path) for b in ("jax", "torch", "tensorflow")}
    ref = results["jax"]
    for other in ("torch", "tensorflow"):
        moved = np.abs(np.array(results[other]["counts"]) - np.array(ref["counts"]))
        assert moved.sum() <= 0.03 * sum(ref["counts"]), (other, results[other]["counts"], ref["counts"])
        for key in ("sigma", "se", "x_se"):
            rel = np.abs(np.array(results[other][key]) - np.array(ref[key])) / np.array(ref[key])
            assert np.nanmedian(rel) <= 0.02, (key, other, np.nanmedian(rel))


@pytest.mark.backend
def test_the_residuals_under_several_hrfs_at_once_are_each_hrf_s_own():
    # vp_costs computes the neural responses once for every delay the profiles try
    rng = np.random.default_rng(4)
    model = get_model("gauss")
    stim = Stimulus(bar_design(RUN, size=61), FOV)
    nuisance = np.ones((RUN, 1))
    problems = [make_problem(model, stim, TR, 1, nuisance, "float32", 0.5, HRF(d)) for d in DELAYS]
    u = np.column_stack([rng.uniform(-6, 6, 64), rng.uniform(-6, 6, 64), np.log(rng.uniform(0.3, 4, 64))])
    truth = {"x": u[:, 0], "y": u[:, 1], "sigma": np.exp(u[:, 2]), "amplitude": np.ones(64)}
    clean = predict(truth, stim, TR, dtype="float64", hrf=HRF(DELAYS[-1]))
    data = clean + 0.2 * clean.std(axis=1, keepdims=True) * rng.standard_normal(clean.shape)
    y = tensor(data - data.mean(axis=1, keepdims=True), "float32")  # the constant projected out
    args = (tensor(u, "float32"), y, problems[0].stim)
    alone = [to_numpy(compiled(kernels.vp_cost, model)(*args, p.hrf_t, p.q)) for p in problems]
    stacked = np.stack([to_numpy(p.hrf_t) for p in problems])
    joint = to_numpy(compiled(kernels.vp_costs, model)(*args, tensor(stacked, "float32"), problems[0].q))
    assert joint.shape == (len(DELAYS), 64)
    np.testing.assert_allclose(joint, np.stack(alone), rtol=1e-4)
    assert np.median(alone[0] / alone[-1]) > 1.5  # the HRFs matter: the data's own fits best
