"""pRF models as batched Keras-ops functions of an internal parameter matrix.

Every model maps per-unit parameters ``theta`` (units, K) to a neural time course (units, frames) built
from one or two isotropic Gaussians summed over the stimulus. Each model also gives the analytic Jacobian
of that time course, used by Levenberg–Marquardt; SGD differentiates the same functions with the backend's
autodiff. Amplitudes (and HRF-derivative weights) are linear and are solved for, not listed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple

import numpy as np
from keras import ops

from prfmap.engine import catalog
from prfmap.engine.core_ops import at_least, matmul

EPS = 1e-12
MAX_SCALE = catalog.SURROUND_SCALE[1]  # largest surround / normalisation size relative to the centre


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
        v = ops.sigmoid(u)
        return 1.0 + (MAX_SCALE - 1.0) * v, (MAX_SCALE - 1.0) * v * (1.0 - v)
    if transform == "sigmoid":
        v = ops.sigmoid(u)
        return v, v * (1.0 - v)
    raise ValueError(transform)


def gaussian_responses(
    x: Any, y: Any, sigma: Any, design_t: Any, px: Any, py: Any, pixel_area: float,
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
    """Base class: a named model with internal parameters and a neural response."""

    name: str = ""
    params: tuple[Param, ...] = ()
    grid_extras: dict[str, tuple[float, ...]] = {}

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
        return np.stack(
            [to_internal(theta[:, k], p.transform) for k, p in enumerate(self.params)], axis=1
        )

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
        return gaussian_responses(theta[:, 0], theta[:, 1], theta[:, 2], design_t, px, py, area,
                                  jacobian)


class CSSModel(GaussModel):
    """Compressive spatial summation (Kay et al. 2013): the Gaussian response to the power n ≤ 1."""

    name = "css"
    params = GaussModel.params + (Param("n", "sigmoid", 0.5),)
    grid_extras = {"n": (0.25, 0.5, 0.8)}

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
    params = GaussModel.params + (Param("surround_scale", "scale", 3.0),
                                  Param("surround_ratio", "exp", 0.1))

    def neural(self, theta, stim, jacobian):
        design_t, px, py, area = stim
        x, y, sigma, scale, ratio = (theta[:, k] for k in range(5))
        c = gaussian_responses(x, y, sigma, design_t, px, py, area, jacobian)
        s = gaussian_responses(x, y, sigma * scale, design_t, px, py, area, jacobian)
        rho = ratio[:, None]
        out = c[0] - rho * s[0]
        if not jacobian:
            return out[None]
        return ops.stack([
            out,
            c[1] - rho * s[1],
            c[2] - rho * s[2],
            c[3] - rho * s[3] * scale[:, None],
            -rho * s[3] * sigma[:, None],
            -s[0],
        ])

    def report(self, theta, amplitude):
        return {**super().report(theta, amplitude), "sigma_surround": theta[:, 2] * theta[:, 3],
                "amplitude_surround": theta[:, 4] * amplitude}

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
    params = GaussModel.params + (Param("norm_scale", "scale", 3.0),
                                  Param("amplitude_norm", "exp", 1.0),
                                  Param("activation_ratio", "exp", 0.5),
                                  Param("baseline_norm", "exp", 1.0))

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
        return ops.stack([
            out,
            d_sc * sc[1] + d_sn * sn[1],
            d_sc * sc[2] + d_sn * sn[2],
            d_sc * sc[3] + d_sn * sn[3] * scale[:, None],
            d_sn * sn[3] * sigma[:, None],
            -sn[0] * num / (q * q),
            1.0 / q - 1.0 / d,
            -num / (q * q) + beta / (d * d),
        ])

    def report(self, theta, amplitude):
        return {**super().report(theta, amplitude), "sigma_norm": theta[:, 2] * theta[:, 3],
                "amplitude_norm": theta[:, 4], "baseline_activation": theta[:, 5] * amplitude,
                "baseline_norm": theta[:, 6]}

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
        raise ValueError(f"model {model.name!r} reports {reported}, its catalogue entry lists "
                         f"{spec.parameters}")
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
