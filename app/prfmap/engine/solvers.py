"""Iterative refiners behind one protocol, and the loop that runs them.

A solver is a small object with ``init`` (a named state from starting values), ``step`` (one iteration
of every unit of a batch), ``terminate`` (no unit is still moving) and ``postprocess`` (the parameters and
which units are still moving), in the manner of optimistix. :func:`iterate` runs any solver: as one
compiled ``keras.ops.while_loop`` where the backend compiles whole loops, else as a compiled step called
from Python. :func:`refine_units` drives a solver over all units in batches within a memory budget.

States are ``NamedTuple`` s of tensors: ``keras.ops.while_loop``, ``jax.lax.while_loop``, ``tf.while_loop``
and the Python loop of the torch backend all carry them as they are.
"""

from __future__ import annotations

from functools import partial
from typing import Any, NamedTuple, Protocol

import keras
import numpy as np
from keras import ops

from prfmap.engine import core
from prfmap.engine.backend import get_backend, loops_compiled
from prfmap.engine.batching import MIN_BATCH, ProgressFn, batch_size, compiled, pad, padded_size, run_batches
from prfmap.engine.core_ops import at_least, tensor, to_numpy
from prfmap.engine.models import Bounds, PRFModel
from prfmap.engine.problem import Problem


class Data(NamedTuple):
    """What every solver call reads besides its state: one batch's data and the fit's fixed tensors."""

    y: Any  # (batch, frames) projected time courses
    free: Any  # (K,) 1 for a fitted, 0 for a fixed internal parameter
    stim: tuple
    hrf_t: Any
    q: Any
    lower: Any  # (K,) internal bounds; every step is projected into [lower, upper]
    upper: Any
    eccentricity: Any  # () largest distance of the centre (columns 0, 1) from fixation
    max_steps: Any = None  # () LM: steps a unit may take in all (``LMState.steps``); None: no cap


def project(u: Any, data: Data) -> Any:
    """``u`` (units, K) clipped into ``data``'s internal bounds, its centre into the allowed disc."""
    u = ops.minimum(ops.maximum(u, data.lower[None]), data.upper[None])
    ecc = ops.sqrt(u[:, 0] * u[:, 0] + u[:, 1] * u[:, 1])
    shrink = ops.minimum(1.0, data.eccentricity / at_least(ecc, core.TINY))[:, None]
    return ops.concatenate([u[:, :2] * shrink, u[:, 2:]], axis=1)


class Solution(NamedTuple):
    """What a solver hands back: internal parameters, which units still move, what a next round resumes."""

    u: Any
    active: Any
    carry: tuple


class Solver(Protocol):
    """The protocol of :func:`iterate` and :func:`refine_units`."""

    key: tuple  # names the compiled functions: everything the solver's arithmetic depends on
    round_length: int | None  # steps between re-batching the units still moving; None: one round
    copies: int  # a batch's memory relative to one Levenberg–Marquardt batch

    def start(self, n: int) -> tuple[np.ndarray, ...]: ...
    def init(self, u: Any, data: Data, *carry: Any) -> Any: ...
    def step(self, state: Any, data: Data) -> Any: ...
    def terminate(self, state: Any) -> Any: ...
    def postprocess(self, state: Any) -> Solution: ...


class LMState(NamedTuple):
    """Levenberg–Marquardt state of a batch (``units`` rows each)."""

    u: Any  # (units, K) internal parameters
    cost: Any  # (units,) residual sum of squares
    jtj: Any  # (units, K, K) Gauss–Newton matrix
    jte: Any  # (units, K) gradient
    damping: Any  # (units,)
    active: Any  # (units,) bool: still moving
    rejected: Any  # (units,) consecutive rejected steps
    steps: Any  # (units,) steps taken (accepted or not)
    fresh: Any  # (units,) bool: cost, jtj, jte not yet evaluated; the next step evaluates them at u


