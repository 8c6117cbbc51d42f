"""Bounded refinement, the fit-status bits and NaN where there is no signal, on every backend."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import TR, random_params
from prfmap.engine import catalog, fit_prf, predict

BITS = catalog.STATUS_BITS


def flagged(result, name: str) -> np.ndarray:
    return (result.status.astype(int) & BITS[name]) > 0


def hard_units(stim, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Pure-noise units, then pRFs at the aperture's edge with strong noise: what runs away unbounded."""
    n = 96
    noise = rng.normal(0, 1, (n, stim.n_frames))
    p = random_params("gauss", n, rng)
    angle = rng.uniform(0, 2 * np.pi, n)
    p["x"], p["y"] = 9.5 * np.cos(angle), 9.5 * np.sin(angle)
    edge = predict(p, stim, TR) + rng.normal(0, 1.5, (n, stim.n_frames))
    return np.vstack([noise, edge]), n


@pytest.mark.parametrize("refine", ["lm", "sgd"])
def test_every_written_estimate_is_inside_its_bounds(stim, refine):
    data, _ = hard_units(stim, np.random.default_rng(3))
    res = fit_prf(data, stim, TR, refine=refine, refine_r2_min=0.0, max_iter=30 if refine == "lm" else 150)
    scales = {**stim.scales, "sigma": res.params["sigma"]}
    maps = {**res.params, "r2": res.r2, "eccentricity": np.hypot(res.params["x"], res.params["y"])}
    for key, values in maps.items():
        low, high = catalog.PARAMETERS[key].bound.resolve(scales)
        finite = np.isfinite(values)
        inside = (values[finite] >= low - 1e-4 * np.abs(low)) & (values[finite] <= high * (1 + 1e-4))
        assert np.all(inside), key
    recorded = res.settings.bounds
    assert recorded["x"] == pytest.approx([-2 * stim.scales["radius"], 2 * stim.scales["radius"]])
    assert recorded["sigma"] == pytest.approx([stim.scales["pixel"], stim.scales["fov"]])
    # units the bounds stopped are flagged, and only refined units can be
    at, floor = flagged(res, "at_bound"), flagged(res, "size_at_floor")
    assert (at | floor).any()
    ecc = np.hypot(res.params["x"], res.params["y"])
    on_edge = (ecc > recorded["eccentricity"][1] * (1 - 1e-3)) | (
        res.params["sigma"] > recorded["sigma"][1] * (1 - 1e-3)
    )
    assert np.all(at[on_edge])
    refined = ~flagged(res, "refinement_rejected")  # those keep the grid's point
    assert np.all(floor[refined & (res.params["sigma"] < recorded["sigma"][0] * (1 + 1e-3))])
    assert not np.any((at | floor) & flagged(res, "grid_only"))


def test_no_signal_is_nan_in_every_parameter_and_r2(stim):
    rng = np.random.default_rng(0)
    p = random_params("gauss", 8, rng)
    good = predict(p, stim, TR) + rng.normal(0, 0.2, (8, stim.n_frames))
    bad = np.vstack(
        [
            np.full(stim.n_frames, 3.0),
            np.full(stim.n_frames, np.nan),
            np.where(np.arange(stim.n_frames) == 5, np.inf, good[0]),
        ]
    )
    res = fit_prf(np.vstack([good, bad]), stim, TR)
    for values in (*res.params.values(), res.r2, res.loss):
        assert np.all(np.isnan(values[8:])) and np.all(np.isfinite(values[:8]))
    assert np.all(flagged(res, "no_signal")[8:]) and not np.any(flagged(res, "no_signal")[:8])
    assert np.all(res.params["amplitude"][:8] > 0)
    assert set(res.maps()) >= {"status", "r2"}


def test_units_below_refine_r2_min_are_flagged_grid_only(stim):
    rng = np.random.default_rng(1)
    p = random_params("gauss", 16, rng)
    clean = predict(p, stim, TR) + rng.normal(0, 0.1, (16, stim.n_frames))
    noise = rng.normal(0, 1, (16, stim.n_frames))
    res = fit_prf(np.vstack([clean, noise]), stim, TR, refine_r2_min=0.3)
    grid_only = flagged(res, "grid_only")
    assert not grid_only[:16].any() and grid_only[16:].sum() >= 12
    unrefined = fit_prf(np.vstack([clean, noise]), stim, TR, refine="none")
    assert not np.any(flagged(unrefined, "grid_only") | flagged(unrefined, "at_bound"))


