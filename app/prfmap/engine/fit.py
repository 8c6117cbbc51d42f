"""``fit_prf``: grid search, seeds, refinement and the final fit over all units; ``estimate_hrf``.

The stages live in :mod:`~prfmap.engine.stages` (starts, refinement) and
:mod:`~prfmap.engine.result` (the final linear fit, the status of each unit); ``predict`` in
:mod:`~prfmap.engine.prediction`.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from functools import partial
from typing import Any

import keras
import numpy as np

from prfmap.engine import catalog, frames, stages
from prfmap.engine.backend import compile_enabled, get_backend
from prfmap.engine.batching import ProgressFn, compiled, memory_budget
from prfmap.engine.catalog import HRF_OPTIONS
from prfmap.engine.core_ops import tensor, to_numpy
from prfmap.engine.grid import grid_theta, polar_grid
from prfmap.engine.hrf import HRF, HRF_BASES
from prfmap.engine.models import PRFModel, floatx, free_mask, get_model
from prfmap.engine.participant_hrf import FEWEST_UNITS, HRF_PASSES, best_hrf, canonical_fallback, top_units
from prfmap.engine.problem import Problem, Units, make_problem, project_units
from prfmap.engine.result import FitResult, bounds_record, checked_fit, final_fit
from prfmap.engine.search import grid_search
from prfmap.engine.stimulus import Stimulus

__all__ = ["FitResult", "estimate_hrf", "fit_prf"]


def fit_prf(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    model: str = "gauss",
    refine: str = "lm",
    *,
    nuisance: np.ndarray | None = None,
    hrf: str | HRF = "canonical",
    fit_hrf: bool = False,
    grid: Mapping[str, np.ndarray] | None = None,
    mem_gb: float | None = None,
    dtype: str = "float32",
    seed: int = 0,
    fixed: Mapping[str, float] | None = None,
    max_iter: int | None = None,
    tol: float | None = None,
    learning_rate: float = 0.05,
    refine_r2_min: float = 0.0,
    slice_time_ref: float = 0.5,
    progress: ProgressFn | None = None,
    return_predictions: bool = False,
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
        prf_model,
        data,
        stim,
        tr,
        "vertex" if fit_hrf else hrf,
        nuisance,
        slice_time_ref,
        fixed,
        mem_gb=mem_gb,
        dtype=dtype,
        progress=progress,
    )
    refine_options = {
        "mem_gb": mem_gb,
        "max_iter": max_iter,
        "tol": tol,
        "learning_rate": learning_rate,
        "refine_r2_min": refine_r2_min,
        "progress": progress,
        "timings": timings,
    }
    u, corr, starts = stages.start(
        prob, refiner, polar_grid(stim) if grid is None else grid, fixed_values, units.y, stim, refine_options
    )
    u_start, bounds = u.copy(), prob.model.bounds(stim.scales)
    refined, flags = stages.refine(prob, refiner, u, units.y, corr, free, bounds, **refine_options)
    result = checked_fit(
        partial(
            final_fit,
            prob,
            units,
            shape=data.shape,
            mem_gb=mem_gb,
            timings=timings,
            with_predictions=return_predictions,
        ),
        u,
        u_start,
        units.index,
        bounds,
        free,
        flags,
        prob.model.names,
    )
    result.settings = _settings(
        prob,
        refine,
        {
            **refined,
            **starts,
            "fixed": {k: float(v) for k, v in fixed_values.items()},
            "slice_time_ref": slice_time_ref,
            "units": int(data.shape[0]),
            "units_fitted": int(units.index.size),
            "seed": int(seed),
            "bounds": bounds_record(prob.model, bounds, free),
        },
    )
    timings["total"] = time.perf_counter() - t_start
    return result


def estimate_hrf(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    *,
    nuisance: np.ndarray | None = None,
    slice_time_ref: float = 0.5,
    mem_gb: float | None = None,
    dtype: str = "float32",
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
    common = {
        "nuisance": nuisance,
        "slice_time_ref": slice_time_ref,
        "mem_gb": mem_gb,
        "dtype": dtype,
        "progress": progress,
    }
    top = top_units(_screen_r2(data, stim, tr, **common))
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
        neural = to_numpy(_neural(model, prob.dtype)(tensor(theta, prob.dtype), prob.stim))
        neural = neural[:, prob.frame_index]  # distinct frames to frames
        hrf = best_hrf(neural.astype(np.float64), units.y, q, tr, stim.run_lengths, slice_time_ref)[0]
    return hrf


def _screen_r2(data: np.ndarray, stim: Stimulus, tr: float, **common: Any) -> np.ndarray:
    """Every unit's r² with the Gaussian and SPM's HRF at its best grid point (NaN without signal).

    The grid correlation squared is the r² of the linear fit at that point, so (issue 18) no final
    fit is run for it; ``PRFMAP_REFERENCE=1`` runs ``fit_prf(refine="none")`` as before.
    """
    if frames.reference():
        return fit_prf(data, stim, tr, "gauss", "none", hrf="canonical", **common).r2
    data, mem_gb = _check_data(data, stim), memory_budget(common.pop("mem_gb"))
    model, progress = get_model("gauss"), common.pop("progress")
    prob, units, timings, _ = _setup(
        model,
        data,
        stim,
        tr,
        "canonical",
        common.pop("nuisance"),
        common.pop("slice_time_ref"),
        None,
        dtype=floatx(common.pop("dtype")),
        mem_gb=mem_gb,
        progress=progress,
    )
    _, corr = grid_search(prob, units.y, grid_theta(model, polar_grid(stim)), mem_gb, progress, timings)
    r2 = np.full(len(data), np.nan)
    r2[units.index] = corr**2
    return r2


def _neural(model: PRFModel, dtype: str) -> Any:
    """The compiled neural response (units, distinct frames) of natural parameters, without derivatives."""
    return compiled(("neural", model, dtype), lambda theta, stim: model.neural(theta, stim, False)[0])


def _setup(
    model: PRFModel,
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    hrf: str | HRF,
    nuisance: np.ndarray | None,
    slice_time_ref: float,
    fixed: Mapping[str, float] | None,
    *,
    dtype: str,
    **kwargs: Any,
) -> tuple[Problem, Units, dict[str, float], tuple[np.ndarray, dict]]:
    """The fit's problem (with the HRF resolved: estimated for ``participant``), its units, timings,
    and the mask of free parameters with the values of the fixed ones (:func:`free_mask`)."""
    t0 = time.perf_counter()
    hrf, n_bases = _resolve_hrf(
        hrf, data, stim, tr, nuisance=nuisance, slice_time_ref=slice_time_ref, dtype=dtype, **kwargs
    )
    prob = make_problem(model, stim, tr, n_bases, nuisance, dtype, slice_time_ref, hrf)
    return (
        prob,
        project_units(prob, data),
        {"setup": time.perf_counter() - t0},
        free_mask(model, fixed or {}),
    )


def _resolve_hrf(
    hrf: str | HRF, data: np.ndarray, stim: Stimulus, tr: float, **kwargs: Any
) -> tuple[HRF, int]:
    """The HRF a fit holds fixed (estimated for ``participant``) and its number of bases."""
    if isinstance(hrf, HRF):
        return hrf, 1
    if hrf not in HRF_OPTIONS:
        raise ValueError(f"unknown HRF option {hrf!r}; choose from {HRF_OPTIONS} or give an HRF")
    if hrf == "participant":
        return estimate_hrf(data, stim, tr, **kwargs), 1
    return HRF(option=hrf), 3 if hrf == "vertex" else 1


def _check_data(data: np.ndarray, stim: Stimulus) -> np.ndarray:
    """``data`` as float64 (units, frames), or ValueError when its frames do not match the stimulus."""
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != stim.n_frames:
        raise ValueError(f"data must be (units, {stim.n_frames}) to match the stimulus, got {data.shape}")
    return data


def describe_hrf(hrf: HRF, n_bases: int) -> str:
    """A sentence's worth on the HRF of a fit, for sidecars and the report's methods."""
    if n_bases == 3:
        return "SPM canonical + per-unit temporal and dispersion derivatives"
    if hrf.option == "participant" and hrf.units:
        return (
            f"participant-level two-gamma (peak delay {hrf.delay:g} s, dispersion {hrf.dispersion:g}, "
            f"maximum at {hrf.peak_s():g} s; estimated from the {hrf.units} best units)"
        )
    if hrf.option == "participant":
        return "SPM canonical (too few units with signal to estimate a participant-level HRF)"
    if hrf == HRF(option=hrf.option, units=hrf.units):
        return "SPM canonical"
    return (
        f"two-gamma (peak delay {hrf.delay:g} s, dispersion {hrf.dispersion:g}, "
        f"maximum at {hrf.peak_s():g} s)"
    )


def _settings(prob: Problem, refine: str, options: dict[str, Any]) -> dict[str, Any]:
    """The JSON-able record of a fit for sidecars: model, refiner, HRF, sizes, software and device."""
    backend = get_backend()
    return {
        "model": prob.model.name,
        "refine": refine,
        "hrf": describe_hrf(prob.hrf, prob.n_bases),
        "hrf_model": {**prob.hrf.describe(), "option": "vertex" if prob.n_bases == 3 else prob.hrf.option},
        "hrf_bases": list(HRF_BASES[: prob.n_bases]),
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
