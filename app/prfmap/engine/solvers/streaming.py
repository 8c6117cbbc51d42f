"""A solver's units as a stream through a batch of fixed size (issue 18): Levenberg–Marquardt's way.

Units converge after very different numbers of steps (W's 20,484: 5.7 on average, 23 at most).
Rounds of a fixed length over a fixed batch (:func:`prfmap.engine.solvers.refine_units`) keep
computing every row until the slowest unit of the batch stops, and a last round of a few units pads
them to the whole batch. Here the batch is a set of *slots*: every few steps the slots whose unit
has stopped take the next units of the queue (the solver's ``load``), which the next step evaluates
where they start (Levenberg–Marquardt's ``LMState.fresh``), so a slot idles only between a unit's
stop and the next refill, and no evaluation is repeated. Once the queue is empty the batch shrinks
as its units stop, through a few sizes (:func:`slot_size`), each compiled once per process. The
data of all units stay on the device; between calls only the slots' indices, starts and stop flags
travel.

The arithmetic of each step is the solver's ``step`` (Levenberg–Marquardt's, the one built-in
solver that ``streams``); each unit takes the steps it takes in rounds (which restart a unit's
count of rejected steps each round; the stream does not), up to its own cap of ``max_iter`` steps.
"""

from __future__ import annotations

from typing import Any

import keras
import numpy as np
from keras import ops

from prfmap.engine.backend import get_backend, loops_compiled
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import MIN_BATCH, RunContext, batch_size, compiled, pad, padded_size
from prfmap.engine.models import InternalBounds
from prfmap.engine.problem import Problem
from prfmap.engine.solvers import Data, Solver, clamp_host

REFILL_STEPS = 4
"""Steps between refills of the slots."""
SHRINK = 8
"""Batch sizes are ``SMALLEST_SLOTS`` times powers of this; once the queue is empty, the batch
shrinks to the next smaller size whenever that holds every unit still busy."""
SMALLEST_SLOTS = 64
"""Below this, a step costs less than compiling another batch size (seconds on a CPU) saves."""
QUEUE_BATCHES = 4
"""A stream's batch holds about a quarter of its units (at most the memory budget's batch), so that
the tail, where slots empty, is short beside the stream."""


def slot_size(n_units: int, budget: int) -> int:
    """Slots for a stream of ``n_units``: the smallest ``SMALLEST_SLOTS · SHRINK**j`` holding a quarter.

    A ``QUEUE_BATCHES``-th of the units, at most ``budget``.

    Parameters
    ----------
    n_units : int
        Units to refine.
    budget : int
        The memory budget's batch.

    Returns
    -------
    int
    """
    size = SMALLEST_SLOTS
    while size * QUEUE_BATCHES < n_units and size * SHRINK <= budget:
        size *= SHRINK
    return max(min(size, budget), MIN_BATCH)


def _take_rows(values: Any, rows: Any) -> Any:
    return ops.take(values, rows, axis=0)


def _moving(state: Any, data: Data) -> Any:
    return ops.any(state.active & (state.steps < data.max_steps))


def _advance(
    solver: Solver, state: Any, reset: Any, u: Any, busy: Any, data: Data, limit: Any
) -> tuple[Any, Any]:
    """Load new units into the slots of ``reset``, then up to ``limit`` steps, as one ``while_loop``."""

    def cond(s: Any, steps: Any) -> Any:
        return _moving(s, data) & (steps < limit)

    def body(s: Any, steps: Any) -> tuple[Any, Any]:
        return solver.step(s, data), steps + 1

    start = solver.load(state, reset, u, busy)
    return keras.ops.while_loop(cond, body, (start, ops.convert_to_tensor(0)))


def _rows(field: Any, order: np.ndarray) -> Any:
    """Rows ``order`` of a state field, through the host."""
    values = to_numpy(field)[order]
    return ops.convert_to_tensor(values, dtype=str(values.dtype))


