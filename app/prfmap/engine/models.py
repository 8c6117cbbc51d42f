"""pRF models as batched Keras-ops functions of an internal parameter matrix.

Every model maps per-unit parameters ``theta`` (units, K) to a neural time course (units, frames) built
from one or two isotropic Gaussians summed over the stimulus. Each model also gives the analytic Jacobian
of that time course, used by Levenberg–Marquardt; SGD differentiates the same functions with the backend's
autodiff. Amplitudes (and HRF-derivative weights) are linear and are solved for, not listed here.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from keras import ops
from scipy import special

from prfmap.engine import catalog
from prfmap.engine.core_ops import at_least, matmul

EPS = 1e-12
MAX_SCALE = catalog.SURROUND_SCALE[1]  # largest surround / normalisation size relative to the centre
LOGIT_LIMIT = 15.0  # |internal| of a sigmoid transform: its natural value stays strictly inside its range


@dataclass(frozen=True)
class Param:
    """One internal (nonlinear) parameter: its name, bound transform and starting value."""

    name: str
    transform: str  # "identity" | "exp" (> 0) | "scale" (1 < value < MAX_SCALE) | "sigmoid" (0 < value < 1)
    default: float


def to_internal(theta: np.ndarray, transform: str) -> np.ndarray:
    """Map a natural parameter value to the unconstrained space the optimisers work in."""
    if transform == "identity":
        return theta
    if transform == "exp":
        return np.log(np.maximum(theta, EPS))
    if transform == "scale":
        return to_internal((theta - 1.0) / (MAX_SCALE - 1.0), "sigmoid")
    if transform == "sigmoid":
        t = np.clip(theta, 1e-6, 1 - 1e-6)
        return np.log(t / (1 - t))
    raise ValueError(transform)


def from_internal(u: Any, transform: str) -> tuple[Any, Any]:
    """Natural value and its derivative with respect to the unconstrained value (tensors)."""
    if transform == "identity":
        return u, ops.ones_like(u)
    if transform == "exp":
        v = ops.exp(ops.clip(u, -30.0, 30.0))
        return v, v
    if transform == "scale":
        v = ops.sigmoid(ops.clip(u, -LOGIT_LIMIT, LOGIT_LIMIT))
        return 1.0 + (MAX_SCALE - 1.0) * v, (MAX_SCALE - 1.0) * v * (1.0 - v)
    if transform == "sigmoid":
        v = ops.sigmoid(ops.clip(u, -LOGIT_LIMIT, LOGIT_LIMIT))
        return v, v * (1.0 - v)
    raise ValueError(transform)


def natural_values(model: PRFModel, u: np.ndarray) -> np.ndarray:
    """Natural parameters (units, K) of internal ``u`` in float64 numpy, as :meth:`PRFModel.natural`
    computes them in tensors (on the host: no eager backend operations, no compilation)."""
    u = np.asarray(u, dtype=np.float64)
    cols = []
    for k, p in enumerate(model.params):
        if p.transform == "identity":
            cols.append(u[:, k])
        elif p.transform == "exp":
            cols.append(np.exp(np.clip(u[:, k], -30.0, 30.0)))
        else:
            v = special.expit(np.clip(u[:, k], -LOGIT_LIMIT, LOGIT_LIMIT))
            cols.append(1.0 + (MAX_SCALE - 1.0) * v if p.transform == "scale" else v)
    return np.stack(cols, axis=1)


def gaussian_responses(
    x: Any,
    y: Any,
    sigma: Any,
    design_t: Any,
    px: Any,
    py: Any,
    pixel_area: float,
    with_derivatives: bool,
) -> Any:
    """Stimulus-summed unit-integral Gaussians and their derivatives in x, y and sigma.

    Parameters
    ----------
    x, y, sigma : tensor, shape (units,)
    design_t : tensor, shape (pixels, frames)
    px, py : tensor, shape (pixels,)
    pixel_area : float
        Area of one pixel in deg², so that the response does not depend on aperture resolution.
    with_derivatives : bool

    Returns
    -------
    tensor, shape (1 or 4, units, frames)
        The response, then its derivatives in x, y and sigma.
    """
    dx = px[None, :] - x[:, None]
    dy = py[None, :] - y[:, None]
    r2 = dx * dx + dy * dy
    s2 = (sigma * sigma)[:, None]
    g = ops.exp(-0.5 * r2 / s2) * (pixel_area / (2.0 * np.pi)) / s2
    if with_derivatives:
        sig = sigma[:, None]
        g = ops.stack([g, g * dx / s2, g * dy / s2, g * (r2 / (s2 * sig) - 2.0 / sig)])
    else:
        g = g[None]
    return matmul(g, design_t)


class Bounds(NamedTuple):
    """Where a refinement keeps each unit's internal parameters."""

    lower: np.ndarray  # (K,) internal values; -inf where unbounded
    upper: np.ndarray  # (K,) internal values; inf where unbounded
    eccentricity: float  # the centre (x, y: columns 0 and 1) stays within this distance of fixation


