"""How a model's internal (unconstrained) parameters map to natural values, and back.

The optimisers move unconstrained values; each :class:`InternalParameter` names its transform, one of
:data:`TRANSFORMS`: ``identity``, ``exp`` (> 0), ``scale`` (between 1 and :data:`MAX_SCALE`, for
surround sizes) or ``sigmoid`` (in (0, 1)). A :class:`Transform` is the one place that knows its
mapping both ways, on tensors and on the host, and how the catalogue's natural bounds of a parameter
become bounds of its internal value (``identity`` and ``exp``: the refiners clip the internal value;
the ranges ``scale`` and ``sigmoid`` hold their values by construction).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from keras import ops
from scipy import special

from prfmap.engine import catalog

EPS = 1e-12
MAX_SCALE = catalog.SURROUND_SCALE[1]  # largest surround / normalisation size relative to the centre
LOGIT_LIMIT = 15.0  # |internal| of a sigmoid transform: its natural value stays strictly inside its range


@dataclass(frozen=True)
class InternalParameter:
    """One internal (nonlinear) parameter: its name, bound transform and starting value."""

    name: str
    transform: str  # "identity" | "exp" (> 0) | "scale" (1 < value < MAX_SCALE) | "sigmoid" (0 < value < 1)
    default: float


class Transform:
    """The map of an internal value to its natural one: ``identity``."""

    name = "identity"
    held_by_bounds = True
    """Whether the refiners hold the internal value inside the natural bounds mapped back (else the
    transform's own range holds the natural value)."""

    def internal(self, theta: np.ndarray) -> np.ndarray:
        """Internal values of natural ones (numpy).

        Parameters
        ----------
        theta : ndarray
            Natural values.

        Returns
        -------
        ndarray
        """
        return theta

    def natural(self, u: Any) -> tuple[Any, Any]:
        """Natural values of internal ones and their derivatives (traced tensors).

        Parameters
        ----------
        u : tensor
            Internal values.

        Returns
        -------
        value, derivative : tensor
            The natural value and d value / d u.
        """
        return u, ops.ones_like(u)

    def natural_host(self, u: np.ndarray) -> np.ndarray:
        """Natural values of float64 internal ones on the host, as :meth:`natural` gives them.

        Parameters
        ----------
        u : ndarray
            Internal values.

        Returns
        -------
        ndarray
        """
        return u

    def internal_limits(self, low: float, high: float) -> tuple[float, float]:
        """The internal bounds of natural bounds ``[low, high]`` (infinite where open).

        Parameters
        ----------
        low, high : float
            Natural bounds.

        Returns
        -------
        tuple of float
        """
        return low, high

    def natural_limits(self, low: float, high: float) -> tuple[float, float]:
        """The natural bounds of internal bounds (12 digits: exp(log(100)) is 100.00000000000004).

        Parameters
        ----------
        low, high : float
            Internal bounds.

        Returns
        -------
        tuple of float
        """
        return float(low), float(high)


class Exp(Transform):
    """Positive values: ``value = exp(u)`` (a size)."""

    name = "exp"

    def internal(self, theta: np.ndarray) -> np.ndarray:  # noqa: D102 - Transform's
        return np.log(np.maximum(theta, EPS))

    def natural(self, u: Any) -> tuple[Any, Any]:  # noqa: D102 - Transform's
        v = ops.exp(ops.clip(u, -30.0, 30.0))
        return v, v

    def natural_host(self, u: np.ndarray) -> np.ndarray:  # noqa: D102 - Transform's
        return np.exp(np.clip(u, -30.0, 30.0))

    def internal_limits(self, low: float, high: float) -> tuple[float, float]:  # noqa: D102 - Transform's
        return (np.log(low) if low > 0 else -np.inf), (np.log(high) if 0 < high < np.inf else np.inf)

    def natural_limits(self, low: float, high: float) -> tuple[float, float]:  # noqa: D102 - Transform's
        return float(f"{np.exp(low):.12g}"), float(f"{np.exp(high):.12g}")


class Range(Transform):
    """Values in ``(low, high)``: ``value = low + (high - low) · sigmoid(u)``, held there by construction.

    Parameters
    ----------
    name : str
        The transform's name.
    low, high : float
        The range.
    """

    held_by_bounds = False

    def __init__(self, name: str, low: float, high: float) -> None:
        self.name, self.low, self.high = name, low, high

    def internal(self, theta: np.ndarray) -> np.ndarray:  # noqa: D102 - Transform's
        t = (theta - self.low) / (self.high - self.low) if self.low or self.high != 1.0 else theta
        t = np.clip(t, 1e-6, 1 - 1e-6)
        return np.log(t / (1 - t))

    def natural(self, u: Any) -> tuple[Any, Any]:  # noqa: D102 - Transform's
        v = ops.sigmoid(ops.clip(u, -LOGIT_LIMIT, LOGIT_LIMIT))
        if not self.low and self.high == 1.0:
            return v, v * (1.0 - v)
        width = self.high - self.low
        return self.low + width * v, width * v * (1.0 - v)

    def natural_host(self, u: np.ndarray) -> np.ndarray:  # noqa: D102 - Transform's
        v = special.expit(np.clip(u, -LOGIT_LIMIT, LOGIT_LIMIT))
        return v if not self.low and self.high == 1.0 else self.low + (self.high - self.low) * v

    def internal_limits(self, low: float, high: float) -> tuple[float, float]:  # noqa: D102 - Transform's
        return -np.inf, np.inf


TRANSFORMS: dict[str, Transform] = {
    t.name: t for t in (Transform(), Exp(), Range("scale", 1.0, MAX_SCALE), Range("sigmoid", 0.0, 1.0))
}
"""The transforms a :class:`InternalParameter` names."""


def transform_of(param: InternalParameter) -> Transform:
    """The :class:`Transform` a parameter names.

    Parameters
    ----------
    param : InternalParameter
        A model's parameter.

    Returns
    -------
    Transform

    Raises
    ------
    ValueError
        For a name not in :data:`TRANSFORMS`.
    """
    if param.transform not in TRANSFORMS:
        raise ValueError(f"unknown transform {param.transform!r}; choose from {sorted(TRANSFORMS)}")
    return TRANSFORMS[param.transform]


def saturated(params: Sequence[InternalParameter], u: np.ndarray) -> np.ndarray:
    """Where a range transform (``sigmoid``, ``scale``) has reached the end of its range.

    Past ``|u| = LOGIT_LIMIT`` the natural value is its range's end (CSS's n at 1, a surround at its
    largest size) and its derivative with respect to ``u`` vanishes: the estimate lies on its bound.

    Parameters
    ----------
    params : sequence of InternalParameter
        The model's parameters (their transforms), one per column of ``u``.
    u : ndarray, shape (units, K)
        The units' internal parameters.

    Returns
    -------
    ndarray of bool, shape (units, K)
        True where a parameter is at an end of its range.
    """
    ranged = np.array([isinstance(transform_of(p), Range) for p in params], dtype=bool)
    return ranged[None, :] & (np.abs(np.asarray(u, dtype=np.float64)) >= LOGIT_LIMIT)


def natural_values(params: Sequence[InternalParameter], u: np.ndarray) -> np.ndarray:
    """Natural values of internal parameters, on the host, as :meth:`Transform.natural` gives them.

    For the stages that need numbers, not tensors (issue 18: as eager backend operations, each of
    them compiled a kernel of its own).

    Parameters
    ----------
    params : sequence of InternalParameter
        A model's parameters, in column order.
    u : ndarray, shape (units, K)
        Internal values.

    Returns
    -------
    ndarray, shape (units, K)
        Float64 natural values.
    """
    u = np.asarray(u, dtype=np.float64)
    return np.stack([transform_of(p).natural_host(u[:, k]) for k, p in enumerate(params)], axis=1)
