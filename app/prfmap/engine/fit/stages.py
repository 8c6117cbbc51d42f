"""The stages before the final fit: where each unit starts (grid, seeds), and the refinement.

Each stage returns a new frozen value (:class:`Start`, :class:`Refined`) with its seconds; the
refinement dispatches through the refiner's catalogue entry (:class:`~prfmap.engine.catalog.RefinerSpec`):
its solver class, constructed with the entry's options.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from prfmap.engine import catalog
from prfmap.engine.batching import ProgressFn, RunContext
from prfmap.engine.fit.grid import grid_theta
from prfmap.engine.fit.search import grid_search, seed_search
from prfmap.engine.models import InternalBounds, PRFModel, free_mask, get_model
from prfmap.engine.models.transforms import natural_values
from prfmap.engine.problem import Problem
from prfmap.engine.solvers import Solver, refine_units, solver_class, streaming
from prfmap.engine.stimulus import Stimulus

__all__ = ["RefinePlan", "Refined", "Start", "refine", "start"]


@dataclass(frozen=True)
class RefinePlan:
    """How the units are refined: the refiner's entry, the budget and the options a fit gives it.

    Attributes
    ----------
    refiner : RefinerSpec
        The catalogue entry (its solver, defaults and options).
    mem_gb : float
        Memory budget of a batch.
    max_iter, tol : int, float, optional
        Iteration budget and tolerance; None: the entry's (0 is zero).
    options : mapping
        Solver options over the entry's; an option the entry does not declare is a ``ValueError``.
    refine_r2_min : float
        Grid r² a unit needs to be refined.
    """

    refiner: catalog.RefinerSpec
    mem_gb: float
    max_iter: int | None = None
    tol: float | None = None
    options: Mapping[str, Any] = field(default_factory=dict)
    refine_r2_min: float = 0.0

    def __post_init__(self) -> None:
        unknown = sorted(set(self.options) - set(self.refiner.options))
        if unknown:
            declared = ", ".join(sorted(self.refiner.options)) or "none"
            raise ValueError(
                f"refiner {self.refiner.name!r} has no option {', '.join(map(repr, unknown))} "
                f"(its options: {declared})"
            )

    @property
    def budget(self) -> int:
        """Iterations: ``max_iter``, or the refiner's default when not given."""
        return int(self.refiner.max_iter if self.max_iter is None else self.max_iter)

    def solver(self, prob: Problem) -> Solver | None:
        """The refiner's solver for a problem (None for ``none``).

        Parameters
        ----------
        prob : Problem
            Its model and dtype.

        Returns
        -------
        Solver or None
        """
        if self.refiner.solver is None:
            return None
        tol = self.refiner.tol if self.tol is None else self.tol
        options = {**self.refiner.options, **self.options}
        return solver_class(self.refiner)(prob.model, prob.dtype, tol, **options)


@dataclass(frozen=True)
class Start:
    """Where each unit starts the refinement.

    Attributes
    ----------
    u : ndarray, shape (units, K)
        Internal parameters (the grid point, or the seed).
    corr : ndarray, shape (units,)
        Their correlation with the unit's data.
    grid_points, seed_candidates : int
        Sizes of the searches (0 candidates: not seeded).
    timings : dict
        Seconds per part (``grid_predictions``, ``grid_scoring``, ``grid``, and for a seeded model
        ``refine_gauss``, ``seed``).
    seeded : ndarray of bool, shape (units,), optional
        Of a model seeded from a given Gaussian fit (``gauss_start``), the units it seeded; the
        others start from that Gaussian fit.
    """

    u: np.ndarray
    corr: np.ndarray
    grid_points: int
    seed_candidates: int
    timings: dict[str, float]
    seeded: np.ndarray | None = None


@dataclass(frozen=True)
class Refined:
    """The refinement's outcome.

    Attributes
    ----------
    u : ndarray, shape (units, K)
        Internal parameters after the refinement (the start where a unit was not refined).
    flags : dict
        Per-unit booleans: ``refined``, ``not_converged``, ``grid_only``.
    record : dict
        What the settings record (``refine_r2_min``, ``units_refined``, ``iterations``,
        ``unit_iterations``, ``max_iter``).
    seconds : float
        Time it took.
    """

    u: np.ndarray
    flags: dict[str, np.ndarray]
    record: dict[str, Any]
    seconds: float