class PRFModel:
    """Base class: a named model with internal parameters and a neural response.

    A model with parameters beyond the Gaussian's ``x, y, sigma`` lists in ``seed_grid`` the values of
    those extras (internal names) tried for each unit around its Gaussian grid start (the seed search of
    ``fit_prf``); a ``sigma`` entry multiplies the unit's Gaussian size.
    """

    name: str = ""
    params: tuple[Param, ...] = ()
    seed_grid: Mapping[str, tuple[float, ...]] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """Internal parameter names in column order."""
        return tuple(p.name for p in self.params)

    def natural(self, u: Any) -> tuple[Any, Any]:
        """Natural parameters (units, K) and d natural / d internal (units, K) from internal ``u``."""
        cols = [from_internal(u[:, k], p.transform) for k, p in enumerate(self.params)]
        return ops.stack([c[0] for c in cols], axis=1), ops.stack([c[1] for c in cols], axis=1)

    def internal(self, theta: np.ndarray) -> np.ndarray:
        """Internal (unconstrained) values of natural parameters (units, K), numpy."""
        return np.stack([to_internal(theta[:, k], p.transform) for k, p in enumerate(self.params)], axis=1)

    def bounds(self, scales: Mapping[str, float]) -> Bounds:
        """The bounds of the internal parameters for a stimulus of ``scales``.

        The catalogue's bounds of the parameters the optimisers move directly (``identity`` and
        ``exp`` transforms: the centre and the size) mapped to internal values; -inf / inf where a
        parameter has no catalogue bound or its transform bounds it already (``scale``, ``sigmoid``);
        and the catalogue's largest eccentricity of the centre (columns 0 and 1, ``x`` and ``y``).
        """
        low, high = np.full(len(self.params), -np.inf), np.full(len(self.params), np.inf)
        for k, p in enumerate(self.params):
            if p.transform not in ("identity", "exp") or p.name not in catalog.PARAMETERS:
                continue
            lo, hi = catalog.PARAMETERS[p.name].bound.resolve(scales)
            if p.transform == "exp":
                lo, hi = (np.log(lo) if lo > 0 else -np.inf), (np.log(hi) if 0 < hi < np.inf else np.inf)
            low[k], high[k] = lo, hi
        return Bounds(low, high, float(catalog.PARAMETERS["eccentricity"].bound.resolve(scales)[1]))

    def neural(self, theta: Any, stim: tuple[Any, Any, Any, float], jacobian: bool) -> Any:
        """Neural time course (1 + K if jacobian, units, frames): response, then d/d theta_k."""
        raise NotImplementedError

    def report(self, theta: np.ndarray, amplitude: np.ndarray) -> dict[str, np.ndarray]:
        """Reported (snake_case) parameters from natural internal parameters and the amplitude."""
        return {"x": theta[:, 0], "y": theta[:, 1], "sigma": theta[:, 2]}

    def surround_strength(self, theta: np.ndarray) -> np.ndarray | None:
        """The surround's (or normalisation pool's) weight relative to the centre, per unit; None if none."""
        return None

    def flags(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Per-unit boolean flags of natural parameters (units, K).

        ``surround_vanished`` (models with a surround or normalisation pool): its relative weight is below
        :data:`prfmap.engine.catalog.SURROUND_VANISHED`, so the fit is a Gaussian and the surround's size
        means nothing.
        """
        strength = self.surround_strength(theta)
        return {} if strength is None else {"surround_vanished": strength < catalog.SURROUND_VANISHED}

    def seed_candidates(self, theta: np.ndarray, keep: Collection[str] = ()) -> np.ndarray:
        """Starting points (units, C, K) around each unit's natural parameters ``theta`` (units, K).

        The Cartesian product of :attr:`seed_grid`, leaving the parameters named in ``keep`` (fixed ones)
        as they are in ``theta``; one candidate per unit (``theta`` itself) when nothing is left to try.
        """
        axes = {k: v for k, v in self.seed_grid.items() if k not in keep}
        if not axes:
            return theta[:, None, :].copy()
        combos = np.array(list(itertools.product(*axes.values())), dtype=np.float64)
        out = np.repeat(theta[:, None, :], len(combos), axis=1)
        for i, name in enumerate(axes):
            k = self.names.index(name)
            out[:, :, k] = out[:, :, k] * combos[:, i] if name == "sigma" else combos[:, i]
        return out

    def from_report(self, params: dict[str, np.ndarray]) -> np.ndarray:
        """Natural internal parameters (units, K) from reported parameters."""
        n = len(np.atleast_1d(params["x"]))
        cols = []
        for p in self.params:
            value = params.get(p.name, p.default)
            cols.append(np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)))
        return np.stack(cols, axis=1)


class GaussModel(PRFModel):
    """Isotropic 2-D Gaussian pRF (Dumoulin & Wandell 2008)."""

    name = "gauss"
    params = (Param("x", "identity", 0.0), Param("y", "identity", 0.0), Param("sigma", "exp", 1.0))

    def neural(self, theta, stim, jacobian):
        design_t, px, py, area = stim
        return gaussian_responses(theta[:, 0], theta[:, 1], theta[:, 2], design_t, px, py, area, jacobian)


class CSSModel(GaussModel):
    """Compressive spatial summation (Kay et al. 2013): the Gaussian response to the power n ≤ 1."""

    name = "css"
    params = GaussModel.params + (Param("n", "sigmoid", 0.5),)
    seed_grid = {
        "n": (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),  # 1: the Gaussian, a dead end
        "sigma": (0.8, 0.85, 0.9, 0.95, 1.0, 1.05),
    }

    def seed_candidates(self, theta, keep=()):
        """As the base class; a Gaussian size σ becomes σ·√n (Kay et al. 2013: a CSS pRF of size σ and
        exponent n responds like a Gaussian of size σ/√n), unless ``sigma`` is kept."""
        out = super().seed_candidates(theta, keep)
        if "sigma" not in keep:
            out[:, :, 2] *= np.sqrt(out[:, :, 3])
        return out

    def neural(self, theta, stim, jacobian):
        s = super().neural(theta, stim, jacobian)
        n = theta[:, 3][:, None]
        base = at_least(s[0], EPS)
        log_base = ops.log(base)
        out = ops.exp(n * log_base)
        if not jacobian:
            return out[None]
        scale = ops.where(s[0] > EPS, n * out / base, 0.0)
        return ops.concatenate([out[None], s[1:] * scale[None], (out * log_base)[None]], axis=0)

    def report(self, theta, amplitude):
        return {**super().report(theta, amplitude), "n": theta[:, 3]}


class DoGModel(GaussModel):
    """Difference of Gaussians: centre minus a wider surround of relative amplitude ``ratio``."""

    name = "dog"
    params = GaussModel.params + (Param("surround_scale", "scale", 3.0), Param("surround_ratio", "exp", 0.1))
    seed_grid = {
        "surround_scale": (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0),
        "surround_ratio": (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5),
    }

    def neural(self, theta, stim, jacobian):
        design_t, px, py, area = stim
        x, y, sigma, scale, ratio = (theta[:, k] for k in range(5))
        c = gaussian_responses(x, y, sigma, design_t, px, py, area, jacobian)
        s = gaussian_responses(x, y, sigma * scale, design_t, px, py, area, jacobian)
        rho = ratio[:, None]
        out = c[0] - rho * s[0]
        if not jacobian:
            return out[None]
        return ops.stack(
            [
                out,
                c[1] - rho * s[1],
                c[2] - rho * s[2],
                c[3] - rho * s[3] * scale[:, None],
                -rho * s[3] * sigma[:, None],
                -s[0],
            ]
        )

    def surround_strength(self, theta):
        """The surround's integral relative to the centre's (``amplitude_surround / amplitude``)."""
        return theta[:, 4]

    def report(self, theta, amplitude):
        return {
            **super().report(theta, amplitude),
            "sigma_surround": theta[:, 2] * theta[:, 3],
            "amplitude_surround": theta[:, 4] * amplitude,
        }

    def from_report(self, params):
        theta = super().from_report(params)
        if "sigma_surround" in params:
            theta[:, 3] = np.asarray(params["sigma_surround"]) / theta[:, 2]
        if "amplitude_surround" in params:
            theta[:, 4] = np.asarray(params["amplitude_surround"]) / np.asarray(params["amplitude"])
        return theta


class DNModel(GaussModel):
    """Divisive normalisation (Aqil et al. 2021).

    ``(a·s_c + b) / (c·s_n + d) − b / d`` with a wider normalisation Gaussian ``s_n``. The model has one
    redundant scale (multiplying ``a, b, c, d`` by a constant changes nothing), so ``baseline_norm`` ``d``
    is fixed at 1 by default; internally ``b`` is stored relative to the amplitude ``a``.
    """

    name = "dn"
    params = GaussModel.params + (
        Param("norm_scale", "scale", 3.0),
        Param("amplitude_norm", "exp", 1.0),
        Param("activation_ratio", "exp", 0.5),
        Param("baseline_norm", "exp", 1.0),
    )
    seed_grid = {
        "norm_scale": (1.5, 2.5, 4.0, 6.0),
        "amplitude_norm": (0.1, 0.3, 1.0, 3.0),
        "activation_ratio": (0.1, 0.3, 1.0),
    }

    def neural(self, theta, stim, jacobian):
        design_t, px, py, area = stim
        x, y, sigma, scale, c, beta, d = (theta[:, k] for k in range(7))
        sc = gaussian_responses(x, y, sigma, design_t, px, py, area, jacobian)
        sn = gaussian_responses(x, y, sigma * scale, design_t, px, py, area, jacobian)
        c, beta, d = c[:, None], beta[:, None], d[:, None]
        q = c * sn[0] + d
        num = sc[0] + beta
        out = num / q - beta / d
        if not jacobian:
            return out[None]
        d_sc = 1.0 / q
        d_sn = -c * num / (q * q)
        return ops.stack(
            [
                out,
                d_sc * sc[1] + d_sn * sn[1],
                d_sc * sc[2] + d_sn * sn[2],
                d_sc * sc[3] + d_sn * sn[3] * scale[:, None],
                d_sn * sn[3] * sigma[:, None],
                -sn[0] * num / (q * q),
                1.0 / q - 1.0 / d,
                -num / (q * q) + beta / (d * d),
            ]
        )

    def surround_strength(self, theta):
        """``amplitude_norm / baseline_norm``: the most the pool changes the denominator, relatively."""
        return theta[:, 4] / theta[:, 6]

    def report(self, theta, amplitude):
        return {
            **super().report(theta, amplitude),
            "sigma_norm": theta[:, 2] * theta[:, 3],
            "amplitude_norm": theta[:, 4],
            "baseline_activation": theta[:, 5] * amplitude,
            "baseline_norm": theta[:, 6],
        }

    def from_report(self, params):
        theta = super().from_report(params)
        if "sigma_norm" in params:
            theta[:, 3] = np.asarray(params["sigma_norm"]) / theta[:, 2]
        if "baseline_activation" in params:
            theta[:, 5] = np.asarray(params["baseline_activation"]) / np.asarray(params["amplitude"])
        return theta


MODELS: dict[str, PRFModel] = {m.name: m for m in (GaussModel(), CSSModel(), DoGModel(), DNModel())}
"""The numerical side of every model of :data:`prfmap.engine.catalog.MODELS`, by name."""


def reported_parameters(model: PRFModel) -> tuple[str, ...]:
    """The keys a fit of ``model`` reports, in order: ``model.report``'s, then amplitude and baseline."""
    theta = np.ones((1, len(model.params)))
    return tuple(model.report(theta, np.ones(1))) + ("amplitude", "baseline")


def register_model(model: PRFModel) -> PRFModel:
    """Add ``model`` to :data:`MODELS`; its catalogue entry must exist and list what it reports."""
    spec = catalog.get_model_spec(model.name)
    reported = reported_parameters(model)
    if reported != spec.parameters:
        raise ValueError(
            f"model {model.name!r} reports {reported}, its catalogue entry lists {spec.parameters}"
        )
    MODELS[model.name] = model
    return model


def get_model(name: str) -> PRFModel:
    """Return the model called ``name`` (a key of :data:`MODELS`)."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}") from None


def model_parameters(name: str) -> tuple[str, ...]:
    """Reported parameter names of a model, without the HRF weights (from the catalogue)."""
    return catalog.get_model_spec(get_model(name).name).parameters


def free_mask(model: PRFModel, fixed: Mapping[str, float]) -> tuple[np.ndarray, dict[str, float]]:
    """1 for each fitted, 0 for each fixed internal parameter, and the fixed values.

    ``fixed`` adds to (or overrides) the defaults of the model's catalogue entry.
    """
    fixed = {**catalog.MODELS[model.name].fixed, **dict(fixed)}
    unknown = set(fixed) - set(model.names)
    if unknown:
        raise ValueError(
            f"cannot fix {sorted(unknown)} of model {model.name!r}; fixable: {', '.join(model.names)}"
        )
    return np.array([0.0 if n in fixed else 1.0 for n in model.names]), fixed


def floatx(dtype: str) -> str:
    """Validate a float dtype name."""
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return dtype


__all__ = ["MODELS", "PRFModel", "free_mask", "get_model", "model_parameters", "register_model"]
