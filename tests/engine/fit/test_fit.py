"""Grid + refinement recover pRF parameters; bad units are NaN, not crashes."""

import warnings

import numpy as np
import pytest

from conftest import FOV, TR, bar_design, random_params
from prfmap.engine import Stimulus, cartesian_grid, catalog, fit_prf, predict
from prfmap.engine.problem import nuisance_basis


def _true_r2(data: np.ndarray, truth: np.ndarray, nuisance=None) -> np.ndarray:
    q = nuisance_basis(data.shape[1], nuisance)
    resid = data - truth
    resid -= (resid @ q) @ q.T
    centred = data - (data @ q) @ q.T
    return 1 - (resid**2).sum(1) / (centred**2).sum(1)


def test_noiseless_gauss_recovered_within_a_hundredth_of_a_degree(stim):
    p = random_params("gauss", 300, np.random.default_rng(10))
    data = predict(p, stim, TR)
    res = fit_prf(data, stim, TR, model="gauss", refine="lm")
    for key in ("x", "y", "sigma"):
        assert np.max(np.abs(res.params[key] - p[key])) < 0.01, key
    np.testing.assert_allclose(res.params["amplitude"], p["amplitude"], rtol=1e-3)
    np.testing.assert_allclose(res.params["baseline"], p["baseline"], atol=1e-3)
    assert np.all(res.r2 > 0.9999)
    assert set(res.timings) >= {"grid", "refine", "linear", "total"}


@pytest.mark.backend
@pytest.mark.parametrize("model", ["css", "dog", "dn"])
def test_noiseless_extended_models_recover_positions(model, stim):
    p = random_params(model, 100, np.random.default_rng(11))
    data = predict(p, stim, TR, model)
    res = fit_prf(data, stim, TR, model=model, refine="lm")
    assert np.median(np.hypot(res.params["x"] - p["x"], res.params["y"] - p["y"])) < 0.01
    assert np.median(np.abs(res.params["sigma"] - p["sigma"])) < 0.01
    assert np.median(res.r2) > 0.999
    extras = {
        "css": ["n"],
        "dog": ["sigma_surround", "amplitude_surround"],
        "dn": ["sigma_norm", "amplitude_norm", "baseline_activation", "baseline_norm"],
    }[model]
    for key in extras:
        assert np.all(np.isfinite(res.params[key])), key


@pytest.mark.backend
@pytest.mark.parametrize("refine", ["lm", "sgd"])
def test_noisy_recovery_matches_the_truth(refine, stim):
    rng = np.random.default_rng(12)
    p = random_params("gauss", 1000, rng)
    truth = predict(p, stim, TR)
    noise_sd = 0.5 * truth.std(axis=1, keepdims=True)
    data = truth + noise_sd * rng.standard_normal(truth.shape)
    res = fit_prf(data, stim, TR, model="gauss", refine=refine)
    assert np.median(np.abs(res.params["x"] - p["x"])) <= 0.15
    assert np.median(np.abs(res.params["y"] - p["y"])) <= 0.15
    assert abs(np.median(res.r2) - np.median(_true_r2(data, truth))) <= 0.01


def test_refinement_improves_on_the_grid(stim):
    p = random_params("gauss", 200, np.random.default_rng(13))
    data = predict(p, stim, TR)
    grid_only = fit_prf(data, stim, TR, refine="none")
    refined = fit_prf(data, stim, TR, refine="lm")
    assert np.median(refined.loss) < 1e-3 * np.median(grid_only.loss)
    assert grid_only.settings.iterations == 0


def test_no_iterations_leave_every_unit_at_its_grid_start(stim):
    """``max_iter=0`` refines nothing: the units are grid-only, not "not converged" (doubtful)."""
    p = random_params("gauss", 40, np.random.default_rng(15))
    res = fit_prf(predict(p, stim, TR), stim, TR, refine="lm", max_iter=0)
    fitted = catalog.status_codes(res.status)[np.isfinite(res.params["x"])]
    assert fitted.size > 30
    assert np.all(fitted & catalog.STATUS_BITS["grid_only"])
    assert not np.any(fitted & catalog.STATUS_BITS["not_converged"])
    assert res.settings.units_refined == 0 and res.settings.iterations == 0


def test_an_option_the_refiner_does_not_declare_is_refused(stim):
    data = predict(random_params("gauss", 4, np.random.default_rng(16)), stim, TR)
    with pytest.raises(ValueError, match="refiner 'lm' has no option 'learning_rate'"):
        fit_prf(data, stim, TR, refine="lm", refine_options={"learning_rate": 0.1})


