"""Conformance suites over every registered model, refiner and noise model, built-ins and toys alike.

As nilearn's estimator checks do for its estimators: whatever a model, a refiner or a noise model is,
once it is in the catalogue it must keep these promises, on every backend (``backend``-marked).

Models: the analytic Jacobian is the derivative of the neural response (central finite differences in
float64); ``from_report(report(θ))`` is θ; the internal ↔ natural transforms invert each other.
Noise models: an entry names a ``BaseNoiseModel`` subclass (or none: white noise); the engine
estimates it from data, and its whitening is causal, never mixes runs, is the inverse Cholesky factor
of its covariance, and whitens AR(1) noise. Refiners: every step stays inside the bounds (and the centre
inside the allowed disc); a solver that keeps a step only where the cost drops never raises any
unit's cost; every refiner lowers the cost of the typical unit within a few steps.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import toys
from conftest import TR, random_params
from prfmap.engine import catalog, estimate_noise, kernels, predict
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.fit.stages import RefinePlan
from prfmap.engine.models import get_model
from prfmap.engine.noise import OLS, BaseNoiseModel, noise_class
from prfmap.engine.problem import make_problem, project_units
from prfmap.engine.solvers import Data, Solver, clamp_host, solver_class
from prfmap.engine.solvers.levenberg_marquardt import LevenbergMarquardt

pytestmark = pytest.mark.backend

BUILT_IN_MODELS = tuple(catalog.MODELS)
BUILT_IN_REFINERS = tuple(name for name, spec in catalog.REFINERS.items() if spec.solver is not None)
MODELS = (*BUILT_IN_MODELS, *(m.name for m in toys.TOY_MODELS))
REFINERS = (*BUILT_IN_REFINERS, toys.TOY_REFINER.name)
ACCEPTING = (LevenbergMarquardt, toys.ScaledGradient)
"""Solvers that keep a step only where it lowers the unit's cost."""
NOISE_MODELS = (*catalog.NOISE_MODELS, toys.TOY_NOISE.name)
ESTIMATED = (*(n for n, spec in catalog.NOISE_MODELS.items() if spec.implementation), toys.TOY_NOISE.name)
"""Noise models with a class (not white noise)."""
STEPS = 8
ROUNDING = 1e-6


@pytest.fixture(scope="module", autouse=True)
def with_toys() -> Iterator[None]:
    with toys.registered():
        yield