def start(
    prob: Problem,
    plan: RefinePlan,
    grid: Mapping[str, np.ndarray],
    fixed: Mapping[str, float],
    y: np.ndarray,
    stim: Stimulus,
    progress: ProgressFn | None,
    gauss_start: Mapping[str, np.ndarray] | None = None,
) -> Start:
    """Each unit's starting internal parameters and their correlation with its data.

    The grid search; for a model with extras to seed (and a grid of x, y, sigma alone), the grid
    search and refinement of the Gaussian, then each unit's best candidate of the model's extras.
    With ``gauss_start`` (``x``, ``y``, ``sigma`` of a Gaussian fit of the same units) a seeded
    model seeds from it instead, without a grid search or Gaussian refinement of its own.

    Parameters
    ----------
    prob : Problem
        The fit's tensors.
    plan : RefinePlan
        How the Gaussian start of a seeded model is refined.
    grid : mapping
        The grid's points per parameter.
    fixed : mapping
        Internal parameters held at a value.
    y : ndarray, shape (units, frames)
        The units' projected data.
    stim : Stimulus
        The stimulus (its scales bound the Gaussian's refinement).
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    Start
    """
    seeded = bool(prob.model.seed_grid) and set(grid) <= {"x", "y", "sigma"}
    run = RunContext(plan.mem_gb, progress)
    first = replace(prob, model=get_model("gauss")) if seeded else prob
    sigma_floor = float(np.min(grid["sigma"]))
    if seeded and gauss_start is not None:
        theta = np.column_stack([_finite(gauss_start[k], first.model, k) for k in first.model.names[:3]])
        r2 = np.asarray(gauss_start.get("r2", np.ones(len(theta))), dtype=np.float64)
        corr = np.sqrt(np.maximum(np.nan_to_num(r2), 0.0))
        # a refined Gaussian fit's r² (a shared gauss_start) against the whole threshold
        which = seeded_by_gaussian(corr**2, plan.refine_r2_min, 1.0)
        u, corr, candidates, seconds, seeded = _seed_start(
            prob, first.model.internal(theta), corr, which, sigma_floor, fixed, y, run
        )
        return Start(u, corr, 0, candidates, {"seed": seconds}, seeded)
    u, corr, grid_points, timings = _grid_start(first, grid, fixed, y, plan.mem_gb, progress)
    if not seeded:
        return Start(u, corr, grid_points, 0, timings)
    first_fixed = {k: v for k, v in fixed.items() if k in first.model.names}
    free = free_mask(first.model, first_fixed)[0]
    gauss = refine(first, plan, u, y, corr, free, first.model.bounds(stim.scales), progress)
    # the grid's correlation, which the Gaussian's refinement raises, against a share of it
    which = seeded_by_gaussian(np.maximum(corr, 0.0) ** 2, plan.refine_r2_min, SEED_R2_SHARE)
    u, corr, candidates, seconds, _ = _seed_start(prob, gauss.u, corr, which, sigma_floor, fixed, y, run)
    return Start(
        u, corr, grid_points, candidates, {**timings, "refine_gauss": gauss.seconds, "seed": seconds}
    )


SEED_R2_SHARE = 0.5
"""A seeded model seeds the units whose Gaussian fit explains at least this share of
``refine_r2_min``: a seed raises the correlation a little, never to the refinement's threshold from
far below it, and the search is most of a seeded model's cost."""


def seeded_by_gaussian(r2: np.ndarray, refine_r2_min: float, share: float = 1.0) -> np.ndarray:
    """The units a model seeded from a Gaussian fit seeds and refines; the others keep the Gaussian.

    Those whose Gaussian r² reaches ``share`` of ``refine_r2_min`` (1 for a refined Gaussian fit,
    :data:`SEED_R2_SHARE` for a grid's).

    Parameters
    ----------
    r2 : ndarray, shape (units,)
        The Gaussian fit's r² (NaN: not fitted).
    refine_r2_min : float
        The refinement's threshold.
    share : float
        Of the threshold.

    Returns
    -------
    ndarray of bool, shape (units,)
    """
    return np.maximum(np.nan_to_num(np.asarray(r2, dtype=np.float64)), 0.0) >= share * refine_r2_min


def _finite(values: np.ndarray, model: PRFModel, name: str) -> np.ndarray:
    """A Gaussian start's parameter, its default where the start has none (a unit it did not fit)."""
    values = np.asarray(values, dtype=np.float64)
    default = next(p.default for p in model.params if p.name == name)
    return np.where(np.isfinite(values), values, default)


def _grid_start(
    prob: Problem,
    grid: Mapping[str, np.ndarray],
    fixed: Mapping[str, float],
    y: np.ndarray,
    mem_gb: float,
    progress: ProgressFn | None,
) -> tuple[np.ndarray, np.ndarray, int, dict[str, float]]:
    """Each unit's starting internal parameters from the grid search.

    Also its grid correlation, the grid size, and the seconds of the search's parts.
    """
    t0 = time.perf_counter()
    names = prob.model.names
    theta_grid = grid_theta(prob.model, grid)
    for name, value in fixed.items():
        if name in names:
            theta_grid[:, names.index(name)] = value
    theta0, grid_corr, timings = grid_search(prob, y, theta_grid, mem_gb, progress)
    timings["grid"] = time.perf_counter() - t0
    return prob.model.internal(theta0), grid_corr, int(theta_grid.shape[0]), timings


