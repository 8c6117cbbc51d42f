"""The stages before the final fit: where each unit starts (grid, seeds), and the refinement."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from prfmap.engine import catalog, frames, streaming
from prfmap.engine.batching import ProgressFn
from prfmap.engine.grid import grid_theta
from prfmap.engine.models import Bounds, free_mask, get_model, natural_values
from prfmap.engine.problem import Problem
from prfmap.engine.search import grid_search, seed_search
from prfmap.engine.solvers import Adam, LevenbergMarquardt, Solver, refine_units
from prfmap.engine.stimulus import Stimulus

__all__ = ["refine", "start"]


def start(
    prob: Problem,
    refiner: catalog.RefinerSpec,
    grid: Mapping[str, np.ndarray],
    fixed: Mapping[str, float],
    y: np.ndarray,
    stim: Stimulus,
    refine_options: dict[str, Any],
) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
    """Each unit's starting internal parameters and their correlation with its data.

    The grid search; for a model with extras to seed (and a grid of x, y, sigma alone), the grid
    search and refinement of the Gaussian, then each unit's best candidate of the model's extras.
    Also the grid's and the seed candidates' sizes, for the settings.
    """
    mem_gb, progress, timings = (refine_options[k] for k in ("mem_gb", "progress", "timings"))
    seeded = bool(prob.model.seed_grid) and set(grid) <= {"x", "y", "sigma"}
    first = replace(prob, model=get_model("gauss")) if seeded else prob
    u, corr, grid_points = _grid_start(first, grid, fixed, y, mem_gb, progress, timings)
    if not seeded:
        return u, corr, {"grid_points": grid_points, "seed_candidates": 0}
    first_fixed = {k: v for k, v in fixed.items() if k in first.model.names}
    refine(
        first,
        refiner,
        u,
        y,
        corr,
        free_mask(first.model, first_fixed)[0],
        first.model.bounds(stim.scales),
        **refine_options,
    )
    timings["refine_gauss"] = timings.pop("refine")
    u, corr, candidates = _seed_start(
        prob, first, u, float(np.min(grid["sigma"])), fixed, y, mem_gb, progress, timings
    )
    return u, corr, {"grid_points": grid_points, "seed_candidates": candidates}


def _grid_start(
    prob: Problem,
    grid: Mapping[str, np.ndarray],
    fixed: Mapping[str, float],
    y: np.ndarray,
    mem_gb: float,
    progress: ProgressFn | None,
    timings: dict[str, float],
) -> tuple[np.ndarray, np.ndarray, int]:
    """Each unit's starting internal parameters from the grid search, its grid correlation, the grid size."""
    t0 = time.perf_counter()
    names = prob.model.names
    theta_grid = grid_theta(prob.model, grid)
    for name, value in fixed.items():
        if name in names:
            theta_grid[:, names.index(name)] = value
    theta0, grid_corr = grid_search(prob, y, theta_grid, mem_gb, progress, timings)
    timings["grid"] = time.perf_counter() - t0
    return prob.model.internal(theta0), grid_corr, int(theta_grid.shape[0])


def _seed_start(
    prob: Problem,
    gauss: Problem,
    u_gauss: np.ndarray,
    sigma_floor: float,
    fixed: Mapping[str, float],
    y: np.ndarray,
    mem_gb: float,
    progress: ProgressFn | None,
    timings: dict[str, float],
) -> tuple[np.ndarray, np.ndarray, int]:
    """The seed search, as prfpy seeds its extended models from its Gaussian fit.

    Around each unit's Gaussian fit ``u_gauss`` (internal parameters of ``gauss.model``), the model's
    ``seed_grid`` of extras is scored as the grid is; the best candidate starts the refinement. A
    Gaussian size below the grid's smallest (``sigma_floor``), which the data cannot resolve, is seeded
    from that smallest size.

    Returns
    -------
    u : (units, K) starting internal parameters
    corr : (units,) their correlation with the data
    candidates : int
        Candidates per unit.
    """
    t0 = time.perf_counter()
    model = prob.model
    theta = natural_values(gauss.model, u_gauss)
    theta[:, 2] = np.maximum(theta[:, 2], sigma_floor)
    start = model.from_report({**{k: theta[:, i] for i, k in enumerate(gauss.model.names)}, **fixed})
    candidates = model.seed_candidates(start, keep=set(fixed))
    for name, value in fixed.items():
        candidates[:, :, model.names.index(name)] = value
    theta0, corr = seed_search(prob, y, candidates, mem_gb, progress)
    timings["seed"] = time.perf_counter() - t0
    return model.internal(theta0), corr, int(candidates.shape[1])


def refine(
    prob: Problem,
    refiner: catalog.RefinerSpec,
    u: np.ndarray,
    y: np.ndarray,
    grid_corr: np.ndarray,
    free: np.ndarray,
    bounds: Bounds,
    *,
    mem_gb: float,
    max_iter: int | None,
    tol: float | None,
    learning_rate: float,
    refine_r2_min: float,
    progress: ProgressFn | None,
    timings: dict[str, float],
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Refine (in place, within ``bounds``) the units whose grid fit explains ``refine_r2_min``.

    Returns what the settings record, and per-unit flags: ``refined``, ``not_converged``, ``grid_only``.
    """
    t0 = time.perf_counter()
    chosen = np.flatnonzero(np.maximum(grid_corr, 0.0) ** 2 >= refine_r2_min)
    flags = {name: np.zeros(len(u), dtype=bool) for name in ("refined", "not_converged", "grid_only")}
    solver: Solver | None = None
    if refiner.name == "lm":
        solver = LevenbergMarquardt(prob.model, prob.dtype, tol or refiner.tol)
    elif refiner.name == "sgd":
        solver = Adam(prob.model, prob.dtype, tol or refiner.tol, learning_rate)
    iterations = [0, 0]
    if solver is not None:
        flags["grid_only"][:] = True
        flags["grid_only"][chosen] = False
    if solver is not None and chosen.size:
        # issue 18: LM streams its units through the batch (frames.reference(): rounds, as before)
        driver = refine_units if refiner.name != "lm" or frames.reference() else streaming.refine_streaming
        u[chosen], moving, iterations = driver(
            solver, prob, u[chosen], y[chosen], free, bounds, mem_gb, max_iter or refiner.max_iter, progress
        )
        flags["refined"][chosen], flags["not_converged"][chosen] = True, moving
    timings["refine"] = time.perf_counter() - t0
    return {
        "refine_r2_min": float(refine_r2_min),
        "units_refined": int(chosen.size) if solver else 0,
        "iterations": int(iterations[0]),
        "unit_iterations": int(iterations[1]),
        "max_iter": int(max_iter or refiner.max_iter),
    }, flags
