"""How a model's internal (unconstrained) parameters map to natural values, and back.

The optimisers move unconstrained values; each :class:`Param` names its transform: ``identity``,
``exp`` (> 0), ``scale`` (between 1 and :data:`MAX_SCALE`, for surround sizes) or ``sigmoid`` (in (0, 1)).
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
class Param:
    """One internal (nonlinear) parameter: its name, bound transform and starting value."""

    name: str
    transform: str  # "identity" | "exp" (> 0) | "scale" (1 < value < MAX_SCALE) | "sigmoid" (0 < value < 1)
    default: float


def to_internal(theta: np.ndarray, transform: str) -> np.ndarray:
    """Map a natural parameter value to the unconstrained space the optimisers work in.

    Parameters
    ----------
    theta : ndarray
        Natural values.
    transform : str
        ``identity``, ``exp``, ``scale`` or ``sigmoid``.

    Returns
    -------
    ndarray
    """
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
    """Natural value and its derivative with respect to the unconstrained value (tensors).

    Parameters
    ----------
    u : tensor
        Unconstrained values.
    transform : str
        As :func:`to_internal`.

    Returns
    -------
    value : tensor
        The natural value.
    derivative : tensor
        d value / d u.
    """
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


def saturated(params: Sequence[Param], u: np.ndarray) -> np.ndarray:
    """Where a range transform (``sigmoid``, ``scale``) has reached the end of its range.

    Past ``|u| = LOGIT_LIMIT`` the natural value is its range's end (CSS's n at 1, a surround at its
    largest size) and its derivative with respect to ``u`` vanishes: the estimate lies on its bound.

    Parameters
    ----------
    params : sequence of Param
        The model's parameters (their transforms), one per column of ``u``.
    u : ndarray, shape (units, K)
        The units' internal parameters.

    Returns
    -------
    ndarray of bool, shape (units, K)
        True where a parameter is at an end of its range.
    """
    ranged = np.array([p.transform in ("sigmoid", "scale") for p in params], dtype=bool)
    return ranged[None, :] & (np.abs(np.asarray(u, dtype=np.float64)) >= LOGIT_LIMIT)


def natural_values(params: Sequence[Param], u: np.ndarray) -> np.ndarray:
    """Natural values of internal parameters, on the host, as :func:`from_internal` gives them.

    For the stages that need numbers, not tensors (issue 18: as eager backend operations, each of
    them compiled a kernel of its own).

    Parameters
    ----------
    params : sequence of Param
        A model's parameters, in column order.
    u : ndarray, shape (units, K)
        Internal values.

    Returns
    -------
    ndarray, shape (units, K)
        Float64 natural values.
    """
    u = np.asarray(u, dtype=np.float64)
    cols = []
    for k, p in enumerate(params):
        if p.transform == "identity":
            cols.append(u[:, k])
        elif p.transform == "exp":
            cols.append(np.exp(np.clip(u[:, k], -30.0, 30.0)))
        else:
            v = special.expit(np.clip(u[:, k], -LOGIT_LIMIT, LOGIT_LIMIT))
            cols.append(1.0 + (MAX_SCALE - 1.0) * v if p.transform == "scale" else v)
    return np.stack(cols, axis=1)
