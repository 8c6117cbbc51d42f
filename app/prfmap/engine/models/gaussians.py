"""The models built from isotropic Gaussians summed over the stimulus: ``gauss``, ``css``, ``dog``, ``dn``.

Each is a :class:`~prfmap.engine.models.PRFModel` subclass with its analytic Jacobian; the catalogue
entries (:data:`prfmap.engine.catalog.MODELS`) name them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from keras import ops

from prfmap.engine.backend.ops import at_least, matmul
from prfmap.engine.models import PRFModel
from prfmap.engine.models.transforms import EPS, InternalParameter
from prfmap.engine.stimulus import StimulusTensors


def gaussian_responses(x: Any, y: Any, sigma: Any, stim: StimulusTensors, with_derivatives: bool) -> Any:
    """Stimulus-summed unit-integral Gaussians and their derivatives in x, y and sigma.

    Parameters
    ----------
    x, y, sigma : tensor, shape (units,)
        Centres and sizes, degrees.
    stim : StimulusTensors
        The stimulated pixels (their area makes the response independent of the resolution).
    with_derivatives : bool
        Also the derivatives.

    Returns
    -------
    tensor, shape (1 or 4, units, frames)
        The response, then its derivatives in x, y and sigma.
    """
    dx = stim.x[None, :] - x[:, None]
    dy = stim.y[None, :] - y[:, None]
    r2 = dx * dx + dy * dy
    s2 = (sigma * sigma)[:, None]
    g = ops.exp(-0.5 * r2 / s2) * (stim.pixel_area / (2.0 * np.pi)) / s2
    if with_derivatives:
        sig = sigma[:, None]
        g = ops.stack([g, g * dx / s2, g * dy / s2, g * (r2 / (s2 * sig) - 2.0 / sig)])
    else:
        g = g[None]
    return matmul(g, stim.design)


def _sized_responses(x: Any, y: Any, sigma: Any, sizes: Any, which: Any, stim: StimulusTensors) -> Any:
    """Responses (units, C, frames) of Gaussians at each unit's centre, ``sizes[which]`` times ``sigma``.

    Each unit's S distinct sizes are computed once and given to its C candidates.
    """
    n_sizes = ops.shape(sizes)[0]
    centres = ops.reshape(ops.repeat(ops.stack([x, y], axis=1), n_sizes, axis=0), (-1, 2))
    wide = ops.reshape(sigma[:, None] * ops.cast(sizes, sigma.dtype)[None, :], (-1,))
    each = gaussian_responses(centres[:, 0], centres[:, 1], wide, stim, False)[0]
    each = ops.reshape(each, (ops.shape(x)[0], n_sizes, -1))
    return ops.einsum("ucs,usd->ucd", ops.one_hot(which, n_sizes, dtype=each.dtype), each)


class GaussModel(PRFModel):
    """Isotropic 2-D Gaussian pRF (Dumoulin & Wandell 2008)."""

    params = (
        InternalParameter("x", "identity", 0.0),
        InternalParameter("y", "identity", 0.0),
        InternalParameter("sigma", "exp", 1.0),
    )
    gaussian_at: Mapping[str, float] = {}
    """The extras' values at which the model's response is the Gaussian's (:meth:`as_gaussian`)."""

    def as_gaussian(self, theta):
        """As :meth:`PRFModel.as_gaussian`: :attr:`gaussian_at`, the gain 1."""
        out = np.array(theta, dtype=np.float64, copy=True)
        for name, value in self.gaussian_at.items():
            out[:, self.names.index(name)] = value
        return out, np.ones(len(out))

    def neural(self, theta, stim, jacobian):
        """The response of :meth:`PRFModel.neural` for this model."""
        return gaussian_responses(theta[:, 0], theta[:, 1], theta[:, 2], stim, jacobian)