def _seed_start(
    prob: Problem,
    u_gauss: np.ndarray,
    gauss_corr: np.ndarray,
    which: np.ndarray,
    sigma_floor: float,
    fixed: Mapping[str, float],
    y: np.ndarray,
    run: RunContext,
) -> tuple[np.ndarray, np.ndarray, int, float, np.ndarray]:
    """The seed search, as prfpy seeds its extended models from its Gaussian fit.

    Around each unit's Gaussian fit ``u_gauss`` (internal parameters of the Gaussian), the model's
    ``seed_grid`` of extras is scored as the grid is; the best candidate starts the refinement. A
    Gaussian size below the grid's smallest (``sigma_floor``), which the data cannot resolve, is seeded
    from that smallest size. Only the units ``which`` (:func:`seeded_by_gaussian`) are seeded: the
    others are not refined and keep the Gaussian fit with the extras' defaults (and its correlation).

    Returns
    -------
    u : (units, K) starting internal parameters
    corr : (units,) their correlation with the data
    candidates : int
        Candidates per unit.
    seconds : float
        Time the seed search took.
    seeded : (units,) bool
        The units seeded.
    """
    t0 = time.perf_counter()
    model, gauss = prob.model, get_model("gauss")
    theta = natural_values(gauss.params, u_gauss)
    theta[:, 2] = np.maximum(theta[:, 2], sigma_floor)
    start = model.from_report({**{k: theta[:, i] for i, k in enumerate(gauss.names)}, **fixed})
    chosen = np.flatnonzero(which)
    candidates = model.seed_candidates(start[chosen], keep=set(fixed))
    for name, value in fixed.items():
        candidates[:, :, model.names.index(name)] = value
    theta0, corr = start.copy(), np.asarray(gauss_corr, dtype=np.float64).copy()
    if chosen.size:
        theta0[chosen], corr[chosen] = seed_search(prob, y[chosen], candidates, run.mem_gb, run.progress)
    seeded = np.zeros(len(theta0), dtype=bool)
    seeded[chosen] = True
    return model.internal(theta0), corr, int(candidates.shape[1]), time.perf_counter() - t0, seeded


def refine(
    prob: Problem,
    plan: RefinePlan,
    u: np.ndarray,
    y: np.ndarray,
    grid_corr: np.ndarray,
    free: np.ndarray,
    bounds: InternalBounds,
    progress: ProgressFn | None,
) -> Refined:
    """Refine, within ``bounds``, the units whose grid fit explains ``plan.refine_r2_min``.

    Parameters
    ----------
    prob : Problem
        The fit's tensors.
    plan : RefinePlan
        The refiner, its budget and options.
    u : ndarray, shape (units, K)
        Starting internal parameters (not changed).
    y : ndarray, shape (units, frames)
        The units' projected data.
    grid_corr : ndarray, shape (units,)
        Each unit's grid correlation (its square is the grid's r²).
    free : ndarray, shape (K,)
        1 for each fitted, 0 for each fixed internal parameter.
    bounds : InternalBounds
        Where the refinement keeps the parameters.
    progress : callable, optional
        ``progress(stage, done, total)``.

    Returns
    -------
    Refined
    """
    t0 = time.perf_counter()
    chosen = np.flatnonzero(np.maximum(grid_corr, 0.0) ** 2 >= plan.refine_r2_min)
    flags = {name: np.zeros(len(u), dtype=bool) for name in ("refined", "not_converged", "grid_only")}
    solver = plan.solver(prob)
    iterations = [0, 0]
    refined = u.copy()
    if solver is not None and plan.budget == 0:  # no step to take: every unit keeps its start
        solver, flags["grid_only"][:] = None, True
    if solver is not None:
        flags["grid_only"][:] = True
        flags["grid_only"][chosen] = False
    if solver is not None and chosen.size:
        # issue 18: a solver that streams takes units through a batch of slots (reference: rounds)
        streamed = solver.streams
        driver = streaming.refine_streaming if streamed else refine_units
        run = RunContext(plan.mem_gb, progress)
        refined[chosen], moving, iterations = driver(
            solver, prob, u[chosen], y[chosen], free, bounds, plan.budget, run
        )
        flags["refined"][chosen], flags["not_converged"][chosen] = True, moving
    record = {
        "refine_r2_min": float(plan.refine_r2_min),
        "units_refined": int(chosen.size) if solver else 0,
        "iterations": int(iterations[0]),
        "unit_iterations": int(iterations[1]),
        "max_iter": plan.budget,
    }
    return Refined(refined, flags, record, time.perf_counter() - t0)
