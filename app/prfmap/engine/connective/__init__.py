"""Connective-field models (Haak et al., 2013): a unit's time course from a source area's time courses.

A connective field (CF) predicts a target unit's time course as a gain times the Gaussian-weighted
mean of the source area's time courses, the weights falling with the distance ``d`` (mm, along the
source's own cortical surface) from a centre vertex ``c`` of the source::

    w_s = exp(-d(c, s)² / (2 size²)) / Σ_s' exp(-d(c, s')² / (2 size²))
    prediction(t) = gain · Σ_s w_s · source_s(t)

It needs no stimulus: the source's measured time courses stand in for it, so it fits resting-state
and movie runs as well as a pRF mapping run. The fit is the pRF fit's in its parts: every centre and
every size of a log-spaced grid scored at once as matrix products (a centre is a vertex, so the grid
holds every source vertex), then each unit's size refined with Levenberg–Marquardt (variable
projection: the gain is solved for) from its best grid point with the centre kept, then the final
linear fit. Data and predictions are projected off the same nuisance basis as a pRF fit's
(:func:`prfmap.engine.problem.nuisance_basis`); baselines are the part of each unit's mean the
source does not explain.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from keras import ops

from prfmap.engine.backend.ops import matmul, tensor, to_numpy
from prfmap.engine.batching import ProgressFn, compiled, memory_budget, pad, padded_size, tiles
from prfmap.engine.catalog.status import STATUS_BITS
from prfmap.engine.problem import nuisance_basis

__all__ = ["CFResult", "CFSource", "cf_size_grid", "fit_cf", "predict_cf"]

SIZE_STEPS = 16
"""Sizes of the grid, log-spaced between :attr:`CFSource.size_floor` and :attr:`CFSource.size_ceiling`."""
SIZE_CEILING_MM = 25.0
"""The largest CF size (mm of cortex): V1-referred CFs of V2–hV4 are 1–10 mm (Haak et al., 2013)."""
REFINE_STEPS = 12
"""Levenberg–Marquardt steps of each unit's size (one parameter: it converges in a few)."""
FAR_MM = 1.0e4
"""Stands in for an infinite distance (vertices of unconnected pieces): its weight is exactly 0."""


@dataclass(frozen=True)
class CFSource:
    """A source area: its time courses and the distances between its vertices.

    Attributes
    ----------
    series : ndarray, shape (n, frames)
        The source vertices' preprocessed time courses.
    distances : ndarray, shape (n, n)
        Geodesic distances (mm) along the source's surface; ``inf`` between unconnected vertices.
    """

    series: np.ndarray
    distances: np.ndarray

    def __post_init__(self) -> None:
        n = self.distances.shape[0]
        if self.distances.shape != (n, n) or self.series.shape[0] != n:
            raise ValueError(
                f"a CF source needs (n, frames) series and (n, n) distances, got {self.series.shape} "
                f"and {self.distances.shape}"
            )

    @property
    def size_floor(self) -> float:
        """Half the median distance between neighbouring vertices: smaller CFs are one vertex."""
        d = np.where(np.eye(len(self.distances), dtype=bool), np.inf, self.distances)
        nearest = d.min(axis=1)
        nearest = nearest[np.isfinite(nearest)]
        return float(np.median(nearest)) / 2 if nearest.size else 1.0

    @property
    def size_ceiling(self) -> float:
        """:data:`SIZE_CEILING_MM`, or half the source's largest extent when that is smaller."""
        finite = self.distances[np.isfinite(self.distances)]
        extent = float(finite.max()) / 2 if finite.size else SIZE_CEILING_MM
        return max(min(SIZE_CEILING_MM, extent), 2 * self.size_floor)

    def with_series(self, series: np.ndarray) -> CFSource:
        """The same source with other time courses (a held-out run's).

        Parameters
        ----------
        series : ndarray, shape (n, frames)
            Time courses.

        Returns
        -------
        CFSource
        """
        return CFSource(np.asarray(series), self.distances)