class LevenbergMarquardt:
    """Damped Gauss–Newton steps on the variable-projection residual; a step is kept where the cost drops.

    A unit stops when an accepted step lowers its cost by less than ``tol`` (relative) or after four
    rejected steps in a row. Units still moving after ``round_length`` steps are re-batched for the next
    round, so converged units stop costing anything.
    """

    copies = 1

    def __init__(self, model: PRFModel, dtype: str, tol: float, round_length: int = 8) -> None:
        self.model, self.tol, self.round_length = model, tol, round_length
        self.key = ("lm", model, dtype, tol)

    def start(self, n: int) -> tuple[np.ndarray, ...]:
        return (np.full(n, 1e-3),)

    def init(self, u: Any, data: Data, damping: Any) -> LMState:
        cost, jtj, jte = core.vp_normal_equations(
            self.model, u, data.y, data.free, data.stim, data.hrf_t, data.q
        )
        n = ops.shape(u)[0]
        return LMState(
            u,
            cost,
            jtj,
            jte,
            damping,
            ops.ones((n,), dtype="bool"),
            ops.zeros((n,), dtype=u.dtype),
            ops.zeros((n,), dtype=u.dtype),
            ops.zeros((n,), dtype="bool"),
        )

    def step(self, state: LMState, data: Data) -> LMState:
        """One damped Gauss–Newton step of every moving unit; a ``fresh`` unit is evaluated where it is
        (its start: :mod:`~prfmap.engine.streaming` loads units into a running batch that way)."""
        u, cost, jtj, jte, lam, active, rejected, steps, fresh = state
        move = active & ~fresh
        if data.max_steps is not None:
            move = move & (steps < data.max_steps)
        diag = ops.diagonal(jtj, axis1=1, axis2=2)
        k = ops.shape(u)[1]
        damp = (
            lam[:, None] * diag
            + (1.0 - data.free)[None]
            + 1e-9 * at_least(ops.max(diag, axis=1, keepdims=True), core.TINY)
        )
        system = jtj + ops.eye(k, dtype=u.dtype)[None] * damp[:, :, None]
        delta = (
            -core.solve_spd(system, jte[:, :, None])[:, :, 0]
            * data.free[None]
            * ops.cast(move, u.dtype)[:, None]
        )
        u_new = project(u + delta, data)
        cost_new, jtj_new, jte_new = core.vp_normal_equations(
            self.model, u_new, data.y, data.free, data.stim, data.hrf_t, data.q
        )
        accept = move & (cost_new < cost) & ops.isfinite(cost_new)
        take = accept | fresh
        rel = (cost - cost_new) / at_least(cost, core.TINY)
        rejected = ops.where(accept, 0.0, rejected + ops.cast(move, u.dtype))
        done = (accept & (rel < self.tol)) | (rejected >= 4.0)
        t1 = take[:, None]
        return LMState(
            ops.where(t1, u_new, u),
            ops.where(take, cost_new, cost),
            ops.where(t1[:, :, None], jtj_new, jtj),
            ops.where(t1, jte_new, jte),
            ops.where(fresh, lam, ops.clip(ops.where(accept, lam * 0.3, lam * 8.0), 1e-7, 1e7)),
            active & ~done,
            rejected,
            steps + ops.cast(move, u.dtype),
            ops.zeros_like(fresh),
        )

    def terminate(self, state: LMState) -> Any:
        return ~ops.any(state.active)

    def postprocess(self, state: LMState) -> Solution:
        return Solution(state.u, state.active, (state.damping,))


class AdamState(NamedTuple):
    """Adam state of a batch (``units`` rows each)."""

    u: Any  # (units, K) internal parameters
    m: Any  # (units, K) first moment
    v: Any  # (units, K) second moment
    steps: Any  # () steps taken
    best: Any  # (units,) lowest cost so far
    stall: Any  # (units,) steps since the cost last dropped by ``tol`` (relative)
    active: Any  # (units,) bool: still moving


class Adam:
    """Adam on each unit's variable-projection cost, with the backend's automatic gradients.

    The update is that of ``keras.optimizers.Adam`` (a test checks it step by step), written out because
    Keras' optimizers keep their state in variables on TensorFlow, where a compiled loop needs it in the
    loop's state. A unit stops after ``patience`` steps without a relative cost drop of ``tol``.
    """

    copies = 2
    round_length = None

    def __init__(
        self,
        model: PRFModel,
        dtype: str,
        tol: float,
        learning_rate: float,
        patience: int = 20,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-7,
    ) -> None:
        self.model, self.tol, self.patience = model, tol, patience
        self.learning_rate, self.beta_1, self.beta_2, self.epsilon = learning_rate, beta_1, beta_2, epsilon
        self.key = ("adam", model, dtype, tol, learning_rate, patience, beta_1, beta_2, epsilon)
        self._grad = get_backend().value_and_grad(partial(core.vp_objective, model), has_aux=True)

    def start(self, n: int) -> tuple[np.ndarray, ...]:
        return ()

    def init(self, u: Any, data: Data) -> AdamState:
        n = ops.shape(u)[0]
        return AdamState(
            u,
            ops.zeros_like(u),
            ops.zeros_like(u),
            ops.zeros((), dtype=u.dtype),
            ops.full((n,), np.inf, dtype=u.dtype),
            ops.zeros((n,), dtype=u.dtype),
            ops.ones((n,), dtype="bool"),
        )

    def update(self, u: Any, m: Any, v: Any, steps: Any, grad: Any) -> tuple[Any, Any, Any]:
        """One Adam update of ``u`` with moments ``m``, ``v`` after ``steps`` steps: new u, m, v."""
        step = steps + 1.0
        alpha = (
            self.learning_rate
            * ops.sqrt(1 - ops.power(self.beta_2, step))
            / (1 - ops.power(self.beta_1, step))
        )
        m = m + (grad - m) * (1 - self.beta_1)
        v = v + (ops.square(grad) - v) * (1 - self.beta_2)
        return u - (m * alpha) / (ops.sqrt(v) + self.epsilon), m, v

    def step(self, state: AdamState, data: Data) -> AdamState:
        (_, cost), grad = self._grad(state.u, data.y, data.stim, data.hrf_t, data.q)
        grad = ops.where(ops.isfinite(grad), grad, 0.0) * data.free[None]
        u, m, v = self.update(state.u, state.m, state.v, state.steps, grad)
        u = project(u, data)
        improved = cost < state.best * (1.0 - self.tol)
        stall = ops.where(improved, 0.0, state.stall + 1.0)
        return AdamState(
            ops.where(state.active[:, None], u, state.u),
            m,
            v,
            state.steps + 1.0,
            ops.minimum(state.best, cost),
            stall,
            state.active & (stall < self.patience),
        )

    def terminate(self, state: AdamState) -> Any:
        return ~ops.any(state.active)

    def postprocess(self, state: AdamState) -> Solution:
        return Solution(state.u, state.active, ())


