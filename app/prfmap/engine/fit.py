"""``fit_prf`` and ``predict``: grid search, linear fit and refinement over all units."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import keras
import numpy as np
from keras import ops

from prfmap.engine import catalog, core
from prfmap.engine.backend import compile_enabled, get_backend
from prfmap.engine.batching import ProgressFn, batch_size, compiled, memory_budget, pad, run_batches
from prfmap.engine.catalog import HRF_OPTIONS
from prfmap.engine.core_ops import tensor, to_numpy
from prfmap.engine.grid import grid_theta, polar_grid
from prfmap.engine.hrf import CANONICAL, HRF, HRF_BASES
from prfmap.engine.models import Bounds, PRFModel, floatx, free_mask, get_model
from prfmap.engine.participant_hrf import FEWEST_UNITS, HRF_PASSES, best_hrf, canonical_fallback, top_units
from prfmap.engine.problem import Problem, Units, make_problem, project_units
from prfmap.engine.search import grid_search, seed_search
from prfmap.engine.solvers import Adam, LevenbergMarquardt, Solver, refine_units
from prfmap.engine.stimulus import Stimulus

__all__ = ["FitResult", "estimate_hrf", "fit_prf", "predict"]


@dataclass
class FitResult:
    """Per-unit pRF parameters, goodness of fit, timings and settings of one fit.

    ``flags`` holds per-unit booleans (False where a unit was not fitted): ``surround_vanished`` for
    ``dog`` and ``dn``, where the surround or normalisation pool is too weak to act
    (:data:`prfmap.engine.catalog.SURROUND_VANISHED`), so the fit is a Gaussian and its surround
    parameters mean nothing.
    """

    model: str
    params: dict[str, np.ndarray]
    r2: np.ndarray
    loss: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    predictions: np.ndarray | None = None
    status: np.ndarray | None = None
    flags: dict[str, np.ndarray] = field(default_factory=dict)

    def maps(self) -> dict[str, np.ndarray]:
        """Every parameter map under its BIDS file label, with ``r2``, ``polarangle``, ``eccentricity``
        and the fit ``status`` (:data:`prfmap.engine.catalog.STATUS_FLAGS`)."""
        derived = {
            "r2": self.r2,
            "polar_angle": np.degrees(np.arctan2(self.params["y"], self.params["x"])),
            "eccentricity": np.hypot(self.params["x"], self.params["y"]),
        }
        if self.status is not None:
            derived["status"] = self.status
        return {catalog.PARAMETERS[k].label: v for k, v in {**self.params, **derived}.items()}


def fit_prf(
    data: np.ndarray, stim: Stimulus, tr: float, model: str = "gauss", refine: str = "lm", *,
    nuisance: np.ndarray | None = None, hrf: str | HRF = "canonical", fit_hrf: bool = False,
    grid: Mapping[str, np.ndarray] | None = None, mem_gb: float | None = None, dtype: str = "float32",
    seed: int = 0, fixed: Mapping[str, float] | None = None, max_iter: int | None = None,
    tol: float | None = None, learning_rate: float = 0.05, refine_r2_min: float = 0.0,
    slice_time_ref: float = 0.5, progress: ProgressFn | None = None, return_predictions: bool = False,
) -> FitResult:
    """Fit a pRF model to every unit: grid search, linear fit, then refinement.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        Preprocessed time courses (e.g. percent signal change).
    stim : Stimulus
        Apertures, one frame per TR.
    tr : float
        Repetition time in seconds.
    model : str
        A model of :data:`prfmap.engine.catalog.MODELS`: ``gauss``, ``css``, ``dog`` or ``dn``.
    refine : str
        A refiner of :data:`prfmap.engine.catalog.REFINERS`: ``lm`` (Levenberg–Marquardt), ``sgd`` (Adam)
        or ``none`` (the grid and linear fit alone).
    nuisance : ndarray, shape (frames, k), optional
        Regressors that preprocessing removed (high-pass basis, confounds, run constants); data and every
        prediction are projected onto their orthogonal complement (a constant is always included).
    hrf : {"canonical", "participant", "vertex"} or HRF
        SPM's response; one estimated from the best units, held fixed (:func:`estimate_hrf`); SPM's
        plus per-unit derivative weights (``fit_hrf=True`` too); or the given HRF, held fixed.
    grid : dict, optional
        Grid of ``x``, ``y``, ``sigma`` points (default :func:`polar_grid`), searched with the Gaussian;
        a model with extras (css, dog, dn) then seeds them per unit from a small grid of its own around
        the unit's Gaussian start (``PRFModel.seed_grid``). A grid that also names extras (``n``...) is
        searched with the model itself instead, without the per-unit seeding.
    mem_gb : float, optional
        Memory budget for tiles and batches (default 2 GB; at most 60 % of a GPU's free memory).
    dtype : {"float32", "float64"}
    seed : int
        Seed of the random generator (kept for reproducible future stochastic stages).
    fixed : dict, optional
        Internal parameters held at a value, e.g. ``{"n": 0.5}``; added to the model's catalogue defaults.
    max_iter, tol : int, float, optional
        Iterations, and the per-unit relative cost change under which a unit stops; the refiner's
        catalogue defaults (LM 30 and 1e-4, SGD 400 and 1e-5) when not given.
    learning_rate : float
        Adam learning rate, in degrees (positions) and log-units (sizes), for ``refine="sgd"``.
    refine_r2_min : float
        Refine only units whose grid fit explains at least this fraction of variance (the grid's best
        correlation squared); the others keep the grid + linear fit. 0 refines every unit.
    slice_time_ref : float
        Where in each TR the volume is sampled (fMRIPrep default 0.5).
    progress : callable, optional
        ``progress(stage, done, total)`` between batches.
    return_predictions : bool
        Keep the fitted time courses in ``FitResult.predictions``.

    Returns
    -------
    FitResult
    """
    t_start, prf_model, refiner = time.perf_counter(), get_model(model), catalog.get_refiner(refine)
    data, mem_gb, dtype = _check_data(data, stim), memory_budget(mem_gb), floatx(dtype)
    prob, units, timings, (free, fixed_values) = _setup(
        prf_model, data, stim, tr, "vertex" if fit_hrf else hrf, nuisance, slice_time_ref, fixed,
        mem_gb=mem_gb, dtype=dtype, progress=progress)
    refine_options = {"mem_gb": mem_gb, "max_iter": max_iter, "tol": tol, "learning_rate": learning_rate,
                      "refine_r2_min": refine_r2_min, "progress": progress, "timings": timings}
    u, corr, starts = _start(prob, refiner, grid if grid is not None else polar_grid(stim), fixed_values,
                             units.y, stim, refine_options)
    u_start, bounds = u.copy(), prob.model.bounds(stim.scales)
    refined, flags = _refine(prob, refiner, u, units.y, corr, free, bounds, **refine_options)
    result = _checked_fit(partial(_final_fit, prob, units, shape=data.shape, mem_gb=mem_gb, timings=timings,
                                  with_predictions=return_predictions),
                          u, u_start, units.index, bounds, free, flags, prob.model.names)
    result.settings = _settings(prob, refine, {
        **refined, **starts, "fixed": {k: float(v) for k, v in fixed_values.items()},
        "slice_time_ref": slice_time_ref, "units": int(data.shape[0]), "units_fitted": int(units.index.size),
        "seed": int(seed), "bounds": _bounds_record(prob.model, bounds, free)})
    timings["total"] = time.perf_counter() - t_start
    return result


def estimate_hrf(
    data: np.ndarray, stim: Stimulus, tr: float, *, nuisance: np.ndarray | None = None,
    slice_time_ref: float = 0.5, mem_gb: float | None = None, dtype: str = "float32",
    progress: ProgressFn | None = None,
) -> HRF:
    """One HRF for all units of a participant, estimated from its best units.

    Every unit is fitted with the canonical HRF (Gaussian pRF, grid and linear fit); the best of
    them by r² (:func:`~prfmap.engine.participant_hrf.top_units`: 5 %, 50 to 200 units, r² ≥ 0.1)
    are refitted with per-unit HRF derivative weights, and with their pRFs held fixed, the delay
    of one two-gamma response (SPM's shape otherwise) that explains most of their variance is
    searched (:func:`~prfmap.engine.participant_hrf.best_hrf`); a second pass refits them with
    that response and searches again. With fewer than 20 such units the canonical
    HRF is returned (``units`` 0).

    Parameters
    ----------
    data, stim, tr, nuisance, slice_time_ref, mem_gb, dtype, progress
        As :func:`fit_prf`.

    Returns
    -------
    HRF
        ``option`` "participant", ``units`` the number of units it was estimated from.
    """
    common = {"nuisance": nuisance, "slice_time_ref": slice_time_ref, "mem_gb": mem_gb, "dtype": dtype,
              "progress": progress}
    screen = fit_prf(data, stim, tr, "gauss", "none", hrf="canonical", **common)
    top = top_units(screen.r2)
    if top.size < FEWEST_UNITS:
        return canonical_fallback()
    model = get_model("gauss")
    prob = make_problem(model, stim, tr, 1, nuisance, floatx(dtype), slice_time_ref)
    units = project_units(prob, np.asarray(data[top], dtype=np.float64))
    q = to_numpy(prob.q).astype(np.float64)
    hrf: str | HRF = "vertex"
    for _ in range(HRF_PASSES):
        best = fit_prf(data[top], stim, tr, "gauss", "lm", hrf=hrf, **common)
        theta = model.from_report({k: best.params[k][units.index] for k in ("x", "y", "sigma")})
        neural = to_numpy(model.neural(tensor(theta, prob.dtype), prob.stim, jacobian=False))[0]
        hrf = best_hrf(neural.astype(np.float64), units.y, q, tr, stim.run_lengths, slice_time_ref)[0]
    return hrf


def _setup(model: PRFModel, data: np.ndarray, stim: Stimulus, tr: float, hrf: str | HRF,
           nuisance: np.ndarray | None, slice_time_ref: float, fixed: Mapping[str, float] | None, *,
           dtype: str, **kwargs: Any) -> tuple[Problem, Units, dict[str, float], tuple[np.ndarray, dict]]:
    """The fit's problem (with the HRF resolved: estimated for ``participant``), its units, timings,
    and the mask of free parameters with the values of the fixed ones (:func:`free_mask`)."""
    t0 = time.perf_counter()
    hrf, n_bases = _resolve_hrf(hrf, data, stim, tr, nuisance=nuisance, slice_time_ref=slice_time_ref,
                                dtype=dtype, **kwargs)
    prob = make_problem(model, stim, tr, n_bases, nuisance, dtype, slice_time_ref, hrf)
    return (prob, project_units(prob, data), {"setup": time.perf_counter() - t0},
            free_mask(model, fixed or {}))


def _resolve_hrf(hrf: str | HRF, data: np.ndarray, stim: Stimulus, tr: float,
                 **kwargs: Any) -> tuple[HRF, int]:
    """The HRF a fit holds fixed (estimated for ``participant``) and its number of bases."""
    if isinstance(hrf, HRF):
        return hrf, 1
    if hrf not in HRF_OPTIONS:
        raise ValueError(f"unknown HRF option {hrf!r}; choose from {HRF_OPTIONS} or give an HRF")
    if hrf == "participant":
        return estimate_hrf(data, stim, tr, **kwargs), 1
    return HRF(option=hrf), 3 if hrf == "vertex" else 1


def _start(prob: Problem, refiner: catalog.RefinerSpec, grid: Mapping[str, np.ndarray],
           fixed: Mapping[str, float], y: np.ndarray, stim: Stimulus,
           refine_options: dict[str, Any]) -> tuple[np.ndarray, np.ndarray, dict[str, int]]:
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
    _refine(first, refiner, u, y, corr, free_mask(first.model, first_fixed)[0],
            first.model.bounds(stim.scales), **refine_options)
    timings["refine_gauss"] = timings.pop("refine")
    u, corr, candidates = _seed_start(prob, first, u, float(np.min(grid["sigma"])), fixed, y, mem_gb,
                                      progress, timings)
    return u, corr, {"grid_points": grid_points, "seed_candidates": candidates}


def _check_data(data: np.ndarray, stim: Stimulus) -> np.ndarray:
    """``data`` as float64 (units, frames), or ValueError when its frames do not match the stimulus."""
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != stim.n_frames:
        raise ValueError(f"data must be (units, {stim.n_frames}) to match the stimulus, got {data.shape}")
    return data


def _grid_start(prob: Problem, grid: Mapping[str, np.ndarray], fixed: Mapping[str, float], y: np.ndarray,
                mem_gb: float, progress: ProgressFn | None,
                timings: dict[str, float]) -> tuple[np.ndarray, np.ndarray, int]:
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


def _seed_start(prob: Problem, gauss: Problem, u_gauss: np.ndarray, sigma_floor: float,
                fixed: Mapping[str, float], y: np.ndarray, mem_gb: float, progress: ProgressFn | None,
                timings: dict[str, float]) -> tuple[np.ndarray, np.ndarray, int]:
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
    theta = to_numpy(gauss.model.natural(tensor(u_gauss, prob.dtype))[0]).astype(np.float64)
    theta[:, 2] = np.maximum(theta[:, 2], sigma_floor)
    start = model.from_report({**{k: theta[:, i] for i, k in enumerate(gauss.model.names)}, **fixed})
    candidates = model.seed_candidates(start, keep=set(fixed))
    for name, value in fixed.items():
        candidates[:, :, model.names.index(name)] = value
    theta0, corr = seed_search(prob, y, candidates, mem_gb, progress)
    timings["seed"] = time.perf_counter() - t0
    return model.internal(theta0), corr, int(candidates.shape[1])


def _refine(prob: Problem, refiner: catalog.RefinerSpec, u: np.ndarray, y: np.ndarray, grid_corr: np.ndarray,
            free: np.ndarray, bounds: Bounds, *, mem_gb: float, max_iter: int | None,
            tol: float | None, learning_rate: float, refine_r2_min: float, progress: ProgressFn | None,
            timings: dict[str, float]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
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
        u[chosen], moving, iterations = refine_units(solver, prob, u[chosen], y[chosen], free, bounds,
                                                     mem_gb, max_iter or refiner.max_iter, progress)
        flags["refined"][chosen], flags["not_converged"][chosen] = True, moving
    timings["refine"] = time.perf_counter() - t0
    return {"refine_r2_min": float(refine_r2_min), "units_refined": int(chosen.size) if solver else 0,
            "iterations": int(iterations[0]), "unit_iterations": int(iterations[1]),
            "max_iter": int(max_iter or refiner.max_iter)}, flags


def _checked_fit(final: Callable[[np.ndarray], FitResult], u: np.ndarray, u_grid: np.ndarray,
                 index: np.ndarray, bounds: Bounds, free: np.ndarray,
                 flags: dict[str, np.ndarray], names: tuple[str, ...]) -> FitResult:
    """``final(u)``, with the grid start instead where the refinement left the valid range, and the
    status of every unit."""
    result = final(u)
    rejected = flags["refined"] & ~_valid(result, index)
    if rejected.any():  # back to the grid estimate, which correlates positively with the data
        u[rejected] = u_grid[rejected]
        result = final(u)
    flags["refinement_rejected"] = rejected
    for name, on in _bound_flags(u, bounds, free, names).items():
        flags[name] = flags["refined"] & ~rejected & on
    flags["not_converged"] &= ~rejected
    for name, on in result.flags.items():  # the model's own (surround_vanished)
        flags[name] = on[index]
    _set_status(result, index, flags)
    result.flags = {name: on & np.isfinite(result.r2) for name, on in result.flags.items()}
    return result


def _valid(result: FitResult, index: np.ndarray) -> np.ndarray:
    """Per fitted unit: finite cost and amplitude of the sign the models define (positive)."""
    amplitude = result.params["amplitude"][index]
    return np.isfinite(result.loss[index]) & np.isfinite(amplitude) & (amplitude > 0)


def _bound_flags(u: np.ndarray, bounds: Bounds, free: np.ndarray,
                 names: tuple[str, ...]) -> dict[str, np.ndarray]:
    """Per unit: ``size_at_floor`` where sigma ended on (within 1e-4 of) its lower bound, the
    resolution floor; ``at_bound`` where another fitted internal parameter, or the centre's
    eccentricity, ended on one of its bounds."""
    near = np.zeros((2,) + u.shape, dtype=bool)
    for side, limit in enumerate((bounds.lower, bounds.upper)):
        finite = np.isfinite(limit) & (free > 0)
        near[side] = finite[None] & (np.abs(u - np.where(finite, limit, 0.0)) <= 1e-4 * (1.0 + np.abs(limit)))
    floor = np.zeros(len(u), dtype=bool)
    if "sigma" in names:
        k = names.index("sigma")
        floor, near[0, :, k] = near[0, :, k].copy(), False
    centre_free = free[0] > 0 or free[1] > 0
    edge = centre_free & (np.hypot(u[:, 0], u[:, 1]) >= bounds.eccentricity * (1 - 1e-4))
    return {"at_bound": near.any(axis=(0, 2)) | edge, "size_at_floor": floor}


def _set_status(result: FitResult, index: np.ndarray, flags: Mapping[str, np.ndarray]) -> None:
    """The per-unit status bits of ``result`` (:data:`catalog.STATUS_FLAGS`), and NaN for no signal.

    Units without usable data, or whose best fit has no positive response (the grid's best correlation
    is not positive), have every parameter, r² and the loss NaN and status ``no_signal``.
    """
    n = len(result.r2)
    status = np.zeros(n, dtype=np.int64)
    fitted = np.zeros(n, dtype=bool)
    fitted[index] = _valid(result, index)
    status[~fitted] |= catalog.STATUS_BITS["no_signal"]
    for name, on in flags.items():
        if name in catalog.STATUS_BITS:
            status[index[on & fitted[index]]] |= catalog.STATUS_BITS[name]
    for values in (*result.params.values(), result.r2, result.loss):
        values[~fitted] = np.nan
    result.status = status.astype(np.float64)


def _bounds_record(model: PRFModel, bounds: Bounds, free: np.ndarray) -> dict[str, Any]:
    """The natural-unit bounds the refinement held each fitted parameter in, for the sidecars."""
    record: dict[str, Any] = {"eccentricity": [0.0, bounds.eccentricity]}
    for k, p in enumerate(model.params):
        if free[k] and (np.isfinite(bounds[0][k]) or np.isfinite(bounds[1][k])):
            low, high = (float(np.exp(b[k])) if p.transform == "exp" else float(b[k])
                         for b in (bounds.lower, bounds.upper))
            record[p.name] = [low if np.isfinite(low) else None, high if np.isfinite(high) else None]
    return record


def _final_fit(prob: Problem, units: Units, u: np.ndarray, *, shape: tuple[int, int], mem_gb: float,
               with_predictions: bool, timings: dict[str, float]) -> FitResult:
    """Linear weights, baseline and r² at the final parameters; every unit's reported parameters."""
    t0 = time.perf_counter()
    model, dtype, n = prob.model, prob.dtype, len(u)
    fn = compiled(("finalize", model, dtype), partial(core.finalize, model))
    beta, baseline, cost = np.empty((n, prob.n_bases)), np.empty(n), np.empty(n)
    fitted = np.empty_like(units.y) if with_predictions else None

    def run(start: int, stop: int, batch: int) -> None:
        out = fn(tensor(pad(u[start:stop], batch), dtype), tensor(pad(units.y[start:stop], batch), dtype),
                 tensor(pad(units.raw[start:stop], batch), dtype), prob.stim, prob.hrf_t, prob.q)
        k = stop - start
        beta[start:stop], baseline[start:stop] = to_numpy(out[0])[:k], to_numpy(out[1])[:k]
        cost[start:stop] = to_numpy(out[2])[:k]
        if fitted is not None:
            fitted[start:stop] = to_numpy(out[3])[:k]

    run_batches(n, batch_size(prob, mem_gb, 0), run, "finalize", None)
    theta = to_numpy(model.natural(tensor(u, dtype))[0]).astype(np.float64)
    timings["linear"] = time.perf_counter() - t0

    def full(values: np.ndarray, fill: float = np.nan) -> np.ndarray:
        out = np.full(shape[0], fill)
        out[units.index] = values
        return out

    amplitude = beta[:, 0]
    params = {k: full(v) for k, v in model.report(theta, amplitude).items()}
    params["amplitude"], params["baseline"] = full(amplitude), full(baseline)
    if prob.n_bases == 3:
        safe = np.where(amplitude != 0, amplitude, np.nan)
        params["hrf_deriv"], params["hrf_disp"] = full(beta[:, 1] / safe), full(beta[:, 2] / safe)
    r2 = full(1.0 - cost / np.maximum(np.sum(units.y**2, axis=1), 1e-30))
    predictions = None
    if fitted is not None:
        predictions = np.full(shape, np.nan)
        predictions[units.index] = fitted
    flags = {k: full(v, False).astype(bool) for k, v in model.flags(theta).items()}
    return FitResult(model.name, params, r2, full(cost), timings, {}, predictions, flags=flags)


def describe_hrf(hrf: HRF, n_bases: int) -> str:
    """A sentence's worth on the HRF of a fit, for sidecars and the report's methods."""
    if n_bases == 3:
        return "SPM canonical + per-unit temporal and dispersion derivatives"
    if hrf.option == "participant" and hrf.units:
        return (f"participant-level two-gamma (peak delay {hrf.delay:g} s, dispersion {hrf.dispersion:g}, "
                f"maximum at {hrf.peak_s():g} s; estimated from the {hrf.units} best units)")
    if hrf.option == "participant":
        return "SPM canonical (too few units with signal to estimate a participant-level HRF)"
    if hrf == HRF(option=hrf.option, units=hrf.units):
        return "SPM canonical"
    return (f"two-gamma (peak delay {hrf.delay:g} s, dispersion {hrf.dispersion:g}, "
            f"maximum at {hrf.peak_s():g} s)")


def _settings(prob: Problem, refine: str, options: dict[str, Any]) -> dict[str, Any]:
    """The JSON-able record of a fit for sidecars: model, refiner, HRF, sizes, software and device."""
    backend = get_backend()
    return {
        "model": prob.model.name,
        "refine": refine,
        "hrf": describe_hrf(prob.hrf, prob.n_bases),
        "hrf_model": {**prob.hrf.describe(), "option": "vertex" if prob.n_bases == 3 else prob.hrf.option},
        "hrf_bases": list(HRF_BASES[:prob.n_bases]),
        "slice_time_ref": options["slice_time_ref"],
        "grid_points": options["grid_points"],
        "seed_candidates": options["seed_candidates"],
        "refine_r2_min": options["refine_r2_min"],
        "units_refined": options["units_refined"],
        "iterations": options["iterations"],
        "unit_iterations": options["unit_iterations"],
        "pixels": int(prob.pixels),
        "max_iter": options["max_iter"],
        "fixed": options["fixed"],
        "dtype": prob.dtype,
        "units": options["units"],
        "units_fitted": options["units_fitted"],
        "backend": backend.NAME,
        "backend_version": backend.version(),
        "keras_version": keras.__version__,
        "device": backend.device(),
        "compiled": compile_enabled(),
        "seed": options["seed"],
        "bounds": options["bounds"],
    }


def predict(
    params: Mapping[str, np.ndarray],
    stim: Stimulus,
    tr: float,
    model: str = "gauss",
    *,
    dtype: str = "float32",
    slice_time_ref: float = 0.5,
    hrf: HRF = CANONICAL,
) -> np.ndarray:
    """Predicted BOLD time courses (units, frames) for given pRF parameters.

    Parameters
    ----------
    params : dict
        Reported parameters (``x``, ``y``, ``sigma``, ``amplitude``, ``baseline`` and the model's extras),
        scalars or (units,) arrays; optional per-unit HRF weights ``hrf_deriv`` and ``hrf_disp``.
    stim : Stimulus
    tr : float
    model : str
        A model of :data:`prfmap.engine.catalog.MODELS`.
    dtype : {"float32", "float64"}
    slice_time_ref : float
    hrf : HRF
        The response (its derivatives weighted by ``hrf_deriv``, ``hrf_disp``); the fit's is
        ``HRF.from_record(result.settings["hrf_model"])``.

    Returns
    -------
    ndarray, shape (units, frames)
    """
    prf_model = get_model(model)
    dtype = floatx(dtype)
    arrays = {k: np.atleast_1d(np.asarray(v, dtype=np.float64)) for k, v in params.items()}
    n = max(len(v) for v in arrays.values())
    arrays = {k: np.broadcast_to(v, (n,)) for k, v in arrays.items()}
    arrays.setdefault("amplitude", np.ones(n))
    theta = prf_model.from_report(arrays)
    weights = np.stack([np.ones(n), arrays.get("hrf_deriv", np.zeros(n)),
                        arrays.get("hrf_disp", np.zeros(n))], axis=1)
    weights *= arrays["amplitude"][:, None]
    prob = make_problem(prf_model, stim, tr, 3, None, dtype, slice_time_ref, hrf)
    fn = compiled(("predict", prf_model, dtype), partial(_predict_tensor, prf_model))
    out = fn(tensor(theta, dtype), tensor(weights, dtype), prob.stim, prob.hrf_t)
    return to_numpy(out).astype(np.float64) + arrays.get("baseline", np.zeros(n))[:, None]


def _predict_tensor(model: PRFModel, theta: Any, weights: Any, stim: tuple, hrf_t: Any) -> Any:
    neural = model.neural(theta, stim, jacobian=False)
    regs = core.hrf_regressors(neural, hrf_t)[0]  # (bases, units, frames)
    return ops.sum(ops.transpose(weights)[:, :, None] * regs, axis=0)
