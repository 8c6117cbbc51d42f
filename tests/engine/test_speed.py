"""Issue 18's speed changes compute what the engine computed before them.

The distinct frames and the folded HRF against every frame its own (the dense frames × frames
product); the unrolled Cholesky against numpy's solve; the streamed LM against LM in rounds.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from conftest import FOV, TR, bar_design, random_params
from prfmap.engine import FitCache, Stimulus, estimate_hrf, fit_prf, predict
from prfmap.engine.backend import get_backend
from prfmap.engine.backend.ops import spd_solve, tensor, to_numpy
from prfmap.engine.batching import RunContext
from prfmap.engine.fit import search
from prfmap.engine.fit.search import best_grid_points, unit_grid_predictions
from prfmap.engine.hrf import CANONICAL, convolution_matrices, hrf_kernels
from prfmap.engine.models import get_model
from prfmap.engine.problem import make_problem, project_units
from prfmap.engine.solvers import refine_units, streaming
from prfmap.engine.solvers.levenberg_marquardt import LevenbergMarquardt
from prfmap.engine.stimulus import frames


def two_runs() -> Stimulus:
    """Two runs of the same bar sweeps: 240 frames, 60 distinct apertures (opposite sweeps share theirs)."""
    design = bar_design()
    return Stimulus(np.concatenate([design, design]), FOV, run_lengths=(120, 120))


def every_frame_its_own(design: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The trivial decomposition into distinct frames: the engine's arithmetic before issue 18."""
    return np.ascontiguousarray(design), np.arange(design.shape[0])


@pytest.fixture
def dense(monkeypatch):
    """``dense()``: the problems built afterwards treat every frame as distinct (nothing folded)."""

    def switch() -> None:
        monkeypatch.setattr(frames, "distinct_frames", every_frame_its_own)

    return switch


def test_distinct_frames_rebuild_the_design_in_order_of_first_appearance():
    rng = np.random.default_rng(0)
    pool = rng.integers(0, 2, (6, 9)).astype(np.float32)
    design = pool[rng.integers(0, 6, 50)]
    unique, index = frames.distinct_frames(design)
    np.testing.assert_array_equal(unique[index], design)
    assert len({row.tobytes() for row in design}) == len(unique)
    first = [int(np.flatnonzero(index == k)[0]) for k in range(len(unique))]
    assert first == sorted(first)


def test_folded_expansion_is_the_dense_per_run_convolution():
    index = np.array([0, 1, 1, 2, 0, 2, 2, 1])
    conv = convolution_matrices(hrf_kernels(1.5, 3), (5, 3))
    folded = frames.fold_expansion(np.transpose(conv, (0, 2, 1)), index, 3)
    expansion = (index[:, None] == np.arange(3)[None]).astype(float)  # frames x distinct
    neural = np.random.default_rng(1).standard_normal((4, 3))  # units x distinct
    for b in range(3):
        np.testing.assert_allclose(neural @ folded[b], (neural @ expansion.T) @ conv[b].T, atol=1e-12)


