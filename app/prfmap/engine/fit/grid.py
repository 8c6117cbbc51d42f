"""Grids of starting parameters for the grid search."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import numpy as np

from prfmap.engine.models import PRFModel
from prfmap.engine.stimulus import Stimulus


def polar_grid(
    stim: Stimulus, n_eccentricity: int = 20, n_angle: int = 20, n_sigma: int = 20
) -> dict[str, np.ndarray]:
    """Eccentricity (log-spaced) × polar angle × sigma (log-spaced) grid covering the aperture.

    Parameters
    ----------
    stim : Stimulus
    n_eccentricity, n_angle, n_sigma : int
        Number of values along each axis; the grid has their product of points.

    Returns
    -------
    dict
        ``x``, ``y``, ``sigma`` arrays of equal length, in degrees.
    """
    extent = stim.extent_deg
    ecc = np.geomspace(0.03 * extent, extent, n_eccentricity)
    angle = np.linspace(0.0, 2 * np.pi, n_angle, endpoint=False)
    sigma = np.geomspace(max(stim.pixel_size, 0.02 * extent), extent, n_sigma)
    e, a, s = (g.ravel() for g in np.meshgrid(ecc, angle, sigma, indexing="ij"))
    return {"x": e * np.cos(a), "y": e * np.sin(a), "sigma": s}


def cartesian_grid(axes: Mapping[str, Sequence[float]]) -> dict[str, np.ndarray]:
    """Cartesian product of the given parameter values, e.g. ``{"x": ..., "y": ..., "sigma": ...}``.

    Parameters
    ----------
    axes : mapping
        Parameter name → the values it takes.

    Returns
    -------
    dict
        Name → (points,) values, every combination once.
    """
    names = list(axes)
    points = np.array(list(itertools.product(*(np.asarray(axes[n], float) for n in names))))
    return {n: points[:, i] for i, n in enumerate(names)}


def grid_theta(model: PRFModel, grid: Mapping[str, np.ndarray]) -> np.ndarray:
    """Natural internal parameters (points, K) of a grid; parameters it does not name take their defaults.

    Parameters
    ----------
    model : PRFModel
        The model.
    grid : mapping
        Parameter name → (points,) values.

    Returns
    -------
    ndarray, shape (points, K)
    """
    grid = {k: np.asarray(v, dtype=np.float64) for k, v in grid.items()}
    missing = {"x", "y", "sigma"} - set(grid)
    if missing:
        raise ValueError(f"a grid needs x, y and sigma; missing {sorted(missing)}")
    unknown = set(grid) - set(model.names)
    if unknown:
        raise ValueError(
            f"a grid of model {model.name!r} cannot name {sorted(unknown)}; "
            f"its parameters: {', '.join(model.names)}"
        )
    lengths = {len(v) for v in grid.values()}
    if len(lengths) != 1:
        raise ValueError("all grid arrays must have the same length")
    cols = []
    for p in model.params:
        value = grid.get(p.name, p.default)
        cols.append(np.broadcast_to(value, np.shape(grid["x"])))
    return np.stack(cols, axis=1)
