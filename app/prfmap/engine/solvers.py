"""Iterative refiners behind one contract, and the loop that runs them.

The contract is optimistix's (``AbstractIterativeSolver``): a solver is an immutable value (a frozen
dataclass) whose fields are everything its arithmetic depends on — the model, the dtype, the tolerance
and its named constants — so the solver itself is the compile key of its functions
(:func:`prfmap.engine.batching.compiled`): two solvers that differ in any field never share a compiled
function, and equal solvers always do. It has four methods:

``init(u, data, *carry) -> state``
    The state of a batch at its starting internal parameters ``u`` (units, K); ``carry`` resumes what
    an earlier round left (:meth:`Solver.initial_carry` gives the first round's).
``step(state, data) -> state``
    One iteration of every unit of the batch (a unit that has stopped keeps its values).
``terminate(state) -> bool tensor``
    True when no unit of the batch is still moving.
``postprocess(state) -> Solution``
    The parameters, which units still move, and the carry of a next round.

:func:`iterate` runs any solver: as one compiled ``keras.ops.while_loop`` where the backend compiles
whole loops, else as a compiled step called from Python. :func:`refine_units` drives a solver over
all units in batches within a memory budget.

States are ``NamedTuple`` s of tensors (:class:`LMState`, :class:`AdamState`):
``keras.ops.while_loop``, ``jax.lax.while_loop``, ``tf.while_loop`` and the Python loop of the torch
backend all carry them as they are.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

import keras
import numpy as np
from keras import ops

from prfmap.engine import core
from prfmap.engine.backend import get_backend, loops_compiled
from prfmap.engine.batching import MIN_BATCH, ProgressFn, batch_size, compiled, pad, padded_size, run_batches
from prfmap.engine.core_ops import at_least, tensor, to_numpy
from prfmap.engine.models import Bounds, PRFModel
from prfmap.engine.problem import Problem
from prfmap.engine.stimulus import StimulusTensors

Tensor = Any
"""A backend tensor (JAX array, torch tensor or TensorFlow tensor)."""


class Data(NamedTuple):
    """What every solver call reads besides its state: one batch's data and the fit's fixed tensors."""

    y: Tensor  # (batch, frames) projected time courses
    free: Tensor  # (K,) 1 for a fitted, 0 for a fixed internal parameter
    stim: StimulusTensors
    hrf_t: Tensor
    q: Tensor
    lower: Tensor  # (K,) internal bounds; every step is projected into [lower, upper]
    upper: Tensor
    eccentricity: Tensor  # () largest distance of the centre (columns 0, 1) from fixation


def project(u: Tensor, data: Data) -> Tensor:
    """Internal parameters clipped into the bounds, the centre into the allowed disc.

    Parameters
    ----------
    u : tensor, shape (units, K)
        Internal parameters.
    data : Data
        Its ``lower``, ``upper`` and ``eccentricity``.

    Returns
    -------
    tensor, shape (units, K)
    """
    u = ops.minimum(ops.maximum(u, data.lower[None]), data.upper[None])
    ecc = ops.sqrt(u[:, 0] * u[:, 0] + u[:, 1] * u[:, 1])
    shrink = ops.minimum(1.0, data.eccentricity / at_least(ecc, core.TINY))[:, None]
    return ops.concatenate([u[:, :2] * shrink, u[:, 2:]], axis=1)


class Solution(NamedTuple):
    """What a solver hands back: internal parameters, which units still move, what a next round resumes."""

    u: Tensor
    active: Tensor
    carry: tuple


S = TypeVar("S")


class Solver(Protocol, Generic[S]):
    """The contract of :func:`iterate` and :func:`refine_units` (see the module docstring).

    Attributes
    ----------
    round_length : int or None
        Steps between re-batching the units still moving; None: one round of ``max_iter`` steps.
    copies : int
        A batch's memory relative to one Levenberg–Marquardt batch (sizes the batches).
    """

    round_length: int | None
    copies: ClassVar[int]

    def initial_carry(self, n: int) -> tuple[np.ndarray, ...]:
        """What the first round of ``n`` units resumes from (numpy, one row per unit).

        Parameters
        ----------
        n : int
            Units.

        Returns
        -------
        tuple of ndarray
        """
        ...

    def init(self, u: Tensor, data: Data, *carry: Tensor) -> S:
        """The state of a batch at internal parameters ``u``.

        Parameters
        ----------
        u : tensor, shape (units, K)
            Internal parameters of the batch.
        data : Data
            The batch's data and the fit's fixed tensors.
        *carry : tensor
            What the previous round left.

        Returns
        -------
        state
        """
        ...

    def step(self, state: S, data: Data) -> S:
        """One iteration of every unit of the batch.

        Parameters
        ----------
        state
            The batch's state.
        data : Data
            The batch's data.

        Returns
        -------
        state
        """
        ...

    def terminate(self, state: S) -> Tensor:
        """True when no unit of the batch still moves.

        Parameters
        ----------
        state
            The batch's state.

        Returns
        -------
        tensor of bool, shape ()
        """
        ...

    def postprocess(self, state: S) -> Solution:
        """The batch's parameters, moving units and carry.

        Parameters
        ----------
        state
            The batch's final state.

        Returns
        -------
        Solution
        """
        ...


class LMState(NamedTuple):
    """Levenberg–Marquardt state of a batch (``units`` rows each)."""

    u: Tensor  # (units, K) internal parameters
    cost: Tensor  # (units,) residual sum of squares
    jtj: Tensor  # (units, K, K) Gauss–Newton matrix
    jte: Tensor  # (units, K) gradient
    damping: Tensor  # (units,)
    active: Tensor  # (units,) bool: still moving
    rejected: Tensor  # (units,) consecutive rejected steps


@dataclass(frozen=True)
class LevenbergMarquardt(Solver[LMState]):
    """Damped Gauss–Newton steps on the variable-projection residual; a step is kept where the cost drops.

    A unit stops when an accepted step lowers its cost by less than ``tol`` (relative) or after
    ``max_rejections`` rejected steps in a row. Units still moving after ``round_length`` steps are
    re-batched for the next round, so converged units stop costing anything.

    Attributes
    ----------
    model : PRFModel
        The model whose residual is minimised.
    dtype : str
        ``float32`` or ``float64``.
    tol : float
        Relative cost change under which a unit stops (0: only ``max_rejections`` and the budget).
    round_length : int
        Steps per round.
    damping_start : float
        Damping of every unit's first step.
    damping_down, damping_up : float
        Factors applied to the damping after an accepted and after a rejected step.
    damping_min, damping_max : float
        The damping stays within these.
    max_rejections : int
        Consecutive rejected steps after which a unit stops.
    diagonal_floor : float
        Added damping, relative to the largest diagonal element, that keeps every system solvable.
    """

    model: PRFModel
    dtype: str
    tol: float
    round_length: int = 8
    damping_start: float = 1e-3
    damping_down: float = 0.3
    damping_up: float = 8.0
    damping_min: float = 1e-7
    damping_max: float = 1e7
    max_rejections: int = 4
    diagonal_floor: float = 1e-9
    copies: ClassVar[int] = 1

    def initial_carry(self, n: int) -> tuple[np.ndarray, ...]:
        """Every unit's first damping."""
        return (np.full(n, self.damping_start),)

    def init(self, u: Tensor, data: Data, damping: Tensor) -> LMState:
        """The cost, Gauss–Newton matrix and gradient at ``u``, with the given damping."""
        cost, jtj, jte = core.vp_normal_equations(
            self.model, u, data.y, data.free, data.stim, data.hrf_t, data.q
        )
        n = ops.shape(u)[0]
        return LMState(
            u, cost, jtj, jte, damping, ops.ones((n,), dtype="bool"), ops.zeros((n,), dtype=u.dtype)
        )

    def step(self, state: LMState, data: Data) -> LMState:
        """One damped step per unit, kept where the cost drops (the damping falls), else undone (it rises)."""
        u, cost, jtj, jte, lam, active, rejected = state
        diag = ops.diagonal(jtj, axis1=1, axis2=2)
        k = ops.shape(u)[1]
        damp = (
            lam[:, None] * diag
            + (1.0 - data.free)[None]
            + self.diagonal_floor * at_least(ops.max(diag, axis=1, keepdims=True), core.TINY)
        )
        system = jtj + ops.eye(k, dtype=u.dtype)[None] * damp[:, :, None]
        delta = (
            -ops.solve(system, jte[:, :, None])[:, :, 0]
            * data.free[None]
            * ops.cast(active, u.dtype)[:, None]
        )
        u_new = project(u + delta, data)
        cost_new, jtj_new, jte_new = core.vp_normal_equations(
            self.model, u_new, data.y, data.free, data.stim, data.hrf_t, data.q
        )
        accept = active & (cost_new < cost) & ops.isfinite(cost_new)
        rel = (cost - cost_new) / at_least(cost, core.TINY)
        rejected = ops.where(accept, 0.0, rejected + ops.cast(active, u.dtype))
        done = (accept & (rel < self.tol)) | (rejected >= float(self.max_rejections))
        a1 = accept[:, None]
        return LMState(
            ops.where(a1, u_new, u),
            ops.where(accept, cost_new, cost),
            ops.where(a1[:, :, None], jtj_new, jtj),
            ops.where(a1, jte_new, jte),
            ops.clip(
                ops.where(accept, lam * self.damping_down, lam * self.damping_up),
                self.damping_min,
                self.damping_max,
            ),
            active & ~done,
            rejected,
        )

    def terminate(self, state: LMState) -> Tensor:
        """True when no unit still moves."""
        return ~ops.any(state.active)

    def postprocess(self, state: LMState) -> Solution:
        """The parameters, moving units, and each unit's damping for the next round."""
        return Solution(state.u, state.active, (state.damping,))


