"""The grid search: predictions of every grid point, then each unit's best correlation among them.

And the seed search: each unit's best among a few candidates of its own (a model's extras around its grid
start).
"""

from __future__ import annotations

import hashlib
import time
from functools import partial

import numpy as np

from prfmap.engine import catalog, kernels
from prfmap.engine.backend import get_backend
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import (
    MIN_BATCH,
    ProgressFn,
    budget_rows,
    compiled,
    pad,
    run_batches,
    tiles,
)
from prfmap.engine.models import PRFModel
from prfmap.engine.problem import Problem


def unit_norm(y: np.ndarray) -> np.ndarray:
    """Rows of ``y`` scaled to unit norm (zero rows stay zero).

    Parameters
    ----------
    y : ndarray, shape (units, frames)
        Rows.

    Returns
    -------
    ndarray
    """
    norm = np.linalg.norm(y, axis=1, keepdims=True)
    return np.divide(y, norm, out=np.zeros_like(y), where=norm > 0)


def folded(prob: Problem) -> bool:
    """Whether the grid is scored over the distinct frames (fewer than the frames; issue 18).

    Parameters
    ----------
    prob : Problem
        The fit's tensors.

    Returns
    -------
    bool
    """
    return prob.stim[0].shape[1] < prob.frames


def unit_grid_predictions(prob: Problem, theta_grid: np.ndarray, mem_gb: float) -> np.ndarray:
    """Unit-norm projected predictions of natural parameters ``theta_grid`` (grid, K).

    Where the grid is :func:`folded`, their neural responses (grid, distinct) scaled alike. Kept in
    the problem's :class:`~prfmap.engine.problem.FitCache` for a problem and grid met again.

    Parameters
    ----------
    prob : Problem
        The fit's tensors.
    theta_grid : ndarray, shape (grid, K)
        Natural parameters.
    mem_gb : float
        Budget of a tile.

    Returns
    -------
    ndarray, shape (grid, frames) or (grid, distinct)
    """
    if prob.cache is None:
        return _grid_predictions(prob, theta_grid, mem_gb)
    key = (prob.grid_key, prob.model.name, folded(prob), hashlib.blake2b(theta_grid.tobytes()).hexdigest())
    return prob.cache.grid(key, partial(_grid_predictions, prob, theta_grid, mem_gb))


def _grid_predictions(prob: Problem, theta_grid: np.ndarray, mem_gb: float) -> np.ndarray:
    dtype = prob.dtype
    item = np.dtype(dtype).itemsize
    n_grid = theta_grid.shape[0]
    g_tile = min(n_grid, budget_rows(mem_gb / 2, prob.pixels * item * 3, hi=4096))
    predict_fn = compiled(kernels.grid_responses if folded(prob) else kernels.grid_predictions, prob.model)
    preds = []
    for start, stop in tiles(n_grid, g_tile):
        theta = pad(theta_grid[start:stop], g_tile)
        theta[stop - start :] = theta_grid[:1]
        preds.append(
            to_numpy(predict_fn(tensor(theta, dtype), prob.stim, prob.hrf_t, prob.q))[: stop - start]
        )
    return np.concatenate(preds)


CPU_TILE_ROWS = 512
"""Units per scoring tile on a CPU: 512 × 8,000 correlations (16 MB) scored 1.4× faster than 16,384
rows at a time on the 2-core machine (the product's output, not its arithmetic, is the cost)."""