@dataclass(frozen=True)
class CFResult:
    """Per-unit connective fields.

    Attributes
    ----------
    centre : ndarray of int, shape (units,)
        The CF centre: a position in the source (-1 where the unit was not fitted).
    size : ndarray, shape (units,)
        CF size (mm of cortex, one standard deviation); NaN where not fitted.
    gain, baseline : ndarray, shape (units,)
        The linear fit: gain on the weighted mean of the source, and the baseline.
    r2 : ndarray, shape (units,)
        Variance explained of the projected data.
    status : ndarray of int, shape (units,)
        Bits of :data:`prfmap.engine.catalog.status.STATUS_FLAGS`: ``no_signal``, ``at_bound`` (a
        size at the grid's ceiling) and ``size_at_floor`` (a CF no larger than one vertex).
    size_range : tuple of float
        The grid's smallest and largest size.
    timings : dict
        Seconds of each stage.
    """

    centre: np.ndarray
    size: np.ndarray
    gain: np.ndarray
    baseline: np.ndarray
    r2: np.ndarray
    status: np.ndarray
    size_range: tuple[float, float]
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def fitted(self) -> np.ndarray:
        """Units with a connective field."""
        return self.centre >= 0


def cf_size_grid(source: CFSource, steps: int = SIZE_STEPS) -> np.ndarray:
    """The grid's sizes (mm): log-spaced from the source's floor to its ceiling.

    Parameters
    ----------
    source : CFSource
        The source.
    steps : int
        Sizes.

    Returns
    -------
    ndarray, shape (steps,)
    """
    return np.geomspace(source.size_floor, source.size_ceiling, steps)


def _weights(distances: Any, log_size: Any) -> tuple[Any, Any]:
    """Normalised CF weights (units, n) and the squared distances in sizes, ``d² / size²``."""
    scaled = ops.square(distances) * ops.exp(-2.0 * log_size)[:, None]
    kernel = ops.exp(-0.5 * scaled)
    return kernel / ops.sum(kernel, axis=1, keepdims=True), scaled


def _prediction(distances: Any, series: Any, log_size: Any) -> Any:
    """The weighted means (units, frames) of the source's time courses."""
    weights, _ = _weights(distances, log_size)
    return matmul(weights, series)


def _grid_tile(distances: Any, series: Any, log_size: Any, unit_y: Any) -> tuple[Any, Any]:
    """Best correlation and its centre (within the tile) of each unit, over one tile of centres."""
    prediction = _prediction(distances, series, ops.broadcast_to(log_size, (ops.shape(distances)[0],)))
    norm = ops.sqrt(ops.sum(ops.square(prediction), axis=1, keepdims=True))
    candidates = prediction / ops.maximum(norm, 1e-30)
    scores = matmul(unit_y, ops.transpose(candidates))
    return ops.max(scores, axis=1), ops.argmax(scores, axis=1)


def _varpro(distances: Any, series: Any, y: Any, log_size: Any) -> tuple[Any, Any, Any]:
    """Residual sum of squares with the best gain, the gain, and the prediction."""
    prediction = _prediction(distances, series, log_size)
    yp = ops.sum(y * prediction, axis=1)
    pp = ops.maximum(ops.sum(ops.square(prediction), axis=1), 1e-30)
    cost = ops.sum(ops.square(y), axis=1) - ops.square(yp) / pp
    return cost, yp / pp, prediction


