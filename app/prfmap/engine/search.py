"""The grid search: predictions of every grid point, then each unit's best correlation among them."""

from __future__ import annotations

import time
from functools import partial

import numpy as np

from prfmap.engine import core
from prfmap.engine.batching import ProgressFn, budget_rows, compiled, pad, padded_size, tiles
from prfmap.engine.core_ops import tensor, to_numpy
from prfmap.engine.problem import Problem


def grid_predictions(prob: Problem, theta_grid: np.ndarray, mem_gb: float) -> np.ndarray:
    """Unit-norm projected predictions (grid, frames) of natural parameters ``theta_grid`` (grid, K)."""
    dtype = prob.dtype
    item = np.dtype(dtype).itemsize
    n_grid = theta_grid.shape[0]
    g_tile = min(n_grid, budget_rows(mem_gb / 2, prob.pixels * item * 3, hi=4096))
    predict_fn = compiled(("grid_pred", prob.model, dtype), partial(core.grid_predictions, prob.model))
    preds = []
    for start, stop in tiles(n_grid, g_tile):
        theta = pad(theta_grid[start:stop], g_tile)
        theta[stop - start:] = theta_grid[:1]
        preds.append(to_numpy(predict_fn(tensor(theta, dtype), prob.stim, prob.hrf_t, prob.q))
                     [: stop - start])
    return np.concatenate(preds)


def best_grid_points(prob: Problem, y_proj: np.ndarray, grid_unit: np.ndarray, mem_gb: float,
                     progress: ProgressFn | None) -> tuple[np.ndarray, np.ndarray]:
    """Index of each unit's best-correlated grid prediction, and that correlation.

    Units are streamed in tiles against blocks of the grid, keeping a running maximum, so memory does
    not grow with units × grid points.
    """
    dtype = prob.dtype
    item = np.dtype(dtype).itemsize
    n_grid = grid_unit.shape[0]
    norm = np.linalg.norm(y_proj, axis=1, keepdims=True)
    y_unit = np.divide(y_proj, norm, out=np.zeros_like(y_proj), where=norm > 0)
    n_units = y_unit.shape[0]
    g_block = min(n_grid, budget_rows(mem_gb / 4, prob.frames * item, hi=16384))
    u_tile = min(padded_size(n_units), budget_rows(mem_gb / 2, g_block * item * 2, hi=16384))
    score_fn = compiled(("grid_score", dtype), core.grid_score)
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


def grid_search(prob: Problem, y_proj: np.ndarray, theta_grid: np.ndarray, mem_gb: float,
                progress: ProgressFn | None, timings: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's best grid point (natural parameters) and its correlation with the unit's data.

    ``timings`` gains ``grid_predictions`` and ``grid_scoring`` (seconds).
    """
    t0 = time.perf_counter()
    grid_unit = grid_predictions(prob, theta_grid, mem_gb)
    timings["grid_predictions"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    best_idx, best = best_grid_points(prob, y_proj, grid_unit, mem_gb, progress)
    timings["grid_scoring"] = time.perf_counter() - t0
    return theta_grid[best_idx], best
