"""A toy fifth model, third refiner and noise model: each one class or entry plus one registration.

Nothing else in prfmap knows them: :func:`registered` adds the three entries to the catalogue for the
length of a test (``tests/test_extension_points.py`` runs a participant, its report and a Boutiques
simulation with them; ``tests/engine/test_catalog.py`` fits the model on every backend).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from keras import ops

from prfmap.engine import catalog, kernels
from prfmap.engine.backend.ops import at_least
from prfmap.engine.models import PRFModel
from prfmap.engine.models.gaussians import GaussModel
from prfmap.engine.models.transforms import Param
from prfmap.engine.solvers import Data, Solution, Solver, project


class SaturatingModel(GaussModel):
    """A toy fifth model: the Gaussian response saturates, ``s / (1 + k·s)`` with ``k`` > 0."""

    name = "toysat"
    params = GaussModel.params + (Param("saturation", "exp", 0.5),)

    def neural(self, theta, stim, jacobian):
        s = super().neural(theta, stim, jacobian)
        denom = 1.0 + theta[:, 3][:, None] * s[0]
        out = s[0] / denom
        if not jacobian:
            return out[None]
        d_s = 1.0 / (denom * denom)
        return ops.concatenate([out[None], s[1:] * d_s[None], (-s[0] * s[0] * d_s)[None]], axis=0)

    def report(self, theta, amplitude):
        return {**super().report(theta, amplitude), "saturation": theta[:, 3]}


MODEL_REFERENCE = "Toy T (2026). A saturating pRF that tests one registry entry. J Test Models 1:1."
TOY_MODEL = catalog.ModelSpec(
    "toysat",
    "saturating Gaussian pRF",
    "a test of prfmap",
    (
        "x",
        "y",
        "sigma",
        catalog.Parameter(
            "saturation",
            "1",
            "saturation constant of the toy model",
            catalog.Bound(catalog.Limit(0.0)),
            neutral=0.5,
        ),
        "amplitude",
        "baseline",
    ),
    reference=MODEL_REFERENCE,
    implementation=SaturatingModel,
)


class ScaledGradientState(NamedTuple):
    """The toy refiner's state of a batch."""

    u: Any  # (units, K)
    cost: Any  # (units,)
    gradient: Any  # (units, K)
    scale: Any  # (units, K) the Gauss–Newton diagonal
    step: Any  # (units,) step length
    active: Any  # (units,) bool


@dataclass(frozen=True)
class ScaledGradient(Solver[ScaledGradientState]):
    """A toy third refiner: gradient steps scaled by the Gauss–Newton diagonal, lengthened when the cost
    drops and halved when it does not."""

    model: PRFModel
    dtype: str
    tol: float
    grow: float = 1.5
    shrink: float = 0.5
    shortest: float = 1e-4
    round_length: int | None = None
    copies: ClassVar[int] = 1

    def initial_carry(self, n: int) -> tuple[np.ndarray, ...]:
        return ()

    def _evaluate(self, u: Any, data: Data) -> tuple[Any, Any, Any]:
        cost, jtj, jte = kernels.vp_normal_equations(
            self.model, u, data.y, data.free, data.stim, data.hrf_t, data.q
        )
        return cost, jte, at_least(ops.diagonal(jtj, axis1=1, axis2=2), kernels.TINY)

    def init(self, u: Any, data: Data) -> ScaledGradientState:
        cost, gradient, scale = self._evaluate(u, data)
        n = ops.shape(u)[0]
        return ScaledGradientState(
            u, cost, gradient, scale, ops.ones((n,), dtype=u.dtype), ops.ones((n,), dtype="bool")
        )

    def step(self, state: ScaledGradientState, data: Data) -> ScaledGradientState:
        move = state.step[:, None] * ops.cast(state.active, state.u.dtype)[:, None] * data.free[None]
        u_new = project(state.u - move * state.gradient / state.scale, data)
        cost, gradient, scale = self._evaluate(u_new, data)
        accept = state.active & (cost < state.cost) & ops.isfinite(cost)
        rel = (state.cost - cost) / at_least(state.cost, kernels.TINY)
        step = ops.where(accept, state.step * self.grow, state.step * self.shrink)
        done = (accept & (rel < self.tol)) | (step < self.shortest)
        a1 = accept[:, None]
        return ScaledGradientState(
            ops.where(a1, u_new, state.u),
            ops.where(accept, cost, state.cost),
            ops.where(a1, gradient, state.gradient),
            ops.where(a1, scale, state.scale),
            step,
            state.active & ~done,
        )

    def terminate(self, state: ScaledGradientState) -> Any:
        return ~ops.any(state.active)

    def postprocess(self, state: ScaledGradientState) -> Solution:
        return Solution(state.u, state.active, ())


REFINER_REFERENCE = "Toy T (2026). Scaled gradient steps as a third refiner. J Test Solvers 2:2."
TOY_REFINER = catalog.RefinerSpec(
    "toygd",
    "gradient steps scaled by the Gauss-Newton diagonal",
    max_iter=40,
    tol=1e-4,
    solver=ScaledGradient,
    options={"grow": 1.5},
    reference=REFINER_REFERENCE,
)


def example_params(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Parameters of ``n`` toy-model pRFs inside a 20° field (the conformance suites' examples)."""
    r, a = 5.0 * np.sqrt(rng.uniform(0, 1, n)), rng.uniform(0, 2 * np.pi, n)
    return {
        "x": r * np.cos(a),
        "y": r * np.sin(a),
        "sigma": rng.uniform(0.5, 3.0, n),
        "saturation": rng.uniform(0.5, 2.0, n),
        "amplitude": rng.uniform(1, 3, n),
        "baseline": rng.uniform(-1, 1, n),
    }


TOY_NOISE = catalog.NoiseSpec("toyar5", "AR(5) noise of a toy registry entry (a test of prfmap)", 5)
"""A second kind of noise model entry: an autoregressive order the built-ins do not offer."""

EXAMPLES = {TOY_MODEL.name: example_params}
"""Example parameters of each toy model, by name."""


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """The toy model, refiner and noise model in the catalogue for the length of the block."""
    catalog.register_model(TOY_MODEL)
    catalog.register_refiner(TOY_REFINER)
    catalog.register_noise_model(TOY_NOISE)
    try:
        yield
    finally:
        catalog.NOISE_MODELS.pop(TOY_NOISE.name)
        catalog.MODELS.pop(TOY_MODEL.name)
        catalog.REFINERS.pop(TOY_REFINER.name)
        for parameter in TOY_MODEL.defines:
            catalog.PARAMETERS.pop(parameter.key)