def test_predictions_over_distinct_frames_equal_the_dense_ones(dense):
    stim = two_runs()
    params = random_params("gauss", 12, np.random.default_rng(2))
    fast = predict(params, stim, TR, dtype="float64")
    assert make_problem(get_model("gauss"), stim, TR, 1, None, "float64", 0.5).stim[0].shape[1] == 60
    dense()
    assert make_problem(get_model("gauss"), stim, TR, 1, None, "float64", 0.5).stim[0].shape[1] == 240
    np.testing.assert_allclose(fast, predict(params, stim, TR, dtype="float64"), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("n", [1, 3, 7])
def test_spd_solve_matches_numpy(backend, n):
    get_backend().enable_float64()  # float64 tensors below, whichever test ran first in this process
    rng = np.random.default_rng(n)
    a = rng.standard_normal((20, n, n))
    a = a @ np.transpose(a, (0, 2, 1)) + 0.1 * np.eye(n)
    b = rng.standard_normal((20, n, 2))
    x = to_numpy(spd_solve(tensor(a, "float64"), tensor(b, "float64")))
    np.testing.assert_allclose(x, np.linalg.solve(a, b), rtol=1e-8, atol=1e-10)


def test_grid_scored_over_distinct_frames_gives_the_frames_scores(dense):
    stim, model = two_runs(), get_model("gauss")
    params = random_params("gauss", 40, np.random.default_rng(3))
    data = predict(params, stim, TR) + np.random.default_rng(4).standard_normal((40, 240))
    theta = np.c_[np.linspace(-6, 6, 50), np.linspace(5, -5, 50), np.geomspace(0.5, 4, 50)]

    def scores() -> tuple[np.ndarray, np.ndarray]:
        prob = make_problem(model, stim, TR, 1, None, "float64", 0.5)
        units = project_units(prob, data)
        return best_grid_points(prob, units.y, unit_grid_predictions(prob, theta, 1.0), 1.0, None)

    index, corr = scores()
    dense()
    ref_index, ref_corr = scores()
    np.testing.assert_array_equal(index, ref_index)
    np.testing.assert_allclose(corr, ref_corr, rtol=1e-9)


def test_streamed_lm_takes_the_steps_of_the_rounds(monkeypatch, backend):
    """Units stream through 8 slots (refills, a tail, a shrink) and end where rounds take them."""
    stim, model = two_runs(), get_model("gauss")
    params = random_params("gauss", 40, np.random.default_rng(5))
    data = predict(params, stim, TR) + 0.3 * np.random.default_rng(6).standard_normal((40, 240))
    prob = make_problem(model, stim, TR, 1, None, "float64", 0.5)
    units = project_units(prob, data)
    u0 = model.internal(np.c_[params["x"] + 0.8, params["y"] - 0.5, params["sigma"] * 1.3])
    bounds = model.bounds(stim.scales)
    solver = LevenbergMarquardt(model, "float64", 1e-6)
    monkeypatch.setattr(streaming, "slot_size", lambda n, budget: 8)
    monkeypatch.setattr(streaming, "SMALLEST_SLOTS", 2)
    monkeypatch.setattr(streaming, "SHRINK", 2)
    for max_iter in (4, 30):
        run = RunContext(1.0)
        rounds = refine_units(solver, prob, u0.copy(), units.y, np.ones(3), bounds, max_iter, run)
        stream = streaming.refine_streaming(
            solver, prob, u0.copy(), units.y, np.ones(3), bounds, max_iter, run
        )
        np.testing.assert_allclose(stream[0], rounds[0], rtol=1e-5, atol=1e-6)  # float32 on torch
        np.testing.assert_array_equal(stream[1], rounds[1])
        # rounds restart the count of rejected steps each round, so a unit may try a step more there
        assert stream[2][0] <= rounds[2][0]
        assert stream[2][1] < rounds[2][1]  # fewer unit-steps computed
    assert not rounds[1].any() and stream[2][0] < 30


def test_slot_sizes_are_few():
    sizes = {streaming.slot_size(n, 8192) for n in range(1, 100000, 97)}
    assert sizes == {64, 512, 4096}
    assert streaming.slot_size(100000, 1000) == 512 and streaming.slot_size(100000, 40) == 40


def test_a_cache_keeps_the_problems_of_a_stimulus_seen_again():
    stim, model, cache = two_runs(), get_model("gauss"), FitCache(most_problems=2)
    first = cache.problem(model, stim, TR, 1, None, "float32", 0.5)
    again = cache.problem(get_model("css"), stim, TR, 1, None, "float32", 0.5)
    assert again.hrf_t is first.hrf_t and again.model.name == "css" and again.cache is cache
    assert first.stim[0].shape[1] == 60 and first.frames == 240
    derivatives = cache.problem(model, stim, TR, 3, None, "float32", 0.5)
    assert derivatives.hrf_t is not first.hrf_t
    assert cache.problem(model, two_runs(), TR, 1, None, "float32", 0.5).hrf_t is not first.hrf_t
    assert cache.problem(model, stim, TR, 1, None, "float32", 0.5).hrf_t is not first.hrf_t  # evicted
    assert make_problem(model, stim, TR, 1, None, "float32", 0.5).cache is None  # built anew


def test_problems_under_other_hrfs_share_the_design_and_equal_those_built_anew(monkeypatch):
    """A delay prior's problems find the distinct frames once; each is the one make_problem builds."""
    stim, model, cache = two_runs(), get_model("gauss"), FitCache()
    found = []
    distinct = frames.distinct_frames
    monkeypatch.setattr(frames, "distinct_frames", lambda design: found.append(1) or distinct(design))
    late = replace(CANONICAL, delay=CANONICAL.delay + 1.0)
    problems = [cache.problem(model, stim, TR, 1, None, "float32", 0.5, hrf) for hrf in (CANONICAL, late)]
    assert len(found) == 1 and problems[1].stim is problems[0].stim
    for prob, hrf in zip(problems, (CANONICAL, late), strict=True):
        anew = make_problem(model, stim, TR, 1, None, "float32", 0.5, hrf)
        assert prob.grid_key == anew.grid_key and prob.pixels == anew.pixels
        np.testing.assert_array_equal(to_numpy(prob.hrf_t), to_numpy(anew.hrf_t))
        np.testing.assert_array_equal(to_numpy(prob.stim[0]), to_numpy(anew.stim[0]))
        np.testing.assert_array_equal(prob.frame_index, anew.frame_index)
    assert problems[0].grid_key != problems[1].grid_key
    assert len(found) == 3  # the two built anew


def test_grid_predictions_are_computed_once_per_cache(monkeypatch):
    """The chunks of a fit share their grid through the caller's cache; without one, a fit keeps its own."""
    stim = two_runs()
    data = predict(random_params("gauss", 20, np.random.default_rng(9)), stim, TR)
    built = []
    compute = search._grid_predictions
    monkeypatch.setattr(search, "_grid_predictions", lambda *a: built.append(1) or compute(*a))
    cache = FitCache()
    first = fit_prf(data[:10], stim, TR, refine="none", uncertainty=False, cache=cache)
    second = fit_prf(data[10:], stim, TR, refine="none", uncertainty=False, cache=cache)
    assert len(built) == 1
    fit_prf(data[10:], stim, TR, refine="none", uncertainty=False)
    assert len(built) == 2
    whole = fit_prf(data, stim, TR, refine="none", uncertainty=False)
    for key in ("x", "y", "sigma"):
        np.testing.assert_array_equal(np.r_[first.params[key], second.params[key]], whole.params[key])


def test_fits_with_and_without_the_distinct_frames_agree(dense):
    """Maps of a noisy fit, with the participant HRF, within 0.01° (median) of the dense engine's."""
    stim = two_runs()
    params = random_params("gauss", 60, np.random.default_rng(7))
    clean = predict(params, stim, TR)
    data = clean + 0.3 * clean.std(axis=1, keepdims=True) * np.random.default_rng(8).standard_normal(
        clean.shape
    )
    nuisance = np.repeat([[0.0], [1.0]], 120, axis=0)

    def fit() -> tuple[dict[str, np.ndarray], float]:
        hrf = estimate_hrf(data, stim, TR, nuisance=nuisance)
        res = fit_prf(data, stim, TR, hrf=hrf, nuisance=nuisance, max_iter=20)
        return res.params, hrf.delay

    fast, fast_delay = fit()
    dense()
    slow, slow_delay = fit()
    assert abs(fast_delay - slow_delay) <= 0.05
    for key in ("x", "y", "sigma"):
        assert np.median(np.abs(fast[key] - slow[key])) <= 0.01, key
    assert np.nanmedian(np.hypot(fast["x"] - params["x"], fast["y"] - params["y"])) < 0.3
