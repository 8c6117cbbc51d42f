"""A toy fifth and sixth model, third refiner and second noise model: each one class plus one registration.

Nothing else in prfmap knows them: :func:`registered` adds the four entries to the catalogue for the
length of a test (``tests/test_extension_points.py`` runs a participant, its report and a Boutiques
simulation with them; ``tests/engine/catalog/test_catalog.py`` fits the models on every backend;
``tests/engine/test_conformance.py`` holds them to the contracts' promises).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np
from keras import ops
from scipy.linalg import toeplitz

from prfmap.engine import catalog, kernels
from prfmap.engine.backend.ops import at_least, matmul
from prfmap.engine.models import PRFModel
from prfmap.engine.models.gaussians import GaussModel
from prfmap.engine.models.transforms import MAX_SCALE, InternalParameter
from prfmap.engine.noise import BaseNoiseModel, pooled_autocorrelation
from prfmap.engine.solvers import Data, Solution, Solver, clamp


class SaturatingModel(GaussModel):
    """A toy fifth model: the Gaussian response saturates, ``s / (1 + k·s)`` with ``k`` > 0."""

    params = GaussModel.params + (InternalParameter("saturation", "exp", 0.5),)

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


class StudentModel(PRFModel):
    """A toy sixth model, written against the ``PRFModel`` contract alone: a heavy-tailed pRF.

    The unit-integral bivariate Student-t profile ``(ν - 1) / (π a) · (1 + r² / a)^-ν`` with
    ``a = 2 ν σ²`` (ν > 1, the ``scale`` transform's range), which tends to the Gaussian of size σ as
    ν grows; its own kernel over the stimulated pixels and its own analytic Jacobian.
    """

    params = (
        InternalParameter("x", "identity", 0.0),
        InternalParameter("y", "identity", 0.0),
        InternalParameter("sigma", "exp", 1.0),
        InternalParameter("tail", "scale", 3.0),
    )

    def neural(self, theta, stim, jacobian):
        x, y, sigma, nu = (theta[:, k][:, None] for k in range(4))
        dx, dy = stim.x[None, :] - x, stim.y[None, :] - y
        d = dx * dx + dy * dy
        a = 2.0 * nu * sigma * sigma
        b = 1.0 + d / a
        log_b = ops.log(b)
        k = (nu - 1.0) / (np.pi * a) * ops.exp(-nu * log_b) * stim.pixel_area
        if not jacobian:
            return matmul(k[None], stim.design)
        g = 2.0 * nu / (a * b)  # d log k / d x = g dx
        d_sigma = (2.0 / sigma) * (nu * d / (a * b) - 1.0)
        d_nu = 1.0 / (nu - 1.0) - 1.0 / nu - log_b + d / (a * b)
        return matmul(ops.stack([k, k * g * dx, k * g * dy, k * d_sigma, k * d_nu]), stim.design)

    def report(self, theta, amplitude):
        return {"x": theta[:, 0], "y": theta[:, 1], "sigma": theta[:, 2], "tail": theta[:, 3]}


STUDENT_REFERENCE = "Toy T (2026). A heavy-tailed pRF written against the model contract. J Test Models 1:2."
TOY_STUDENT = catalog.ModelSpec(
    "toystudent",
    "heavy-tailed (Student-t) pRF",
    "a test of prfmap",
    (
        "x",
        "y",
        "sigma",
        catalog.Parameter(
            "tail",
            "1",
            "tail exponent of the toy Student-t pRF (large: the Gaussian)",
            catalog.Bound(catalog.Limit(1.0, inclusive=False), catalog.Limit(MAX_SCALE)),
            neutral=3.0,
        ),
        "amplitude",
        "baseline",
    ),
    reference=STUDENT_REFERENCE,
    implementation="toys:StudentModel",
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
        u_new = clamp(state.u - move * state.gradient / state.scale, data)
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


@dataclass(frozen=True)
class AR1PlusWhite(BaseNoiseModel):
    """A toy second noise model: AR(1) noise plus white noise, SPM's AR(1) + white model.

    Its correlation is ``ρ_k = (1 - λ) φ^k`` at lags k ≥ 1 (``λ`` the white share of the variance):
    an ARMA(1, 1) process, whose whitening (the inverse Cholesky factor of that Toeplitz matrix, the
    contract's) is no finite autoregression. Estimated from the pooled autocorrelation at lags 1 and 2
    (``φ = ρ₂ / ρ₁``, ``1 - λ = ρ₁² / ρ₂``), corrected for the nuisance projection as ``ar<p>`` is (a
    fixed point: the model whose projected autocorrelation matches the residuals').
    """

    option: str = "toyarw"
    phi: float = 0.0
    white_fraction: float = 1.0
    units: int = 0

    @classmethod
    def estimate(cls, resid, projector, run_lengths, *, option, units, **options):
        target = pooled_autocorrelation(resid, run_lengths, 3)
        rho, model = target.copy(), cls.of(target, option, units)
        for _ in range(8):
            cov, predicted, start = projector @ model.covariance(run_lengths) @ projector, np.zeros(3), 0
            for n in run_lengths:
                predicted += [
                    np.trace(cov[start : start + n, start : start + n], offset=-k) for k in range(3)
                ]
                start += n
            rho = rho + target - predicted / predicted[0]
            model = cls.of(rho, option, units)
        return model

    @classmethod
    def of(cls, rho, option, units):
        """The model of autocorrelations ``rho`` at lags 0, 1, 2."""
        phi = float(np.clip(rho[2] / rho[1], 0.0, 0.95)) if rho[1] > 0 and rho[2] > 0 else 0.0
        coloured = float(np.clip(rho[1] / phi, 0.0, 1.0)) if phi > 0 else 0.0
        return cls(option, phi, 1.0 - coloured, units)

    def run_covariance(self, run, n):
        rho = (1.0 - self.white_fraction) * self.phi ** np.arange(n, dtype=np.float64)
        rho[0] = 1.0
        return toeplitz(rho)

    def describe(self):
        return {
            "option": self.option,
            "description": f"AR(1) plus white noise pooled over {self.units} units (a test of prfmap)",
            "coefficients": [round(self.phi, 6), round(self.white_fraction, 6)],
            "units": self.units,
        }


NOISE_DESCRIPTION = "AR(1) plus white noise, a toy registry entry (a test of prfmap)"
TOY_NOISE = catalog.NoiseSpec("toyarw", NOISE_DESCRIPTION, implementation="toys:AR1PlusWhite")
"""A second noise model: one class (its ``"module:Class"`` path) and one entry."""


def example_params(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Parameters of ``n`` saturating pRFs inside a 20° field (the conformance suites' examples)."""
    r, a = 5.0 * np.sqrt(rng.uniform(0, 1, n)), rng.uniform(0, 2 * np.pi, n)
    return {
        "x": r * np.cos(a),
        "y": r * np.sin(a),
        "sigma": rng.uniform(0.5, 3.0, n),
        "saturation": rng.uniform(0.5, 2.0, n),
        "amplitude": rng.uniform(1, 3, n),
        "baseline": rng.uniform(-1, 1, n),
    }


def student_params(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Parameters of ``n`` heavy-tailed pRFs inside a 20° field (tails heavy enough to tell apart)."""
    params = example_params(n, rng)
    del params["saturation"]
    return params | {"tail": rng.uniform(1.5, 4.0, n)}


EXAMPLES = {TOY_MODEL.name: example_params, TOY_STUDENT.name: student_params}
"""Example parameters of each toy model, by name."""

TOY_MODELS = (TOY_MODEL, TOY_STUDENT)


@contextlib.contextmanager
def registered() -> Iterator[None]:
    """The toy models, refiner and noise model in the catalogue for the length of the block."""
    for model in TOY_MODELS:
        catalog.register_model(model)
    catalog.register_refiner(TOY_REFINER)
    catalog.register_noise_model(TOY_NOISE)
    try:
        yield
    finally:
        catalog.NOISE_MODELS.pop(TOY_NOISE.name)
        catalog.REFINERS.pop(TOY_REFINER.name)
        for model in TOY_MODELS:
            catalog.MODELS.pop(model.name)
            for parameter in model.defines:
                catalog.PARAMETERS.pop(parameter.key)