class CSSModel(GaussModel):
    """Compressive spatial summation (Kay et al. 2013): the Gaussian response to the power n ≤ 1."""

    params = GaussModel.params + (InternalParameter("n", "sigmoid", 0.5),)
    gaussian_at = {"n": 1.0}
    seed_grid = {
        "n": (0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9),  # 1: the Gaussian, a dead end
        "sigma": (0.8, 0.85, 0.9, 0.95, 1.0, 1.05),
    }

    def seed_candidates(self, theta, keep=()):
        """As the base class.

        A Gaussian size σ becomes σ·√n (Kay et al. 2013: a CSS pRF of size σ and exponent n responds like a
        Gaussian of size σ/√n), unless ``sigma`` is kept.
        """
        out = super().seed_candidates(theta, keep)
        if "sigma" not in keep:
            out[:, :, 2] *= np.sqrt(out[:, :, 3])
        return out

    def neural(self, theta, stim, jacobian):
        """The response of :meth:`PRFModel.neural` for this model."""
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
        """Reported parameters, as :meth:`PRFModel.report`."""
        return {**super().report(theta, amplitude), "n": theta[:, 3]}


class TwoGaussianModel(GaussModel):
    """A centre Gaussian and a second, concentric one :attr:`second_size` times as wide, combined."""

    second_size: str = ""
    """The parameter that sizes the second Gaussian relative to ``sigma`` (a surround, a pool)."""

    def neural(self, theta, stim, jacobian):
        """The response of :meth:`PRFModel.neural` for this model."""
        x, y, sigma = theta[:, 0], theta[:, 1], theta[:, 2]
        scale = theta[:, self.names.index(self.second_size)]
        centre = gaussian_responses(x, y, sigma, stim, jacobian)
        return self.combine(theta, centre, gaussian_responses(x, y, sigma * scale, stim, jacobian), jacobian)

    def candidate_sizes(self, candidates):
        """As :meth:`PRFModel.candidate_sizes`: the second Gaussian's, the centre and size shared."""
        if np.any(candidates[:, :, :3] != candidates[:, :1, :3]):
            return None
        return candidates[:, :, self.names.index(self.second_size)]

    def candidate_neural(self, theta, sizes, which, stim):
        """The responses of :meth:`PRFModel.candidate_neural`: 1 + S Gaussians per unit, not 2·C."""
        n_units, n_cand, k = tuple(ops.shape(theta))
        x, y, sigma = theta[:, 0, 0], theta[:, 0, 1], theta[:, 0, 2]
        centre = gaussian_responses(x, y, sigma, stim, False)[0]
        chosen = _sized_responses(x, y, sigma, sizes, which, stim)
        frames = ops.shape(centre)[1]
        out = self.combine(
            ops.reshape(theta, (n_units * n_cand, k)),
            ops.reshape(ops.repeat(centre[:, None, :], n_cand, axis=1), (1, n_units * n_cand, frames)),
            ops.reshape(chosen, (1, n_units * n_cand, frames)),
            False,
        )
        return ops.reshape(out[0], (n_units, n_cand, frames))

    def combine(self, theta: Any, centre: Any, second: Any, jacobian: bool) -> Any:
        """The neural response (and its Jacobian) from the two Gaussians' stimulus responses.

        Parameters
        ----------
        theta : tensor, shape (units, K)
            Natural parameters.
        centre, second : tensor, shape (1 or 4, units, frames)
            :func:`gaussian_responses` of the centre and of the second Gaussian.
        jacobian : bool
            Also the derivatives.

        Returns
        -------
        tensor, shape (1 + K if jacobian else 1, units, frames)
        """
        raise NotImplementedError


class DoGModel(TwoGaussianModel):
    """Difference of Gaussians: centre minus a wider surround of relative amplitude ``ratio``."""

    second_size = "surround_scale"
    params = GaussModel.params + (
        InternalParameter("surround_scale", "scale", 3.0),
        InternalParameter("surround_ratio", "exp", 0.1),
    )
    gaussian_at = {"surround_ratio": 0.0}
    seed_grid = {
        "surround_scale": (1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0),
        "surround_ratio": (0.02, 0.05, 0.1, 0.15, 0.2, 0.3, 0.5),
    }

    def combine(self, theta, c, s, jacobian):
        """The response of :meth:`TwoGaussianModel.combine` for this model."""
        sigma, scale, ratio = theta[:, 2], theta[:, 3], theta[:, 4]
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
        """Reported parameters, as :meth:`PRFModel.report`."""
        return {
            **super().report(theta, amplitude),
            "sigma_surround": theta[:, 2] * theta[:, 3],
            "amplitude_surround": theta[:, 4] * amplitude,
        }

    def from_report(self, params):
        """Natural parameters, as :meth:`PRFModel.from_report`."""
        theta = super().from_report(params)
        if "sigma_surround" in params:
            theta[:, 3] = relative(params["sigma_surround"], theta[:, 2])
        if "amplitude_surround" in params:
            theta[:, 4] = relative(params["amplitude_surround"], params["amplitude"])
        return theta