def _unit_tile(n_units: int, most: int) -> int:
    """Rows per tile of the scoring: at most ``most``, the units split evenly over the fewest tiles.

    Rounded up to 256 rows (few shapes; issue 18: a power of two padded 20,484 units to 32,768).
    """
    per_tile = -(-n_units // max(-(-n_units // most), 1))
    return max(min(most, -(-per_tile // 256) * 256), 1)


def best_grid_points(
    prob: Problem, y_proj: np.ndarray, grid_unit: np.ndarray, mem_gb: float, progress: ProgressFn | None
) -> tuple[np.ndarray, np.ndarray]:
    """Index of each unit's best-correlated grid prediction, and that correlation.

    Units are streamed in tiles against blocks of the grid, keeping a running maximum, so memory does
    not grow with units × grid points.

    Parameters
    ----------
    prob : Problem
        The fit's tensors.
    y_proj : ndarray, shape (units, frames)
        Projected data.
    grid_unit : ndarray, shape (grid, frames)
        Unit-norm grid predictions.
    mem_gb : float
        Budget of a tile.
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    index : ndarray of int, shape (units,)
        Each unit's best grid point.
    corr : ndarray, shape (units,)
        Its correlation.
    """
    dtype = prob.dtype
    item = np.dtype(dtype).itemsize
    n_grid = grid_unit.shape[0]
    y_unit = unit_norm(y_proj)
    n_units = y_unit.shape[0]
    g_block = min(n_grid, budget_rows(mem_gb / 4, grid_unit.shape[1] * item, hi=16384))
    most = budget_rows(mem_gb / 2, g_block * item * 2, hi=16384)
    if get_backend().free_memory() is None:
        most = min(most, CPU_TILE_ROWS)  # a CPU: a tile's correlations stay in its caches
    u_tile = _unit_tile(n_units, most)
    if folded(prob):
        score_fn = partial(compiled(kernels.grid_score_folded), hrf_t=prob.hrf_t)
    else:
        score_fn = compiled(kernels.grid_score)
    best = np.full(n_units, -np.inf)
    best_idx = np.zeros(n_units, dtype=np.int64)
    grid_blocks = [(tensor(pad(grid_unit[a:b], g_block), dtype), a) for a, b in tiles(n_grid, g_block)]
    unit_tiles = tiles(n_units, u_tile)
    for i, (start, stop) in enumerate(unit_tiles):
        yt = tensor(pad(y_unit[start:stop], u_tile), dtype)
        for block, offset in grid_blocks:
            score, idx = score_fn(yt, block)
            score, idx = to_numpy(score)[: stop - start], to_numpy(idx)[: stop - start] + offset
            better = score > best[start:stop]
            best[start:stop] = np.where(better, score, best[start:stop])
            best_idx[start:stop] = np.where(better, idx, best_idx[start:stop])
        if progress:
            progress("grid", i + 1, len(unit_tiles))
    return np.minimum(best_idx, n_grid - 1), best


def grid_search(
    prob: Problem,
    y_proj: np.ndarray,
    theta_grid: np.ndarray,
    mem_gb: float,
    progress: ProgressFn | None,
) -> tuple[np.ndarray, np.ndarray, dict[str, float]]:
    """Each unit's best grid point (natural parameters) and its correlation with the unit's data.

    Also the seconds of ``grid_predictions`` and ``grid_scoring``.

    Parameters
    ----------
    prob : Problem
        The fit's tensors.
    y_proj : ndarray, shape (units, frames)
        Projected data.
    theta_grid : ndarray, shape (grid, K)
        Natural parameters of the grid.
    mem_gb : float
        Budget of a tile.
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    theta : ndarray, shape (units, K)
        Each unit's best grid point.
    corr : ndarray, shape (units,)
        Its correlation.
    timings : dict
        Seconds of ``grid_predictions`` and ``grid_scoring``.
    """
    t0 = time.perf_counter()
    grid_unit = unit_grid_predictions(prob, theta_grid, mem_gb)
    timings = {"grid_predictions": time.perf_counter() - t0}
    t0 = time.perf_counter()
    best_idx, best = best_grid_points(prob, y_proj, grid_unit, mem_gb, progress)
    timings["grid_scoring"] = time.perf_counter() - t0
    return theta_grid[best_idx], best, timings


def shared_sizes(model: PRFModel, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """The few sizes of a varying Gaussian that a model's seed candidates share, if they do.

    Where :meth:`PRFModel.candidate_sizes` takes at most half as many values as there are
    candidates (as :meth:`PRFModel.seed_candidates` makes them), the search computes those Gaussians
    once per unit (:func:`kernels.seed_score_shared`).

    Parameters
    ----------
    model : PRFModel
        The model.
    candidates : ndarray, shape (units, C, K)
        Natural parameters of each unit's candidates.

    Returns
    -------
    tuple of ndarray or None
        The distinct relative sizes (S,) and each candidate's among them (units, C); None where they
        do not share.
    """
    relative = model.candidate_sizes(candidates) if candidates.size else None
    if relative is None or not np.all(np.isfinite(relative)):
        return None
    sizes, which = np.unique(np.round(relative, 12), return_inverse=True)
    if 2 * len(sizes) > candidates.shape[1]:
        return None
    return sizes, which.reshape(candidates.shape[:2]).astype(np.int32)


def seed_search(
    prob: Problem, y_proj: np.ndarray, candidates: np.ndarray, mem_gb: float, progress: ProgressFn | None
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's best-correlated candidate (natural parameters) and that correlation.

    Parameters
    ----------
    candidates : ndarray, shape (units, C, K)
        Natural parameters tried for each unit (:meth:`PRFModel.seed_candidates`), scored as the grid
        is: projected, unit-norm canonical-HRF predictions correlated with the unit's projected data.

    Returns
    -------
    theta : ndarray, shape (units, K)
        Each unit's best candidate.
    corr : ndarray, shape (units,)
        Its correlation.
    """
    dtype = prob.dtype
    n_units, n_cand, _ = candidates.shape
    item = np.dtype(dtype).itemsize
    n_gauss = catalog.MODELS[prob.model.name].gaussians
    per_unit = n_cand * item * (prob.pixels * (n_gauss + 1) + prob.frames * 4)
    y_unit = unit_norm(y_proj)
    shared = shared_sizes(prob.model, candidates)
    if shared is None:
        score_fn = compiled(kernels.seed_score, prob.model)
    else:
        sizes, which = shared
        per_unit = item * ((len(sizes) + 1) * prob.pixels * 2 + n_cand * prob.frames * 4)
        score_fn = partial(compiled(kernels.seed_score_shared, prob.model), tensor(sizes, dtype))
    best, best_idx = np.empty(n_units), np.zeros(n_units, dtype=np.int64)

    def run(start: int, stop: int, batch: int) -> None:
        theta = pad(candidates[start:stop], batch)
        theta[stop - start :] = candidates[:1]
        extra = () if shared is None else (tensor(pad(which[start:stop], batch), "int32"),)
        score, idx = score_fn(
            tensor(theta, dtype),
            *extra,
            tensor(pad(y_unit[start:stop], batch), dtype),
            prob.stim,
            prob.hrf_t,
            prob.q,
        )
        k = stop - start
        best[start:stop], best_idx[start:stop] = to_numpy(score)[:k], to_numpy(idx)[:k]

    run_batches(n_units, budget_rows(mem_gb / 2, per_unit, lo=MIN_BATCH, hi=4096), run, "seed", progress)
    return candidates[np.arange(n_units), np.minimum(best_idx, n_cand - 1)], best
