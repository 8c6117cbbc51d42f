"""Adam on the variable-projection cost, with the backend's automatic gradients."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar, NamedTuple

import numpy as np
from keras import ops

from prfmap.engine import kernels
from prfmap.engine.backend import get_backend
from prfmap.engine.models import PRFModel
from prfmap.engine.solvers import Data, Solution, Solver, Tensor, clamp


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
        grad = get_backend().value_and_grad(partial(kernels.vp_objective, self.model), has_aux=True)
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
        u = clamp(u, data)
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