def relative(value: Any, scale: Any) -> np.ndarray:
    """``value / scale`` of reported parameters, quietly: 0 where both are 0, NaN where only ``scale`` is.

    A unit with zero amplitude and no surround (or baseline) predicts nothing, as a ratio of 0 does;
    one with zero amplitude and a surround has no ratio, and NaN marks it (numpy would warn and
    give inf or NaN on stderr).

    Parameters
    ----------
    value, scale : array-like
        The parameter and what it is expressed relative to (e.g. ``amplitude_surround`` and
        ``amplitude``).

    Returns
    -------
    ndarray of float64
    """
    value, scale = np.asarray(value, dtype=np.float64), np.asarray(scale, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.where(
            scale != 0, value / np.where(scale != 0, scale, 1.0), np.where(value == 0, 0.0, np.nan)
        )
    return np.where(np.isfinite(value) & np.isfinite(scale), out, np.nan)


class DNModel(TwoGaussianModel):
    """Divisive normalisation (Aqil et al. 2021).

    ``(a·s_c + b) / (c·s_n + d) − b / d`` with a wider normalisation Gaussian ``s_n``. The model has one
    redundant scale (multiplying ``a, b, c, d`` by a constant changes nothing), so ``baseline_norm`` ``d``
    is fixed at 1 by default; internally ``b`` is stored relative to the amplitude ``a``.
    """

    second_size = "norm_scale"
    params = GaussModel.params + (
        InternalParameter("norm_scale", "scale", 3.0),
        InternalParameter("amplitude_norm", "exp", 1.0),
        InternalParameter("activation_ratio", "exp", 0.5),
        InternalParameter("baseline_norm", "exp", 1.0),
    )
    gaussian_at = {"amplitude_norm": 0.0}
    seed_grid = {
        "norm_scale": (1.5, 2.5, 4.0, 6.0),
        "amplitude_norm": (0.1, 0.3, 1.0, 3.0),
        "activation_ratio": (0.1, 0.3, 1.0),
    }

    def combine(self, theta, sc, sn, jacobian):
        """The response of :meth:`TwoGaussianModel.combine` for this model."""
        sigma, scale, c, beta, d = (theta[:, k] for k in range(2, 7))
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

    def as_gaussian(self, theta):
        """As :meth:`PRFModel.as_gaussian`: no pool; the response is the Gaussian's over ``baseline_norm``."""
        out, _ = super().as_gaussian(theta)
        return out, 1.0 / out[:, 6]

    def surround_strength(self, theta):
        """``amplitude_norm / baseline_norm``: the most the pool changes the denominator, relatively."""
        return theta[:, 4] / theta[:, 6]

    def report(self, theta, amplitude):
        """Reported parameters, as :meth:`PRFModel.report`."""
        return {
            **super().report(theta, amplitude),
            "sigma_norm": theta[:, 2] * theta[:, 3],
            "amplitude_norm": theta[:, 4],
            "baseline_activation": theta[:, 5] * amplitude,
            "baseline_norm": theta[:, 6],
        }

    def from_report(self, params):
        """Natural parameters, as :meth:`PRFModel.from_report`."""
        theta = super().from_report(params)
        if "sigma_norm" in params:
            theta[:, 3] = relative(params["sigma_norm"], theta[:, 2])
        if "baseline_activation" in params:
            theta[:, 5] = relative(params["baseline_activation"], params["amplitude"])
        return theta