def test_nan_and_flat_units_give_nan_parameters_without_warnings(stim):
    p = random_params("gauss", 6, np.random.default_rng(14))
    data = predict(p, stim, TR)
    data[1] = np.nan
    data[3] = 5.0
    data[4, 10] = np.inf
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        res = fit_prf(data, stim, TR)
    bad = [1, 3, 4]
    for key, values in res.params.items():
        assert np.all(np.isnan(values[bad])), key
    assert np.all(np.isnan(res.r2[bad]))
    assert np.all(res.r2[[0, 2, 5]] > 0.999)
    maps = res.maps()
    assert {"x", "y", "sigma", "amplitude", "baseline", "r2", "polarangle", "eccentricity"} <= set(maps)
    np.testing.assert_allclose(maps["polarangle"][0], np.degrees(np.arctan2(p["y"][0], p["x"][0])), atol=0.05)


def test_nuisance_regressors_are_projected_out_of_data_and_model(stim):
    rng = np.random.default_rng(15)
    p = random_params("gauss", 100, rng)
    frames = np.arange(stim.n_frames)
    drift = np.stack([np.cos(np.pi * (2 * frames + 1) * k / (2 * stim.n_frames)) for k in (1, 2, 3)], 1)
    data = predict(p, stim, TR) + (rng.normal(size=(100, 3)) * 5) @ drift.T
    res = fit_prf(data, stim, TR, nuisance=drift)
    assert np.max(np.abs(res.params["x"] - p["x"])) < 0.01
    assert np.max(np.abs(res.params["sigma"] - p["sigma"])) < 0.01
    plain = fit_prf(data, stim, TR)
    assert np.median(np.abs(plain.params["sigma"] - p["sigma"])) > 0.01


def test_per_unit_hrf_derivative_weights_are_fitted(stim):
    rng = np.random.default_rng(16)
    p = random_params("gauss", 50, rng)
    p["hrf_deriv"] = rng.uniform(-0.5, 0.5, 50)
    p["hrf_disp"] = np.zeros(50)
    data = predict(p, stim, TR)
    res = fit_prf(data, stim, TR, hrf="vertex", return_predictions=True)
    np.testing.assert_allclose(res.params["hrf_deriv"], p["hrf_deriv"], atol=0.02)
    assert np.median(np.abs(res.params["x"] - p["x"])) < 0.01
    np.testing.assert_allclose(res.predictions, data, atol=1e-2 * np.abs(data).max())


@pytest.mark.backend
def test_float64_concatenated_runs_and_cartesian_grid():
    design = np.concatenate([bar_design(40), bar_design(40)[::-1]])
    stim = Stimulus(design, FOV, run_lengths=(40, 40))
    p = random_params("gauss", 20, np.random.default_rng(17))
    data = predict(p, stim, TR, dtype="float64")
    grid = cartesian_grid({"x": np.linspace(-8, 8, 9), "y": np.linspace(-8, 8, 9), "sigma": [0.5, 1, 2, 4]})
    res = fit_prf(data, stim, TR, dtype="float64", grid=grid)
    assert res.settings.grid_points == 324 and res.settings.dtype == "float64"
    # the coarse grid may seed a unit in a local minimum; the rest converge in float64
    assert np.mean(np.abs(res.params["x"] - p["x"]) < 1e-6) >= 0.9


def test_fixed_parameters_stay_fixed(stim):
    p = random_params("css", 30, np.random.default_rng(18))
    p["n"] = np.full(30, 0.5)
    res = fit_prf(predict(p, stim, TR, "css"), stim, TR, model="css", fixed={"n": 0.5})
    np.testing.assert_allclose(res.params["n"], 0.5, rtol=1e-5)
    assert np.median(np.abs(res.params["x"] - p["x"])) < 0.01


def test_bad_arguments_are_reported(stim):
    data = np.zeros((2, stim.n_frames))
    with pytest.raises(ValueError, match="unknown model"):
        fit_prf(data, stim, TR, model="banana")
    with pytest.raises(ValueError, match="unknown refine"):
        fit_prf(data, stim, TR, refine="newton")
    with pytest.raises(ValueError, match="match the stimulus"):
        fit_prf(np.zeros((2, 3)), stim, TR)
    with pytest.raises(ValueError, match="cannot fix"):
        fit_prf(data, stim, TR, fixed={"n": 0.5})


def test_out_of_memory_shrinks_the_batch_and_retries(monkeypatch):
    from prfmap.engine import batching
    from prfmap.engine.backend import get_backend

    class DeviceFull(RuntimeError):
        pass

    monkeypatch.setattr(get_backend(), "is_out_of_memory", lambda exc: isinstance(exc, DeviceFull))
    done = []

    def run(start, stop, batch):
        if batch > 64:
            raise DeviceFull("RESOURCE_EXHAUSTED: out of memory")
        done.append((start, stop))

    batching.run_batches(300, 512, run, "refine", None)
    assert done[0] == (0, 64) and done[-1][1] == 300
    assert sum(b - a for a, b in done) == 300

    def broken(start, stop, batch):
        raise ValueError("not a memory problem")

    with pytest.raises(ValueError):
        batching.run_batches(300, 512, broken, "refine", None)