def _refine_step(
    distances: Any, series: Any, y: Any, state: tuple[Any, Any, Any], bounds: tuple[Any, Any]
) -> tuple[Any, Any, Any]:
    """One Levenberg–Marquardt step of every unit's log size (Kaufman's variable-projection Jacobian)."""
    log_size, cost, damping = state
    weights, scaled = _weights(distances, log_size)
    prediction = matmul(weights, series)
    mean_scaled = ops.sum(weights * scaled, axis=1, keepdims=True)
    derivative = matmul(weights * (scaled - mean_scaled), series)
    yp = ops.sum(y * prediction, axis=1)
    pp = ops.maximum(ops.sum(ops.square(prediction), axis=1), 1e-30)
    gain = yp / pp
    residual = y - gain[:, None] * prediction
    dp_pp = ops.sum(derivative * prediction, axis=1)
    curvature = ops.sum(ops.square(derivative), axis=1) - ops.square(dp_pp) / pp
    gradient = ops.sum(derivative * residual, axis=1)
    safe_gain = ops.where(ops.abs(gain) > 1e-30, gain, 1e-30)
    step = gradient / (safe_gain * ops.maximum(curvature, 1e-30) * (1.0 + damping))
    trial = ops.clip(log_size + step, bounds[0], bounds[1])
    trial_cost, trial_gain, _ = _varpro(distances, series, y, trial)
    better = (trial_cost < cost) & (trial_gain > 0) & ops.isfinite(trial_cost)
    return (
        ops.where(better, trial, log_size),
        ops.where(better, trial_cost, cost),
        ops.where(better, damping * 0.3, damping * 8.0),
    )


def _project(values: np.ndarray, basis: np.ndarray) -> np.ndarray:
    return values - (values @ basis) @ basis.T


def _usable(y: np.ndarray) -> np.ndarray:
    finite = np.isfinite(y).all(axis=1)
    spread = np.zeros(len(y))
    spread[finite] = np.sum(np.square(y[finite]), axis=1)
    return finite & (spread > 1e-12 * max(float(spread.max(initial=0.0)), 1e-30))


def fit_cf(
    data: np.ndarray,
    source: CFSource,
    *,
    nuisance: np.ndarray | None = None,
    sizes: np.ndarray | None = None,
    refine_steps: int = REFINE_STEPS,
    mem_gb: float | None = None,
    dtype: str = "float32",
    progress: ProgressFn | None = None,
) -> CFResult:
    """Fit a connective field from ``source`` to every unit: grid search, size refinement, linear fit.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        The target units' preprocessed time courses.
    source : CFSource
        The source area's time courses (same frames) and distances.
    nuisance : ndarray, shape (frames, k), optional
        Regressors that preprocessing removed: data and source are projected off them (and a constant).
    sizes : ndarray, optional
        The grid's sizes (mm); :func:`cf_size_grid` by default.
    refine_steps : int
        Levenberg–Marquardt steps of each unit's size (0: the grid's).
    mem_gb : float, optional
        Memory budget of a tile, GB (half the available memory by default).
    dtype : str
        ``float32`` or ``float64``.
    progress : callable, optional
        ``progress(stage, done, total)`` between tiles.

    Returns
    -------
    CFResult
    """
    start = time.perf_counter()
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != source.series.shape[1]:
        raise ValueError(f"data {data.shape} and source {source.series.shape} differ in frames")
    basis = nuisance_basis(data.shape[1], nuisance)
    y_all = _project(np.nan_to_num(data, nan=0.0, posinf=0.0, neginf=0.0), basis)
    usable = _usable(np.where(np.isfinite(data).all(axis=1, keepdims=True), y_all, np.nan))
    series = _project(np.asarray(source.series, dtype=np.float64), basis)
    distances = np.where(np.isfinite(source.distances), source.distances, FAR_MM)
    sizes = cf_size_grid(source) if sizes is None else np.asarray(sizes, dtype=np.float64)
    budget = memory_budget(mem_gb)
    index = np.flatnonzero(usable)
    y = y_all[index]
    timings: dict[str, float] = {"setup": time.perf_counter() - start}

    t0 = time.perf_counter()
    best, centre, size_of = _grid(y, series, distances, sizes, budget, dtype, progress)
    timings["grid"] = time.perf_counter() - t0
    positive = best > 0
    index, y, centre, size_of = index[positive], y[positive], centre[positive], size_of[positive]

    t0 = time.perf_counter()
    bounds = (float(np.log(sizes.min())), float(np.log(sizes.max())))
    plan = _RefinePlan(bounds, refine_steps, budget, dtype)
    log_size, cost, gain = _refine(y, series, distances, centre, np.log(size_of), plan)
    timings["refine"] = time.perf_counter() - t0

    n = data.shape[0]
    out_centre = np.full(n, -1, dtype=np.int64)
    out_size, out_gain, out_base, out_r2 = (np.full(n, np.nan) for _ in range(4))
    status = np.full(n, STATUS_BITS["no_signal"], dtype=np.int64)
    out_centre[index] = centre
    out_size[index] = np.exp(log_size)
    out_gain[index] = gain
    out_r2[index] = 1.0 - cost / np.sum(np.square(y), axis=1)
    raw = predict_cf(out_centre[index], out_size[index], gain, source, mem_gb=mem_gb, dtype=dtype)
    out_base[index] = np.mean(data[index] - raw, axis=1)
    codes = np.zeros(len(index), dtype=np.int64)
    codes[log_size <= bounds[0] + 1e-6] |= STATUS_BITS["size_at_floor"]
    codes[log_size >= bounds[1] - 1e-6] |= STATUS_BITS["at_bound"]
    status[index] = codes
    timings["total"] = time.perf_counter() - start
    return CFResult(
        out_centre,
        out_size,
        out_gain,
        out_base,
        out_r2,
        status,
        (float(sizes.min()), float(sizes.max())),
        timings,
    )