@pytest.mark.parametrize("n_bases", [1, 3])
def test_a_capped_amplitude_is_the_bounded_least_squares_solution(n_bases):
    """Issue 24, case 3: the final linear fit's amplitude bound, against scipy's bounded solver."""
    from keras import ops
    from scipy.optimize import lsq_linear

    from prfmap.engine import kernels
    from prfmap.engine.backend.ops import to_numpy

    rng = np.random.default_rng(n_bases)
    a = rng.normal(size=(12, n_bases, 60))
    weights = rng.normal(0, 20, (12, n_bases))
    weights[:, 0] = rng.uniform(0, 120, 12)
    y = np.einsum("ul,ulf->uf", weights, a) + rng.normal(0, 1, (12, 60))
    high = 60.0
    beta, gram = kernels.linear_fit(ops.convert_to_tensor(a), ops.convert_to_tensor(y))
    capped = to_numpy(kernels.capped_amplitude(beta, gram, high))
    lower, upper = np.full(n_bases, -np.inf), np.full(n_bases, np.inf)
    upper[0] = high
    expected = np.array([lsq_linear(a[u].T, y[u], bounds=(lower, upper)).x for u in range(len(y))])
    free = to_numpy(beta)
    assert (free[:, 0] > high).any() and (free[:, 0] < high).any()
    np.testing.assert_allclose(capped, expected, rtol=1e-4, atol=1e-4)


def test_an_amplitude_beyond_its_bound_is_held_there_and_flagged(stim):
    """Issue 24, case 3: amplitudes up to 6.8e12 % were written with status 0."""
    rng = np.random.default_rng(5)
    p = random_params("gauss", 12, rng)
    p["amplitude"] = rng.uniform(2, 4, 12) * catalog.AMPLITUDE_MAX
    data = predict(p, stim, TR) + rng.normal(0, 1, (12, stim.n_frames))
    res = fit_prf(data, stim, TR)
    np.testing.assert_allclose(res.params["amplitude"], catalog.AMPLITUDE_MAX, rtol=1e-5)
    assert flagged(res, "at_bound").all() and catalog.doubtful(res.status).all()
    assert res.settings.bounds["amplitude"] == [0.0, catalog.AMPLITUDE_MAX]


def test_normalisation_gains_stay_inside_their_bounds(stim):
    """Issue 24, case 4: DN fits of noise and edge pRFs wrote pool gains up to 1.45e12."""
    data, _ = hard_units(stim, np.random.default_rng(4))
    res = fit_prf(data, stim, TR, model="dn", refine_r2_min=0.0)
    fitted = np.isfinite(res.params["amplitude_norm"])
    gain, amplitude = res.params["amplitude_norm"][fitted], res.params["amplitude"][fitted]
    assert fitted.sum() > 100
    # issue 36: exactly, as written (float32) too, not 100.00000763 from a float32 step past the bound
    assert gain.max() <= catalog.NORM_GAIN_MAX and amplitude.max() <= catalog.AMPLITUDE_MAX
    assert np.float32(gain).max() <= catalog.NORM_GAIN_MAX
    on_bound = (gain >= catalog.NORM_GAIN_MAX * (1 - 1e-3)) | (
        amplitude >= catalog.AMPLITUDE_MAX * (1 - 1e-6)
    )
    assert on_bound.any()
    assert flagged(res, "at_bound")[fitted][on_bound].all()
    assert res.settings.bounds["amplitude_norm"] == [0.0, catalog.NORM_GAIN_MAX]  # not 100.00000000000004


def test_rejected_refinements_are_finalised_again_alone_with_the_same_result(stim):
    """Units whose refinement left the valid range go back to their start and only they are fitted
    again: the written fit equals a final fit of every unit at the parameters written."""
    from functools import partial

    from prfmap.engine.fit.result import _within_bounds, checked_fit, final_fit
    from prfmap.engine.models import free_mask, get_model
    from prfmap.engine.problem import make_problem, project_units

    rng = np.random.default_rng(4)
    n = 40
    p = random_params("gauss", n, rng)
    data = predict(p, stim, TR, dtype="float64") + rng.normal(0, 0.2, (n, stim.n_frames))
    model = get_model("gauss")
    prob = make_problem(model, stim, TR, 1, None, "float64", 0.5)
    units = project_units(prob, data)
    u_start = model.internal(np.column_stack([p["x"], p["y"], p["sigma"]]))
    u = u_start + rng.normal(0, 0.05, u_start.shape)
    u[:10, :2] = 40.0  # far outside the aperture: no response, no positive amplitude
    flags = {"refined": np.ones(n, bool), "not_converged": np.zeros(n, bool), "grid_only": np.zeros(n, bool)}
    final = partial(final_fit, prob, units, shape=data.shape, mem_gb=1.0, with_predictions=True)
    bounds, free = model.bounds(stim.scales), free_mask(model, {})[0]
    checked = checked_fit(final, u, u_start, units.index, bounds, free, flags, model.params)
    rejected = flagged(checked, "refinement_rejected")
    assert rejected.sum() >= 5 and not rejected[10:].any()
    np.testing.assert_array_equal(checked.u[rejected], u_start[rejected])
    np.testing.assert_array_equal(checked.u[~rejected], u[~rejected])
    reference = final(checked.u)
    # the reported values are the final fit's, held inside the catalogue's bounds (x, y at ±20°)
    within = _within_bounds(reference.params, model.params, bounds)
    for key, values in within.items():
        np.testing.assert_allclose(checked.params[key], values, rtol=1e-12, err_msg=key)
    np.testing.assert_allclose(checked.r2, reference.r2, rtol=1e-12)
    np.testing.assert_allclose(checked.predictions, reference.predictions, rtol=1e-12)