def example(model: str, n: int, seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    make = toys.EXAMPLES.get(model)
    return make(n, rng) if make else random_params(model, n, rng, max_ecc=5.0)


def test_the_suites_cover_every_registered_model_and_refiner() -> None:
    assert set(MODELS) == set(catalog.MODELS)
    assert set(REFINERS) == {name for name, spec in catalog.REFINERS.items() if spec.solver is not None}
    assert set(NOISE_MODELS) == set(catalog.NOISE_MODELS)


@pytest.mark.parametrize("refiner", REFINERS)
def test_every_refiner_subclasses_the_solver_contract(refiner):
    """The fit reads ``solver.streams`` of any refiner: the contract declares it (False by default)."""
    cls = solver_class(catalog.get_refiner(refiner))
    assert Solver in cls.__mro__, f"{refiner}: {cls.__name__} does not subclass solvers.Solver"
    assert isinstance(cls.streams, bool)
    if cls.streams:
        assert cls.empty is not Solver.empty and cls.load is not Solver.load, refiner


@pytest.mark.parametrize("name", NOISE_MODELS)
def test_every_noise_model_is_estimated_and_whitens(name, stim):
    """AR(1) noise of coefficient 0.4 (no pRF): the entry's class estimated, whose whitening leaves the
    residuals' lag-1 autocorrelation near 0 (an entry without a class: OLS, no whitening)."""
    spec = catalog.NOISE_MODELS[name]
    rng = np.random.default_rng(9)
    frames = stim.n_frames
    e = rng.standard_normal((400, frames + 100))
    for t in range(1, frames + 100):
        e[:, t] += 0.4 * e[:, t - 1]
    noise = e[:, 100:]
    model = estimate_noise(noise, stim, TR, name)
    white = model.whitening(stim.run_lengths)
    if spec.implementation is None:
        assert model == OLS and model.white and white is None and model.covariance(stim.run_lengths) is None
        return
    assert type(model) is noise_class(spec) and issubclass(type(model), BaseNoiseModel)
    assert model.option == name and 0 < model.units <= 400 and not model.white
    record = model.describe()
    assert record["option"] == name and record["description"]
    w = noise @ white.T
    lag1 = np.mean(np.sum(w[:, 1:] * w[:, :-1], axis=1) / np.sum(w * w, axis=1))
    assert abs(lag1) < 0.05


@pytest.mark.parametrize("name", ESTIMATED)
def test_every_whitening_is_the_causal_inverse_cholesky_factor_of_its_covariance(name, stim):
    """Run by run (never across a run's end), W is lower triangular (a frame is whitened by itself and
    the frames before it: the whitening's order) and is L⁻¹ for Σ = L Lᵀ, so W Σ Wᵀ = I."""
    rng = np.random.default_rng(10)
    e = rng.standard_normal((300, stim.n_frames))
    for t in range(1, stim.n_frames):
        e[:, t] += 0.5 * e[:, t - 1]
    model = estimate_noise(e, stim, TR, name)
    runs = (30, 20)
    w, sigma = model.whitening(runs), model.covariance(runs)
    assert w.shape == sigma.shape == (50, 50)
    assert not w[:30, 30:].any() and not w[30:, :30].any()
    assert not sigma[:30, 30:].any() and not sigma[30:, :30].any()
    for a, b in ((0, 30), (30, 50)):
        block = w[a:b, a:b]
        np.testing.assert_array_equal(block, np.tril(block), err_msg=f"{name}: a frame sees the future")
        inverse_factor = np.linalg.inv(np.linalg.cholesky(sigma[a:b, a:b]))
        np.testing.assert_allclose(block, inverse_factor, rtol=1e-9, atol=1e-12, err_msg=name)
        np.testing.assert_allclose(block @ sigma[a:b, a:b] @ block.T, np.eye(b - a), atol=1e-10)
    np.testing.assert_allclose(sigma, sigma.T, atol=0)
    assert not np.allclose(w, np.eye(50)), f"{name}: estimated from correlated noise, it whitens nothing"


@pytest.mark.parametrize("name", MODELS)
def test_the_jacobian_is_the_derivative_of_the_response(name, stim):
    model = get_model(name)
    theta = model.from_report(example(name, 4, 4))
    prob = make_problem(model, stim, TR, 1, None, "float64", 0.5)

    def neural(t: np.ndarray, jacobian: bool) -> np.ndarray:
        return np.asarray(to_numpy(model.neural(tensor(t, "float64"), prob.stim, jacobian)))

    jac = neural(theta, True)
    assert jac.shape[0] == theta.shape[1] + 1  # the response, then one derivative per parameter
    for k in range(theta.shape[1]):
        h = 1e-6 * max(1.0, np.abs(theta[:, k]).max())
        up, down = theta.copy(), theta.copy()
        up[:, k] += h
        down[:, k] -= h
        numeric = (neural(up, False)[0] - neural(down, False)[0]) / (2 * h)
        np.testing.assert_allclose(
            jac[k + 1],
            numeric,
            rtol=1e-4,
            atol=1e-6 * np.abs(numeric).max() + 1e-12,
            err_msg=f"{name}: d/d{model.names[k]}",
        )


@pytest.mark.parametrize("name", MODELS)
def test_report_and_from_report_invert_each_other(name):
    model = get_model(name)
    params = example(name, 6, 5)
    theta = model.from_report(params)
    reported = model.report(theta, params["amplitude"])
    assert set(catalog.MODELS[name].parameters) - {"amplitude", "baseline"} <= set(reported)
    again = model.from_report({**params, **reported})
    np.testing.assert_allclose(again, theta, rtol=1e-9, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("name", MODELS)
def test_the_transforms_invert_each_other(name):
    model = get_model(name)
    theta = model.from_report(example(name, 6, 6))
    natural, derivative = model.natural(tensor(model.internal(theta), "float64"))
    np.testing.assert_allclose(to_numpy(natural), theta, rtol=1e-9, atol=1e-9, err_msg=name)
    assert np.all(np.isfinite(to_numpy(derivative)))


def _refined_path(refiner: str, stim) -> tuple[list[np.ndarray], list[np.ndarray], object, object]:
    """Internal parameters and per-unit costs after each of ``STEPS`` steps of a refiner."""
    model = get_model("gauss")
    prob = make_problem(model, stim, TR, 1, None, "float64", 0.5)
    truth = example("gauss", 6, 7)
    data = predict(truth, stim, TR, dtype="float64")
    data += 0.3 * np.random.default_rng(8).standard_normal(data.shape)
    y = project_units(prob, data).y
    start = {**truth, "x": truth["x"] + 1.0, "y": truth["y"] - 0.8, "sigma": truth["sigma"] * 1.4}
    start["x"][0] = 12.0  # outside the allowed disc: the first projection brings it in
    bounds = model.bounds(stim.scales)
    u = clamp_host(model.internal(model.from_report(start)), bounds)
    solver = RefinePlan(catalog.get_refiner(refiner), 1.0).solver(prob)
    free = np.ones(u.shape[1])
    batch = Data.of(prob, y, free, bounds)
    carry = tuple(tensor(c, "float64") for c in solver.initial_carry(len(u)))
    state = solver.init(tensor(u, "float64"), batch, *carry)

    def cost(at: object) -> np.ndarray:
        return np.asarray(to_numpy(kernels.vp_cost(model, at, batch.y, prob.stim, prob.hrf_t, prob.q)))

    path, costs = [], [cost(tensor(u, "float64"))]
    for _ in range(STEPS):
        state = solver.step(state, batch)
        current = solver.postprocess(state).u
        path.append(np.asarray(to_numpy(current)))
        costs.append(cost(current))
    return path, costs, bounds, solver


@pytest.mark.parametrize("refiner", REFINERS)
def test_every_step_stays_inside_the_bounds_and_the_cost_does_not_rise(refiner, stim):
    path, costs, bounds, solver = _refined_path(refiner, stim)
    for step, u in enumerate(path, 1):
        # up to rounding (torch's float64 steps ended 2e-9 past a bound): 1e-6 of 1 + |bound|
        inside = np.all(u >= bounds.lower - ROUNDING * (1 + np.abs(bounds.lower)))
        inside &= np.all(u <= bounds.upper + ROUNDING * (1 + np.abs(bounds.upper)))
        in_disc = np.all(np.hypot(u[:, 0], u[:, 1]) <= bounds.eccentricity * (1 + ROUNDING))
        assert inside and in_disc, f"{refiner} step {step}"
    assert np.median(costs[-1] / costs[0]) < 0.999, f"{refiner} does not refine"
    if isinstance(solver, ACCEPTING):
        rises = np.diff(np.stack(costs), axis=0) > 1e-9 * costs[0]
        assert not rises.any(), f"{refiner}: a kept step raised a unit's cost"