def _grid(
    y: np.ndarray,
    series: np.ndarray,
    distances: np.ndarray,
    sizes: np.ndarray,
    budget: float,
    dtype: str,
    progress: ProgressFn | None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each unit's best correlation over every (centre, size), that centre and that size."""
    n_units, n = len(y), len(distances)
    best = np.full(n_units, -np.inf)
    centre = np.zeros(n_units, dtype=np.int64)
    size_of = np.full(n_units, float(sizes[0]))
    if n_units == 0:
        return best, centre, size_of
    norm = np.sqrt(np.sum(np.square(y), axis=1, keepdims=True))
    unit_y = y / norm
    frames = y.shape[1]
    itemsize = np.dtype(dtype).itemsize
    # a tile of C centres holds C·n weights, C·frames candidates and U·C scores
    unit_rows = min(padded_size(n_units), max(64, int(budget * 2**30 / (4 * itemsize * (frames + n)))))
    centre_rows = min(
        padded_size(n, 64), max(16, int(budget * 2**30 / (3 * itemsize * (n + frames + unit_rows))))
    )
    kernel = compiled(_grid_tile)
    series_t = tensor(series, dtype)
    centre_tiles, unit_tiles = tiles(n, centre_rows), tiles(n_units, unit_rows)
    total, done = len(sizes) * len(centre_tiles) * len(unit_tiles), 0
    for size in sizes:
        log_size = tensor(np.log(size), dtype)
        for c0, c1 in centre_tiles:
            rows = distances[c0:c1]
            rows = np.concatenate([rows, np.repeat(rows[-1:], centre_rows - len(rows), axis=0)])
            rows_t = tensor(rows, dtype)
            for u0, u1 in unit_tiles:
                score, arg = kernel(rows_t, series_t, log_size, tensor(pad(unit_y[u0:u1], unit_rows), dtype))
                score, arg = to_numpy(score)[: u1 - u0], np.minimum(to_numpy(arg)[: u1 - u0] + c0, c1 - 1)
                better = score > best[u0:u1]
                best[u0:u1] = np.where(better, score, best[u0:u1])
                centre[u0:u1] = np.where(better, arg, centre[u0:u1])
                size_of[u0:u1] = np.where(better, size, size_of[u0:u1])
                done += 1
                if progress is not None:
                    progress("CF grid", done, total)
    return best, centre, size_of


def _batch_rows(n: int, frames: int, budget: float, dtype: str) -> int:
    """Units per refinement batch: each holds a few (n,) weight rows and (frames,) series."""
    return max(8, int(budget * 2**30 / (6 * np.dtype(dtype).itemsize * (n + frames))))


@dataclass(frozen=True)
class _RefinePlan:
    bounds: tuple[float, float]  # of the log size
    steps: int
    budget: float
    dtype: str


def _refine(
    y: np.ndarray,
    series: np.ndarray,
    distances: np.ndarray,
    centre: np.ndarray,
    log_size: np.ndarray,
    plan: _RefinePlan,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each unit's refined log size, its cost and its gain, the centre held."""
    bounds, steps, budget, dtype = plan.bounds, plan.steps, plan.budget, plan.dtype
    n_units = len(y)
    out_size, out_cost, out_gain = log_size.copy(), np.zeros(n_units), np.zeros(n_units)
    if n_units == 0:
        return out_size, out_cost, out_gain
    rows = min(padded_size(n_units, 64), _batch_rows(len(distances), y.shape[1], budget, dtype))
    evaluate, step = compiled(_varpro), compiled(_refine_step)
    series_t = tensor(series, dtype)
    bounds_t = (tensor(bounds[0], dtype), tensor(bounds[1], dtype))
    for u0, u1 in tiles(n_units, rows):
        d = tensor(pad(distances[centre[u0:u1]], rows), dtype)
        yt = tensor(pad(y[u0:u1], rows), dtype)
        size_t = tensor(pad(log_size[u0:u1], rows), dtype)
        cost, _, _ = evaluate(d, series_t, yt, size_t)
        state = (size_t, cost, tensor(np.full(rows, 1e-3), dtype))
        for _ in range(steps):
            state = step(d, series_t, yt, state, bounds_t)
        cost, gain, _ = evaluate(d, series_t, yt, state[0])
        out_size[u0:u1] = to_numpy(state[0])[: u1 - u0]
        out_cost[u0:u1] = np.maximum(to_numpy(cost)[: u1 - u0], 0.0)
        out_gain[u0:u1] = to_numpy(gain)[: u1 - u0]
    return out_size, out_cost, out_gain


def predict_cf(
    centre: np.ndarray,
    size: np.ndarray,
    gain: np.ndarray,
    source: CFSource,
    *,
    mem_gb: float | None = None,
    dtype: str = "float32",
) -> np.ndarray:
    """The connective fields' predictions: gain times the weighted mean of the source's time courses.

    Parameters
    ----------
    centre : ndarray of int, shape (units,)
        CF centres (positions in the source); -1 where a unit has none.
    size, gain : ndarray, shape (units,)
        CF sizes (mm) and gains.
    source : CFSource
        The source, with the time courses to predict from (e.g. a held-out run's).
    mem_gb : float, optional
        Memory budget of a batch, GB.
    dtype : str
        ``float32`` or ``float64``.

    Returns
    -------
    ndarray, shape (units, frames)
        NaN rows where a unit has no CF.
    """
    centre = np.asarray(centre, dtype=np.int64)
    frames = source.series.shape[1]
    out = np.full((len(centre), frames), np.nan)
    fitted = np.flatnonzero(centre >= 0)
    if fitted.size == 0:
        return out
    distances = np.where(np.isfinite(source.distances), source.distances, FAR_MM)
    rows = min(
        padded_size(len(fitted), 64), _batch_rows(len(distances), frames, memory_budget(mem_gb), dtype)
    )
    kernel = compiled(_prediction)
    series_t = tensor(np.asarray(source.series, dtype=np.float64), dtype)
    for u0, u1 in tiles(len(fitted), rows):
        which = fitted[u0:u1]
        d = tensor(pad(distances[centre[which]], rows), dtype)
        log_size = tensor(pad(np.log(np.asarray(size, dtype=np.float64)[which]), rows), dtype)
        weighted = to_numpy(kernel(d, series_t, log_size))[: u1 - u0]
        out[which] = np.asarray(gain, dtype=np.float64)[which, None] * weighted
    return out