class _Stream:
    """The slots of one stream and the host's record of which unit each holds."""

    def __init__(self, solver: Solver, prob: Problem, y_all: Any, data: Data, slots: int, k: int) -> None:
        self.solver, self.prob, self.y_all, self.data, self.k = solver, prob, y_all, data, k
        self.unit = np.full(slots, -1)
        self.state = solver.empty(slots, k)
        self.pending = np.zeros(slots, dtype=bool)  # slots loaded on the host, not yet on the device
        self.start = np.zeros((slots, k))

    @property
    def slots(self) -> int:
        return self.unit.size

    def load(self, units: np.ndarray, starts: np.ndarray) -> None:
        """Put ``units`` (starting at ``starts``) into free slots."""
        free = np.flatnonzero(self.unit < 0)[: units.size]
        self.unit[free], self.start[free], self.pending[free] = units, starts, True

    def shrink(self, size: int) -> None:
        """Keep the busy slots in a batch of ``size`` (rows picked on the host: the state is small)."""
        keep = np.flatnonzero(self.unit >= 0)
        order = np.concatenate([keep, np.flatnonzero(self.unit < 0)])[:size]
        self.state = type(self.state)(*(_rows(field, order) for field in self.state))
        self.unit, self.pending, self.start = self.unit[order], self.pending[order], self.start[order]

    def advance(self, steps: int) -> int:
        """Run up to ``steps`` steps of every slot; returns the steps taken."""
        dtype, busy = self.prob.dtype, self.unit >= 0
        reset = self.pending | ~busy
        rows = tensor(np.where(busy, self.unit, 0), "int32")
        gather = compiled(_take_rows)  # y_all's rows are padded: few shapes
        data = self.data._replace(y=gather(self.y_all, rows))
        # copies: a backend may share a numpy array's memory, and these arrays change on the host
        args = (
            tensor(reset.copy(), "bool"),
            tensor(self.start.copy(), dtype),
            tensor(self.pending.copy(), "bool"),
        )
        self.pending = np.zeros_like(self.pending)
        if loops_compiled():
            loop = compiled(_advance, self.solver)
            self.state, taken = loop(self.state, *args, data, ops.convert_to_tensor(steps))
            return int(to_numpy(taken))
        load = compiled(type(self.solver).load, self.solver)
        step = compiled(type(self.solver).step, self.solver)
        self.state, taken = load(self.state, *args), 0
        while taken < steps and bool(to_numpy(_moving(self.state, data))):
            self.state, taken = step(self.state, data), taken + 1
        return taken

    def stopped(self, max_iter: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The units that have stopped, their parameters, whether still moving (at the cap), their steps.

        Their slots are freed.
        """
        active, steps = to_numpy(self.state.active), to_numpy(self.state.steps)
        busy = self.unit >= 0
        done = np.flatnonzero(busy & (~active | (steps >= max_iter)))
        units = self.unit[done]
        u = to_numpy(self.state.u)[done] if done.size else np.zeros((0, self.k))
        self.unit[done] = -1
        return units, u, active[done], steps[done]


def refine_streaming(
    solver: Solver,
    prob: Problem,
    u0: np.ndarray,
    y: np.ndarray,
    free: np.ndarray,
    bounds: InternalBounds,
    max_iter: int,
    run: RunContext,
) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """:func:`prfmap.engine.solvers.refine_units` for a solver that ``streams``, as a stream (module doc).

    A batch that runs out of device memory is halved and the units not yet finished start again.

    Parameters
    ----------
    solver : Solver
        A solver whose ``streams`` is True (its ``empty`` and ``load`` fill the slots).
    prob : Problem
        The fit's tensors.
    u0 : ndarray, shape (units, K)
        Starting internal parameters.
    y : ndarray, shape (units, frames)
        The units' projected data.
    free : ndarray, shape (K,)
        1 for each fitted, 0 for each fixed internal parameter.
    bounds : InternalBounds
        Where every step is projected.
    max_iter : int
        Steps a unit may take.
    run : RunContext
        The memory budget of the batch; its progress callback hears ``("refine", done, total)`` as
        units stop.

    Returns
    -------
    u : ndarray, shape (units, K)
        Refined internal parameters.
    moving : ndarray of bool, shape (units,)
        Units still moving after ``max_iter`` steps (not converged).
    iterations : list of int
        The most steps any unit took, and the unit-steps computed (idle slots included).
    """
    n, k = u0.shape
    u_out, moving = clamp_host(u0.copy(), bounds), np.zeros(n, dtype=bool)
    slots = slot_size(n, batch_size(prob, run.mem_gb, k) // solver.copies)
    iterations, finished = [0, 0], np.zeros(n, dtype=bool)
    data = Data.of(prob, None, free, bounds, max_steps=max_iter)
    while not finished.all():
        try:
            _run_stream(solver, prob, (u_out, moving, finished, iterations), y, data, slots, max_iter, run)
        except Exception as exc:
            if slots <= MIN_BATCH or not get_backend().is_out_of_memory(exc):
                raise
            slots //= 2
    return u_out, moving, iterations


def _run_stream(
    solver: Solver,
    prob: Problem,
    out: tuple[np.ndarray, ...],
    y: np.ndarray,
    data: Data,
    slots: int,
    max_iter: int,
    run: RunContext,
) -> None:
    """Stream the units not yet finished through ``slots`` slots.

    ``out`` (parameters, still moving, finished, and the iteration counts) is written as units stop;
    ``data`` holds the fit's tensors (its ``y`` is each call's).
    """
    u_out, moving, finished, iterations = out
    todo = np.flatnonzero(~finished)
    y_all = tensor(pad(y[todo], padded_size(todo.size)), prob.dtype)
    stream = _Stream(solver, prob, y_all, data, slots, u_out.shape[1])
    queued = 0
    while True:
        free_slots = int(np.sum(stream.unit < 0))
        if queued < todo.size and free_slots:
            new = np.arange(queued, min(queued + free_slots, todo.size))
            stream.load(new, u_out[todo[new]])
            queued += new.size
        busy = int(np.sum(stream.unit >= 0))
        if busy == 0:
            return
        if queued == todo.size and busy <= stream.slots // SHRINK and stream.slots >= SMALLEST_SLOTS * SHRINK:
            stream.shrink(stream.slots // SHRINK)
        taken = stream.advance(REFILL_STEPS)
        iterations[1] += taken * stream.slots
        local, u, still, steps = stream.stopped(max_iter)
        units = todo[local]
        u_out[units], moving[units], finished[units] = u, still, True
        if steps.size:
            iterations[0] = max(iterations[0], int(steps.max()))
        if run.progress:
            run.progress("refine", int(finished.sum()), finished.size)
