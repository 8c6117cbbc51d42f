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

A solver whose ``streams`` is True also has ``empty(n, k) -> state`` (``n`` slots holding no unit)
and ``load(state, reset, u, busy) -> state`` (new units into the slots of ``reset``, evaluated by
the next ``step``); its state has ``u``, ``active`` and ``steps`` fields, and ``step`` honours
``Data.max_steps``. The fit then refines with :func:`prfmap.engine.solvers.streaming.refine_streaming`
(units enter a batch of slots as others stop) instead of :func:`refine_units`.

:func:`iterate` runs any solver: as one compiled ``keras.ops.while_loop`` where the backend compiles
whole loops, else as a compiled step called from Python. :func:`refine_units` drives a solver over
all units in batches within a memory budget.

States are ``NamedTuple`` s of tensors (:class:`LMState`, :class:`AdamState`):
``keras.ops.while_loop``, ``jax.lax.while_loop``, ``tf.while_loop`` and the Python loop of the torch
backend all carry them as they are.
"""

from __future__ import annotations

from typing import Any, ClassVar, Generic, NamedTuple, Protocol, TypeVar

import keras
import numpy as np
from keras import ops

from prfmap.engine import catalog, kernels
from prfmap.engine.backend import loops_compiled
from prfmap.engine.backend.ops import at_least, tensor, to_numpy
from prfmap.engine.batching import MIN_BATCH, RunContext, batch_size, compiled, pad, padded_size, run_batches
from prfmap.engine.models import InternalBounds
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
    max_steps: Tensor | None = None  # () LM: steps a unit may take in all (``LMState.steps``); None: no cap

    @classmethod
    def of(
        cls,
        prob: Problem,
        y: np.ndarray | None,
        free: np.ndarray,
        bounds: InternalBounds,
        max_steps: int | None = None,
    ) -> Data:
        """The solvers' data of a fit, as tensors of its dtype: the one way to build it.

        Parameters
        ----------
        prob : Problem
            The fit's tensors (its stimulus, HRF, nuisance basis and dtype).
        y : ndarray, shape (batch, frames), or None
            Projected time courses of a batch; None where each batch fills it in (``_replace``).
        free : ndarray, shape (K,)
            1 for each fitted internal parameter.
        bounds : InternalBounds
            Where every step is projected.
        max_steps : int, optional
            Steps a unit may take in all (a streamed refinement); None: no cap.

        Returns
        -------
        Data
        """
        dtype = prob.dtype
        return cls(
            None if y is None else tensor(y, dtype),
            tensor(free, dtype),
            prob.stim,
            prob.hrf_t,
            prob.q,
            tensor(bounds.lower, dtype),
            tensor(bounds.upper, dtype),
            tensor(bounds.eccentricity, dtype),
            None if max_steps is None else tensor(np.asarray(max_steps), dtype),
        )


def clamp(u: Tensor, data: Data) -> Tensor:
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
    shrink = ops.minimum(1.0, data.eccentricity / at_least(ecc, kernels.TINY))[:, None]
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
    streams : bool
        Whether the solver has ``empty`` and ``load`` and is refined as a stream (module docstring).
    """

    round_length: int | None
    copies: ClassVar[int]
    streams: ClassVar[bool] = False

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

    def empty(self, n: int, k: int) -> S:
        """``n`` slots of ``k`` internal parameters holding no unit (only a solver that ``streams``).

        Parameters
        ----------
        n : int
            Slots.
        k : int
            Internal parameters.

        Returns
        -------
        state
        """
        ...

    def load(self, state: S, reset: Tensor, u: Tensor, busy: Tensor) -> S:
        """``state`` with new units in the slots of ``reset`` (only a solver that ``streams``).

        Parameters
        ----------
        state
            The slots' state.
        reset : tensor of bool, shape (slots,)
            Slots that take a new unit (or are emptied).
        u : tensor, shape (slots, K)
            The new units' starting internal parameters.
        busy : tensor of bool, shape (slots,)
            Which of the reset slots hold a unit; the next ``step`` evaluates it where it starts.

        Returns
        -------
        state
        """
        ...


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


def clamp_host(u: np.ndarray, bounds: InternalBounds) -> np.ndarray:
    """:func:`clamp` in numpy: ``u`` (units, K) inside ``bounds``.

    Parameters
    ----------
    u : ndarray, shape (units, K)
        Internal parameters.
    bounds : InternalBounds
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
    return catalog.import_path(spec.solver)


def refine_units(
    solver: Solver,
    prob: Problem,
    u0: np.ndarray,
    y: np.ndarray,
    free: np.ndarray,
    bounds: InternalBounds,
    max_iter: int,
    run: RunContext,
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
    bounds : InternalBounds
        Where every step is projected.
    max_iter : int
        Steps at most (0: none).
    run : RunContext
        The memory budget of a batch and the progress callback.

    Returns
    -------
    u : ndarray, shape (units, K)
    moving : ndarray of bool, shape (units,)
        Units still moving after ``max_iter`` steps (not converged).
    iterations : list of int
        The most steps any unit took, and the unit-steps computed (padding included).
    """
    dtype = prob.dtype
    u, carry = clamp_host(u0, bounds), solver.initial_carry(len(u0))
    if max_iter <= 0:
        return u, np.ones(len(u0), dtype=bool), [0, 0]
    fixed = Data.of(prob, None, free, bounds)
    still = np.ones(len(u0), dtype=bool)
    iterations = [0, 0]
    # one batch shape for every round, so each loop is compiled once
    batch = min(batch_size(prob, run.mem_gb, u0.shape[1]) // solver.copies or MIN_BATCH, padded_size(len(u0)))
    round_length = min(solver.round_length or max_iter, max_iter)
    for done in range(0, max_iter, round_length):
        todo = np.flatnonzero(still)
        if todo.size == 0:
            break

        def one_batch(start: int, stop: int, size: int, todo: np.ndarray = todo, done: int = done) -> None:
            rows, k = todo[start:stop], stop - start
            data = fixed._replace(y=tensor(pad(y[rows], size), dtype))
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

        run_batches(todo.size, batch, one_batch, "refine", run.progress, shrink=False)
    return u, still, iterations