def _loop(solver: Solver, u: Any, data: Data, limit: Any, *carry: Any) -> tuple[Any, Any]:
    """``init``, then ``step`` until ``terminate`` or ``limit`` steps, as one ``while_loop``.

    The limit is a tensor argument, so that one compiled loop serves every limit.
    """

    def cond(state: Any, steps: Any) -> Any:
        return ~solver.terminate(state) & (steps < limit)

    def body(state: Any, steps: Any) -> tuple[Any, Any]:
        return solver.step(state, data), steps + 1

    return keras.ops.while_loop(cond, body, (solver.init(u, data, *carry), ops.convert_to_tensor(0)))


def iterate(solver: Solver, u: Any, data: Data, carry: tuple = (), max_steps: int = 1) -> tuple[Any, int]:
    """Run ``solver`` from ``u`` on one batch for at most ``max_steps`` steps: its final state, steps.

    One compiled ``while_loop`` where the backend compiles whole loops (JAX, TensorFlow), else a
    compiled ``step`` called from Python until ``terminate`` (PyTorch, or ``PRFMAP_COMPILE=0``).
    """
    if loops_compiled():
        loop = compiled(("loop",) + solver.key, partial(_loop, solver))
        state, steps = loop(u, data, ops.convert_to_tensor(max_steps), *carry)
        return state, int(to_numpy(steps))
    init = compiled(("init",) + solver.key, solver.init)
    step = compiled(("step",) + solver.key, solver.step)
    state, steps = init(u, data, *carry), 0
    while steps < max_steps and not bool(to_numpy(solver.terminate(state))):
        state = step(state, data)
        steps += 1
    return state, steps


def clip(u: np.ndarray, bounds: Bounds) -> np.ndarray:
    """:func:`project` in numpy: ``u`` (units, K) inside ``bounds``."""
    u = np.clip(u, bounds.lower, bounds.upper)
    ecc = np.hypot(u[:, 0], u[:, 1])
    u[:, :2] *= np.minimum(1.0, bounds.eccentricity / np.maximum(ecc, 1e-30))[:, None]
    return u


def refine_units(
    solver: Solver,
    prob: Problem,
    u0: np.ndarray,
    y: np.ndarray,
    free: np.ndarray,
    bounds: Bounds,
    mem_gb: float,
    max_iter: int,
    progress: ProgressFn | None,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """Refine internal parameters ``u0`` (units, K) of every unit with ``solver``, batch by batch.

    Every step is projected into ``bounds``.

    Returns
    -------
    u : ndarray, shape (units, K)
    moving : ndarray of bool, shape (units,)
        Units still moving after ``max_iter`` steps (not converged).
    iterations : list of int
        The most steps any unit took, and the unit-steps computed (padding included).
    """
    dtype = prob.dtype
    u, carry = clip(u0, bounds), solver.start(len(u0))
    limits = (tensor(bounds.lower, dtype), tensor(bounds.upper, dtype), tensor(bounds.eccentricity, dtype))
    still = np.ones(len(u0), dtype=bool)
    iterations = [0, 0]
    free_t = tensor(free, dtype)
    # one batch shape for every round, so each loop is compiled once
    batch = min(batch_size(prob, mem_gb, u0.shape[1]) // solver.copies or MIN_BATCH, padded_size(len(u0)))
    round_length = min(solver.round_length or max_iter, max_iter)
    for done in range(0, max_iter, round_length):
        todo = np.flatnonzero(still)
        if todo.size == 0:
            break

        def run(start: int, stop: int, size: int, todo: np.ndarray = todo, done: int = done) -> None:
            rows, k = todo[start:stop], stop - start
            data = Data(tensor(pad(y[rows], size), dtype), free_t, prob.stim, prob.hrf_t, prob.q, *limits)
            state, steps = iterate(
                solver,
                tensor(pad(u[rows], size), dtype),
                data,
                tuple(tensor(pad(c[rows], size), dtype) for c in carry),
                min(round_length, max_iter - done),
            )
            solution = solver.postprocess(state)
            u[rows] = to_numpy(solution.u)[:k]
            still[rows] = to_numpy(solution.active)[:k]
            for c, value in zip(carry, solution.carry, strict=True):
                c[rows] = to_numpy(value)[:k]
            iterations[0] = max(iterations[0], done + steps)
            iterations[1] += steps * size

        run_batches(todo.size, batch, run, "refine", progress, shrink=False)
    return u, still, iterations
