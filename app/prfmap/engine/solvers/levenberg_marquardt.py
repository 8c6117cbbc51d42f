"""Levenberg–Marquardt on the variable-projection residual, with the models' analytic Jacobians."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NamedTuple

import numpy as np
from keras import ops

from prfmap.engine import kernels
from prfmap.engine.backend.ops import at_least, spd_solve, tensor
from prfmap.engine.models import PRFModel
from prfmap.engine.solvers import Data, Solution, Solver, Tensor, clamp


class LMState(NamedTuple):
    """Levenberg–Marquardt state of a batch (``units`` rows each)."""

    u: Tensor  # (units, K) internal parameters
    cost: Tensor  # (units,) residual sum of squares
    jtj: Tensor  # (units, K, K) Gauss–Newton matrix
    jte: Tensor  # (units, K) gradient
    damping: Tensor  # (units,)
    active: Tensor  # (units,) bool: still moving
    rejected: Tensor  # (units,) consecutive rejected steps
    steps: Tensor  # (units,) steps taken (accepted or not)
    fresh: Tensor  # (units,) bool: cost, jtj, jte not yet evaluated; the next step evaluates them at u


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
    streams: ClassVar[bool] = True

    def initial_carry(self, n: int) -> tuple[np.ndarray, ...]:
        """Every unit's first damping."""
        return (np.full(n, self.damping_start),)

    def init(self, u: Tensor, data: Data, damping: Tensor) -> LMState:
        """The cost, Gauss–Newton matrix and gradient at ``u``, with the given damping."""
        cost, jtj, jte = kernels.vp_normal_equations(
            self.model, u, data.y, data.free, data.stim, data.hrf_t, data.q
        )
        n = ops.shape(u)[0]
        zeros = ops.zeros((n,), dtype=u.dtype)
        return LMState(
            u,
            cost,
            jtj,
            jte,
            damping,
            ops.ones((n,), dtype="bool"),
            zeros,
            zeros,
            ops.zeros((n,), dtype="bool"),
        )

    def step(self, state: LMState, data: Data) -> LMState:
        """One damped step per unit, kept where the cost drops (the damping falls), else undone (it rises).

        A ``fresh`` unit is evaluated where it is instead (its start: :mod:`~prfmap.engine.solvers.streaming`
        loads units into a running batch that way), and a unit at ``data.max_steps`` steps waits.
        """
        u, cost, jtj, jte, lam, active, rejected, steps, fresh = state
        move = active & ~fresh
        if data.max_steps is not None:
            move = move & (steps < data.max_steps)
        diag = ops.diagonal(jtj, axis1=1, axis2=2)
        k = ops.shape(u)[1]
        damp = (
            lam[:, None] * diag
            + (1.0 - data.free)[None]
            + self.diagonal_floor * at_least(ops.max(diag, axis=1, keepdims=True), kernels.TINY)
        )
        system = jtj + ops.eye(k, dtype=u.dtype)[None] * damp[:, :, None]
        delta = (
            -spd_solve(system, jte[:, :, None])[:, :, 0] * data.free[None] * ops.cast(move, u.dtype)[:, None]
        )
        u_new = clamp(u + delta, data)
        cost_new, jtj_new, jte_new = kernels.vp_normal_equations(
            self.model, u_new, data.y, data.free, data.stim, data.hrf_t, data.q
        )
        accept = move & (cost_new < cost) & ops.isfinite(cost_new)
        take = accept | fresh
        rel = (cost - cost_new) / at_least(cost, kernels.TINY)
        rejected = ops.where(accept, 0.0, rejected + ops.cast(move, u.dtype))
        done = (accept & (rel < self.tol)) | (rejected >= float(self.max_rejections))
        t1 = take[:, None]
        damping = ops.clip(
            ops.where(accept, lam * self.damping_down, lam * self.damping_up),
            self.damping_min,
            self.damping_max,
        )
        return LMState(
            ops.where(t1, u_new, u),
            ops.where(take, cost_new, cost),
            ops.where(t1[:, :, None], jtj_new, jtj),
            ops.where(t1, jte_new, jte),
            ops.where(fresh, lam, damping),
            active & ~done,
            rejected,
            steps + ops.cast(move, u.dtype),
            ops.zeros_like(fresh),
        )

    def empty(self, n: int, k: int) -> LMState:
        """``n`` empty slots of ``k`` parameters: no unit, nothing moving."""
        zeros = np.zeros(n)
        return LMState(
            *(
                tensor(a, self.dtype)
                for a in (
                    np.zeros((n, k)),
                    zeros,
                    np.zeros((n, k, k)),
                    np.zeros((n, k)),
                    zeros + self.damping_start,
                )
            ),
            ops.zeros((n,), dtype="bool"),
            tensor(zeros, self.dtype),
            tensor(zeros, self.dtype),
            ops.zeros((n,), dtype="bool"),
        )

    def load(self, state: LMState, reset: Tensor, u: Tensor, busy: Tensor) -> LMState:
        """``state`` with the slots of ``reset`` holding new units at ``u`` (where ``busy``) or nothing.

        A loaded unit is ``fresh``: the next :meth:`step` evaluates it where it starts.
        """
        r1 = reset[:, None]
        zero = ops.zeros_like(state.cost)
        return LMState(
            ops.where(r1, u, state.u),
            ops.where(reset, ops.full_like(state.cost, np.inf), state.cost),
            ops.where(r1[:, :, None], ops.zeros_like(state.jtj), state.jtj),
            ops.where(r1, ops.zeros_like(state.jte), state.jte),
            ops.where(reset, ops.full_like(state.damping, self.damping_start), state.damping),
            ops.where(reset, busy, state.active),
            ops.where(reset, zero, state.rejected),
            ops.where(reset, zero, state.steps),
            ops.where(reset, busy, state.fresh),
        )

    def terminate(self, state: LMState) -> Tensor:
        """True when no unit still moves."""
        return ~ops.any(state.active)

    def postprocess(self, state: LMState) -> Solution:
        """The parameters, moving units, and each unit's damping for the next round."""
        return Solution(state.u, state.active, (state.damping,))