class AdamState(NamedTuple):
    """Adam state of a batch (``units`` rows each)."""

    u: Tensor  # (units, K) internal parameters
    m: Tensor  # (units, K) first moment
    v: Tensor  # (units, K) second moment
    steps: Tensor  # () steps taken
    best: Tensor  # (units,) lowest cost so far
    stall: Tensor  # (units,) steps since the cost last dropped by ``tol`` (relative)
    active: Tensor  # (units,) bool: still moving


@dataclass(frozen=True)
class Adam(Solver[AdamState]):
    """Adam on each unit's variable-projection cost, with the backend's automatic gradients.

    The update is that of ``keras.optimizers.Adam`` (a test checks it step by step), written out because
    Keras' optimizers keep their state in variables on TensorFlow, where a compiled loop needs it in the
    loop's state. A unit stops after ``patience`` steps without a relative cost drop of ``tol``.

    Attributes
    ----------
    model : PRFModel
        The model whose cost is minimised.
    dtype : str
        ``float32`` or ``float64``.
    tol : float
        Relative cost drop that counts as progress.
    learning_rate : float
        Step size, in degrees (positions) and log-units (sizes).
    patience : int
        Steps without progress after which a unit stops.
    beta_1, beta_2, epsilon : float
        Adam's constants.
    round_length : None
        One round of ``max_iter`` steps.
    """

    model: PRFModel
    dtype: str
    tol: float
    learning_rate: float = 0.05
    patience: int = 20
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-7
    round_length: int | None = None
    copies: ClassVar[int] = 2
    _grad: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        grad = get_backend().value_and_grad(partial(core.vp_objective, self.model), has_aux=True)
        object.__setattr__(self, "_grad", grad)

    def initial_carry(self, n: int) -> tuple[np.ndarray, ...]:
        """Nothing: every round starts its moments afresh."""
        return ()

    def init(self, u: Tensor, data: Data) -> AdamState:
        """Zero moments and no best cost yet."""
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

    def update(self, u: Tensor, m: Tensor, v: Tensor, steps: Tensor, grad: Tensor) -> tuple[Any, Any, Any]:
        """One Adam update.

        Parameters
        ----------
        u, m, v : tensor, shape (units, K)
            Parameters and the two moments.
        steps : tensor, shape ()
            Steps taken so far.
        grad : tensor, shape (units, K)
            The gradient at ``u``.

        Returns
        -------
        tuple of tensor
            The new ``u``, ``m`` and ``v``.
        """
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
        """One Adam update per moving unit, projected into the bounds."""
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

    def terminate(self, state: AdamState) -> Tensor:
        """True when no unit still moves."""
        return ~ops.any(state.active)

    def postprocess(self, state: AdamState) -> Solution:
        """The parameters and moving units (no carry)."""
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

    Parameters
    ----------
    solver : Solver
        The solver.
    u : tensor, shape (units, K)
        Internal parameters of the batch.
    data : Data
        The batch's data and the fit's fixed tensors.
    carry : tuple
        What an earlier round left (:meth:`Solver.initial_carry` for the first).
    max_steps : int
        The most steps.

    Returns
    -------
    state
        The final state.
    steps : int
        Steps taken.
    """
    if loops_compiled():
        loop = compiled(_loop, solver)
        state, steps = loop(u, data, ops.convert_to_tensor(max_steps), *carry)
        return state, int(to_numpy(steps))
    init = compiled(type(solver).init, solver)
    step = compiled(type(solver).step, solver)
    state, steps = init(u, data, *carry), 0
    while steps < max_steps and not bool(to_numpy(solver.terminate(state))):
        state = step(state, data)
        steps += 1
    return state, steps


def clip(u: np.ndarray, bounds: Bounds) -> np.ndarray:
    """:func:`project` in numpy: ``u`` (units, K) inside ``bounds``.

    Parameters
    ----------
    u : ndarray, shape (units, K)
        Internal parameters.
    bounds : Bounds
        Where they must lie.

    Returns
    -------
    ndarray
    """
    u = np.clip(u, bounds.lower, bounds.upper)
    ecc = np.hypot(u[:, 0], u[:, 1])
    u[:, :2] *= np.minimum(1.0, bounds.eccentricity / np.maximum(ecc, 1e-30))[:, None]
    return u


def solver_class(spec: Any) -> type:
    """The solver class a refiner's catalogue entry names (imported when given as a path).

    Parameters
    ----------
    spec : prfmap.engine.catalog.RefinerSpec
        Its ``solver``: a class or ``"module:Class"``.

    Returns
    -------
    type
    """
    found = spec.solver
    if isinstance(found, str):
        module, _, name = found.partition(":")
        found = getattr(importlib.import_module(module), name)
    return found


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

    Parameters
    ----------
    solver : Solver
        The solver.
    prob : Problem
        The fit's tensors.
    u0 : ndarray, shape (units, K)
        Starting internal parameters.
    y : ndarray, shape (units, frames)
        Projected data.
    free : ndarray, shape (K,)
        1 for each fitted internal parameter.
    bounds : Bounds
        Where every step is projected.
    mem_gb : float
        Budget of a batch.
    max_iter : int
        Steps at most (0: none).
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    u : ndarray, shape (units, K)
    moving : ndarray of bool, shape (units,)
        Units still moving after ``max_iter`` steps (not converged).
    iterations : list of int
        The most steps any unit took, and the unit-steps computed (padding included).
    """
    dtype = prob.dtype
    u, carry = clip(u0, bounds), solver.initial_carry(len(u0))
    if max_iter <= 0:
        return u, np.ones(len(u0), dtype=bool), [0, 0]
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
