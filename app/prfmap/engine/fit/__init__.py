"""``fit_prf``: grid search, seeds, refinement and the final fit over all units.

The stages live in :mod:`~prfmap.engine.fit.stages` (starts, refinement) and
:mod:`~prfmap.engine.fit.result` (the final linear fit, the status of each unit); ``predict`` in
:mod:`~prfmap.engine.prediction`; the participant-level HRF, which a fit is handed as an ``HRF``,
in :mod:`~prfmap.engine.estimate.hrf`. Each stage returns new values and its seconds: nothing a
stage returned is changed afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Any

import keras
import numpy as np

from prfmap.engine import catalog
from prfmap.engine.backend import compile_enabled, get_backend
from prfmap.engine.backend.ops import to_numpy
from prfmap.engine.batching import ProgressFn, memory_budget
from prfmap.engine.catalog import HRF_OPTIONS
from prfmap.engine.catalog.result import PER_KEY_UNCERTAINTY, Uncertainty
from prfmap.engine.catalog.settings import FitSettings
from prfmap.engine.fit import stages
from prfmap.engine.fit.delay_prior import DEFAULT_DELAY_SD, DelayPrior, delay_prior
from prfmap.engine.fit.grid import polar_grid
from prfmap.engine.fit.result import (
    GAUSSIAN_FIT,
    CheckedFit,
    FinalFit,
    FitResult,
    bounds_record,
    checked_fit,
    final_fit,
    keeping_gaussian,
)
from prfmap.engine.fit.sigma_prior import (
    SigmaPilot,
    SigmaPrior,
    SigmaProfileLimits,
    at_likelihood_sigma,
    floor_sigma_limit,
    posterior_sigma,
    posterior_uncertainty,
)
from prfmap.engine.fit.uncertainty import (
    CovarianceRecipe,
    covariance_recipe,
    doubtful_uncertainty,
    parameter_uncertainty,
)
from prfmap.engine.hrf import HRF
from prfmap.engine.models import InternalBounds, floatx, free_mask, get_model
from prfmap.engine.models.transforms import natural_values
from prfmap.engine.noise import OLS, BaseNoiseModel
from prfmap.engine.options import FitOptions
from prfmap.engine.problem import FitCache, Problem, Units, project_units, whitened, whitened_problem
from prfmap.engine.stimulus import Stimulus

__all__ = ["FitOptions", "FitResult", "Refinement", "check_data", "fit_prf", "refine_units"]


def fit_prf(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    *,
    options: FitOptions | None = None,
    nuisance: np.ndarray | None = None,
    progress: ProgressFn | None = None,
    cache: FitCache | None = None,
    **keywords: Any,
) -> FitResult:
    """Fit a pRF model to every unit: grid search, (seeds,) refinement, then the final linear fit.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        Preprocessed time courses (e.g. percent signal change).
    stim : Stimulus
        Apertures, one frame per TR.
    tr : float
        Repetition time in seconds.
    options : FitOptions, optional
        What the fit does (model, refiner, HRF, grid, budget...); the defaults when not given.
    nuisance : ndarray, shape (frames, k), optional
        Regressors that preprocessing removed (high-pass basis, confounds, run constants); data and
        every prediction are projected onto their orthogonal complement (a constant is always
        included).
    progress : callable, optional
        ``progress(stage, done, total)`` between batches.
    cache : FitCache, optional
        Problems and grid predictions shared with the caller's other fits of the same design (the
        chunks of a fit); by default the fit keeps its own.
    **keywords
        Any field of :class:`FitOptions` (``model=``, ``refine=``, ``hrf=``, ``mem_gb=``...), over
        ``options``.

    Returns
    -------
    FitResult
        Parameters, r², status, settings and timings of every unit.
    """
    opts = FitOptions.from_keywords(options, **keywords)
    cache = FitCache() if cache is None else cache
    t_start = time.perf_counter()
    data = check_data(data, stim)
    fit = refine_units(data, stim, tr, opts, nuisance=nuisance, progress=progress, cache=cache)
    prob, units, begun, refined = fit.prob, fit.units, fit.begun, fit.refined
    bounds, free, mem_gb, timings = fit.bounds, fit.free, fit.mem_gb, dict(fit.timings)
    finals = [
        partial(
            final_fit, p, units, shape=data.shape, mem_gb=mem_gb, with_predictions=opts.return_predictions
        )
        for p in fit.problems
    ]
    final = finals[0] if len(finals) == 1 else _final_by_hrf(finals, fit.hrf, units.index)
    if begun.seeded is not None and fit.gauss_start is not None:
        final = keeping_gaussian(final, prob.model, units.index, ~begun.seeded, fit.gauss_start)
    checked = checked_fit(
        final,
        fit.u,
        begun.u,
        units.index,
        bounds,
        free,
        refined.flags,
        prob.model.params,
    )
    params = checked.params
    if fit.delays is not None:
        params = {**params, "hrf_delay": _unit_delays(fit, checked)}
    uncertainty, status = None, checked.status
    if opts.uncertainty:
        uncertainty, uncertain = _uncertainty_stage(fit, checked, opts, stim, tr, nuisance)
        status = np.where(uncertain, status + catalog.STATUS_BITS["uncertain"], status)
    settings = _settings(
        prob,
        opts,
        refined.record,
        begun,
        fixed={k: float(v) for k, v in fit.fixed_values.items()},
        units=(int(data.shape[0]), int(units.index.size)),
        bounds=bounds_record(prob.model, bounds, free),
        noise=fit.noise,
    )
    if fit.sigma_prior is not None:
        settings = replace(settings, sigma_prior=fit.sigma_prior.describe())
    if fit.delays is not None:
        refined_units = ~refined.flags["grid_only"]
        residual = fit.delay_variance[refined_units] if fit.delay_variance is not None else np.zeros(0)
        settings = replace(settings, delay_prior=fit.delays.describe(fit.hrf[refined_units], residual))
    timings |= {**begun.timings, "refine": refined.seconds, "linear": checked.seconds}
    if uncertainty is not None:
        timings["uncertainty"] = uncertainty.seconds
    timings["total"] = time.perf_counter() - t_start
    return FitResult(
        prob.model.name,
        params,
        checked.r2,
        checked.loss,
        timings,
        settings,
        checked.predictions,
        status,
        checked.flags,
        uncertainty,
    )


def _uncertainty_stage(
    fit: Refinement,
    checked: CheckedFit,
    opts: FitOptions,
    stim: Stimulus,
    tr: float,
    nuisance: np.ndarray | None,
) -> tuple[Uncertainty, np.ndarray]:
    """The standard errors of a fit's refined units at their maximum-likelihood parameters, and its doubt.

    σ's floor units get their profile-likelihood upper limit (:func:`floor_sigma_limit`); under a
    prior, σ's error and interval are then the posterior's (:func:`posterior_uncertainty`).

    Parameters
    ----------
    fit : Refinement
        The fit up to its refinement.
    checked : CheckedFit
        Its final linear fit (:func:`checked_fit`).
    opts : FitOptions
        The fit's options.
    stim, tr, nuisance
        As :func:`fit_prf`'s.

    Returns
    -------
    uncertainty : Uncertainty
    uncertain : ndarray of bool, shape (units,)
        The ``uncertain`` status bit (:func:`doubtful_uncertainty`).
    """
    prob, units, refined, bounds = fit.prob, fit.units, fit.refined, fit.bounds
    at_floor = (catalog.status_codes(checked.status)[units.index] & catalog.STATUS_BITS["size_at_floor"]) > 0
    u_likelihood = at_likelihood_sigma(checked.u, fit.likelihood_u, fit.u, prob.model)
    k = prob.model.names.index("sigma") if "sigma" in prob.model.names else None
    if fit.sigma_prior is not None:  # the maximum-likelihood σ on its floor: an upper limit
        at_floor |= u_likelihood[:, k] <= bounds.lower[k] + 1e-6
    refined_units = ~refined.flags["grid_only"]  # grid-only units: below --refine-r2-min, no signal
    known = None if fit.profiled is None else fit.profiled.upper_one_sided
    # the centre was estimated under the fit's own HRF: its errors are that HRF's at every unit, σ's
    # and the amplitude's those of the unit's own delay
    moved = fit.hrf != 0
    u_own = u_likelihood.copy()
    if k is not None and moved.any():
        kept = moved & (u_likelihood[:, k] == fit.likelihood_u[:, k])  # the refinement was kept
        u_own[kept, k] = refined.u[kept, k]
        at_floor = np.where(moved, u_own[:, k] <= bounds.lower[k] + 1e-6, at_floor)
        if known is not None:  # the fit HRF's limit where the profiled refinement was kept
            known = np.where(moved, np.where(kept, fit.profiled.fit_hrf_upper_one_sided, np.nan), known)

    def recipe(plain: Problem) -> CovarianceRecipe:
        alternatives = hrf_alternatives(plain, stim, tr, nuisance, opts.slice_time_ref, fit.whitening)
        scales = _delay_scales(fit, alternatives)
        return covariance_recipe(opts.covariance, stim.run_lengths, alternatives, scales, k)

    parts = [
        (
            _hrf_uncertainty(fit, 0, k, u_own, refined_units, at_floor, known, recipe),
            units.index[refined_units],
            None,
        )
    ]
    for h in range(1, len(fit.problems)):
        group = refined_units & (fit.hrf == h)
        if group.any():
            floor = (u_likelihood[:, k] <= bounds.lower[k] + 1e-6) & group
            known_own = None if fit.profiled is None else fit.profiled.upper_one_sided  # own delay's
            part = _hrf_uncertainty(fit, h, k, u_likelihood, group, floor, known_own, recipe)
            parts.append((part, units.index[group], OWN_DELAY_ERRORS))
    uncertainty = _merged_uncertainty(parts)
    uncertain = doubtful_uncertainty(uncertainty, checked.params, stim.scales["radius"])
    if fit.sigma_prior is not None:
        likelihood_sigma = np.array(checked.params["sigma"], dtype=np.float64)
        likelihood_sigma[units.index] = natural_values(prob.model.params, u_likelihood)[:, k]
        uncertainty = posterior_uncertainty(
            uncertainty,
            checked.params["sigma"],
            fit.sigma_prior,
            likelihood_sigma,
        )
    return uncertainty, uncertain


def _unit_delays(fit: Refinement, checked: CheckedFit) -> np.ndarray:
    """Each unit's HRF peak delay (s), NaN where it has no fit."""
    delays = np.array([p.hrf.delay for p in fit.problems])
    out = np.full(fit.units.total, np.nan)
    out[fit.units.index] = delays[fit.hrf]
    out[~np.isfinite(checked.params["x"])] = np.nan
    return out


def _delay_scales(fit: Refinement, alternatives: list[tuple[np.ndarray, float]]) -> np.ndarray | None:
    """Each unit's factor on the variance the HRF alternatives add to σ: its delay's remaining share.

    σ is re-estimated under the unit's delay, the centre is not: only σ's share is scaled. The first
    two alternatives are the delay's (:data:`HRF_VARIABILITY`); None without a delay prior.
    """
    if fit.delays is None or fit.delay_variance is None or not alternatives:
        return None
    scales = np.ones((len(fit.u), len(alternatives)))
    scales[:, :2] = (fit.delay_variance / fit.delays.sd**2)[:, None]
    return scales


def _final_by_hrf(
    finals: list[Callable[..., FinalFit]], hrf: np.ndarray, index: np.ndarray
) -> Callable[..., FinalFit]:
    """One ``final(u, rows=None)`` whose units each take the final fit of their own HRF.

    Parameters
    ----------
    finals : list of callable
        :func:`final_fit` bound to each HRF's problem.
    hrf : ndarray of int, shape (len(index),)
        Each unit's HRF, an index of ``finals``.
    index : ndarray of int
        The units of the data the rows of ``u`` are.

    Returns
    -------
    callable
    """

    def run(u: np.ndarray, rows: np.ndarray | None = None) -> FinalFit:
        rows = np.arange(len(u)) if rows is None else np.asarray(rows)
        parts = [
            (final(u, rows=rows[hrf[rows] == h]), index[rows[hrf[rows] == h]])
            for h, final in enumerate(finals)
            if (hrf[rows] == h).any()
        ]
        if not parts:
            return finals[0](u, rows=rows)
        merged, _ = parts[0]
        for part, at in parts[1:]:
            for key, values in merged.params.items():
                values[at] = part.params[key][at]
            for key, values in merged.flags.items():
                values[at] = part.flags[key][at]
            merged.r2[at], merged.loss[at] = part.r2[at], part.loss[at]
            if merged.predictions is not None:
                merged.predictions[at] = part.predictions[at]
        return replace(merged, seconds=sum(part.seconds for part, _ in parts))

    return run


OWN_DELAY_ERRORS = ("sigma", "amplitude")
"""The standard errors a unit under another delay than the fit's (a delay prior) takes from that
delay's HRF: what is estimated under it. The centre's (x, y and what derives from them) stay the fit
HRF's, under which it was estimated."""


def _hrf_uncertainty(
    fit: Refinement,
    h: int,
    k: int | None,
    u: np.ndarray,
    which: np.ndarray,
    at_floor: np.ndarray,
    known: np.ndarray | None,
    recipe: Callable[[Problem], CovarianceRecipe],
) -> Uncertainty:
    """The standard errors of the units ``which`` at ``u`` under the fit's HRF ``h`` (its problems' index).

    ``k`` is σ's column of ``u`` (None for a model without σ). σ's floor units (``at_floor``) get
    their profile-likelihood upper limit (``known`` where already computed, NaN elsewhere);
    ``recipe(problem)`` is the covariance's recipe under that HRF's (unwhitened) problem.
    """
    gls = fit.gls_problems[h]
    floor_upper = None
    if k is not None:
        limits = _sigma_limits(fit.bounds, k)
        floor_upper = floor_sigma_limit(gls, fit.gls_units, u, at_floor & which, k, limits, fit.mem_gb, known)
    return parameter_uncertainty(
        gls,
        fit.gls_units,
        u,
        fit.free,
        # another delay's units take only σ's and the amplitude's errors from it: no centre path
        replace(recipe(fit.problems[h]), centre_path=h == 0),
        mem_gb=fit.mem_gb,
        which=which,
        floor_upper=floor_upper,
    )


def _merged_uncertainty(parts: list[tuple[Uncertainty, np.ndarray, tuple[str, ...] | None]]) -> Uncertainty:
    """The standard errors of each part at its own units (data rows), as one ``Uncertainty``.

    Parameters
    ----------
    parts : list of (Uncertainty, ndarray of int, tuple of str or None)
        Each HRF's standard errors, the units they are for, and the keys taken from it (None: all;
        the first part's, all units').

    Returns
    -------
    Uncertainty
    """
    merged, _, _ = parts[0]
    for part, at, keys in parts[1:]:
        for field in PER_KEY_UNCERTAINTY:
            mine, theirs = getattr(merged, field), getattr(part, field)
            for key, values in theirs.items():
                if keys is None or key in keys:
                    mine.setdefault(key, np.full(len(values), np.nan))[at] = values[at]
    return replace(merged, seconds=sum(part.seconds for part, _, _ in parts))


def _sigma_limits(bounds: InternalBounds, k: int) -> tuple[float, float]:
    """σ's internal bounds (log σ), column ``k`` of ``bounds``.

    Parameters
    ----------
    bounds : InternalBounds
    k : int

    Returns
    -------
    (float, float)
    """
    return float(bounds.lower[k]), float(bounds.upper[k])


@dataclass(frozen=True)
class Refinement:
    """A fit's units after their start (grid search or seeds) and refinement, before the final linear fit.

    Attributes
    ----------
    prob, units : Problem, Units
        The fit's problem and its projected units.
    gls_prob, gls_units : Problem, Units
        The same whitened by the noise model (the refinement's; ``prob`` and ``units`` without one).
    begun : stages.Start
        The starts.
    refined : stages.Refined
        The refinement; its ``u`` are the maximum-likelihood parameters.
    u : ndarray, shape (units, K)
        The refined parameters, σ at its posterior mode where there is a prior.
    likelihood_u : ndarray, shape (units, K)
        The same at σ's maximum-likelihood value under each unit's HRF.
    problems, gls_problems : list of Problem
        ``prob`` and ``gls_prob``, then the same under each other HRF a unit may take (the delay
        prior's).
    hrf : ndarray of int, shape (units,)
        Each unit's HRF, an index of ``problems`` (all 0 without a delay prior).
    delays : DelayPrior or None
        The prior on each unit's HRF delay (``FitOptions.delay_prior``), None without one.
    delay_variance : ndarray, shape (units,) or None
        What is left of each unit's delay's variance under it
        (:meth:`~prfmap.engine.fit.delay_prior.DelayPrior.residual_variance`), s².
    sigma_prior : SigmaPrior or None
        The prior on log σ used (``FitOptions.sigma_prior``), None without one.
    profiled : SigmaProfileLimits or None
        σ's profile-likelihood limits of the profiled units at their maximum-likelihood σ
        (:func:`posterior_sigma`).
    bounds : InternalBounds
        The internal bounds.
    free : ndarray of bool
        The parameters refined.
    fixed_values : dict
        The fixed parameters' values.
    noise : BaseNoiseModel
        The noise model.
    whitening : ndarray or None
        Its whitening matrix.
    gauss_start : dict or None
        The Gaussian fit a non-Gaussian model's units start from, at the projected units.
    mem_gb : float
        The engine's memory budget.
    timings : dict
        Seconds of the stages so far.
    """

    prob: Problem
    units: Units
    gls_prob: Problem
    gls_units: Units
    begun: stages.Start
    refined: stages.Refined
    u: np.ndarray
    likelihood_u: np.ndarray
    problems: list[Problem]
    gls_problems: list[Problem]
    hrf: np.ndarray
    delays: DelayPrior | None
    delay_variance: np.ndarray | None
    sigma_prior: SigmaPrior | None
    profiled: SigmaProfileLimits | None
    bounds: InternalBounds
    free: np.ndarray
    fixed_values: dict[str, float]
    noise: BaseNoiseModel
    whitening: np.ndarray | None
    gauss_start: dict[str, np.ndarray] | None
    mem_gb: float
    timings: dict[str, float]


def refine_units(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    opts: FitOptions,
    *,
    nuisance: np.ndarray | None,
    progress: ProgressFn | None,
    cache: FitCache,
) -> Refinement:
    """:func:`fit_prf`'s stages up to its final linear fit: problem, starts, refinement, σ's posterior.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        Time courses, float64, checked against the stimulus.
    stim, tr, nuisance, progress, cache
        As :func:`fit_prf`'s.
    opts : FitOptions
        The fit's options.

    Returns
    -------
    Refinement
    """
    t_start = time.perf_counter()
    prf_model, refiner = get_model(opts.model), catalog.get_refiner(opts.refine)
    mem_gb, dtype = memory_budget(opts.mem_gb), floatx(opts.dtype)
    hrf = resolve_hrf(opts.hrf)
    n_bases = len(hrf.bases)
    prob = cache.problem(prf_model, stim, tr, n_bases, nuisance, dtype, opts.slice_time_ref, hrf)
    pilot = opts.sigma_prior if isinstance(opts.sigma_prior, SigmaPilot) else None
    own = len(data)
    if pilot is not None:  # the other chunks' pilot units go along until the prior is estimated
        if opts.gauss_start is not None:
            raise ValueError("a sigma prior's pilot (SigmaPilot) is for a fit without gauss_start")
        data = np.concatenate([data, check_data(pilot.extra, stim)])
        opts = replace(opts, sigma_prior="eccentricity")
    units = project_units(prob, data)
    free, fixed_values = free_mask(prf_model, opts.fixed or {})
    timings = {"setup": time.perf_counter() - t_start}
    grid = polar_grid(stim) if opts.grid is None else opts.grid
    plan = stages.RefinePlan(
        refiner, mem_gb, opts.max_iter, opts.tol, opts.refine_options, opts.refine_r2_min
    )
    gauss_start = None
    if opts.gauss_start is not None:
        gauss_start = {
            k: np.asarray(v)[units.index]
            for k, v in opts.gauss_start.items()
            if k in (*GAUSSIAN_FIT, *catalog.HRF_PARAMETERS, "predictions")
        }
    begun = stages.start(prob, plan, grid, fixed_values, units.y, stim, progress, gauss_start)
    bounds = prob.model.bounds(stim.scales)
    noise = resolve_noise(opts.noise)
    gls_prob, gls_units = prob, units
    whitening = noise.whitening(stim.run_lengths)
    if whitening is not None:
        gls_prob, gls_units = whitened(prob, units, whitening, repr(noise))
    refined = stages.refine(gls_prob, plan, begun.u, gls_units.y, begun.corr, free, bounds, progress)
    refined_u, likelihood_u, sigma_prior, profiled = refined.u, refined.u, None, None
    problems, gls_problems, delays, delay_variance = [prob], [gls_prob], None, None
    hrf_index = np.zeros(len(refined.u), dtype=int)
    profiled_at_all = "sigma" in prob.model.names and opts.refine != "none"
    if profiled_at_all and n_bases == 1 and opts.delay_prior != "none":
        delays = delay_prior(prob.hrf)
        for moved in delays.hrfs[1:]:
            problems.append(
                cache.problem(prf_model, stim, tr, 1, nuisance, dtype, opts.slice_time_ref, moved)
            )
            gls = (
                problems[-1] if whitening is None else whitened_problem(problems[-1], whitening, repr(noise))
            )
            gls_problems.append(gls)
    if profiled_at_all and (opts.sigma_prior != "none" or delays is not None):
        t0 = time.perf_counter()
        k = prob.model.names.index("sigma")
        which = ~refined.flags["grid_only"]
        penalties = np.zeros(1) if delays is None else delays.penalties
        option = opts.sigma_prior
        if pilot is not None:  # the prior from the pilot units' profiles only
            option = np.isin(units.index, np.concatenate([pilot.rows, own + np.arange(len(pilot.extra))]))
        posterior = posterior_sigma(
            gls_problems,
            penalties,
            gls_units,
            refined.u,
            which,
            _sigma_limits(bounds, k),
            option,
            mem_gb,
        )
        refined_u, likelihood_u, sigma_prior = posterior.u, posterior.likelihood_u, posterior.prior
        profiled, hrf_index = posterior.profiled, posterior.hrf
        if delays is not None:
            delay_variance = delays.residual_variance(posterior.hrf_weights)
        timings["sigma_prior"] = time.perf_counter() - t0
    fit = Refinement(
        prob,
        units,
        gls_prob,
        gls_units,
        begun,
        refined,
        refined_u,
        likelihood_u,
        problems,
        gls_problems,
        hrf_index,
        delays,
        delay_variance,
        sigma_prior,
        profiled,
        bounds,
        free,
        fixed_values,
        noise,
        whitening,
        gauss_start,
        mem_gb,
        timings,
    )
    if pilot is None:
        return fit
    pilot.found(sigma_prior)
    return _without_pilot(fit, own)


def _without_pilot(fit: Refinement, own: int) -> Refinement:
    """``fit`` without the other chunks' pilot units a :class:`SigmaPilot` brought along.

    They are the data's rows from ``own`` on; what follows (the final fit, standard errors,
    settings) is the chunk's own.
    """
    keep = fit.units.index < own
    # the pilot's rows follow the chunk's and the units' index is sorted: the chunk's time courses
    # are a prefix, taken as views (copying them took 0.2 s of the demo participant's run)
    prefix = slice(0, int(keep.sum()))

    def kept(units: Units) -> Units:
        return Units(units.index[prefix], units.y[prefix], units.raw[prefix], own)

    begun, refined = fit.begun, fit.refined
    seeded = None if begun.seeded is None else begun.seeded[keep]
    flags = {name: values[keep] for name, values in refined.flags.items()}
    record = dict(refined.record)  # the solver's rounds and steps were taken with the pilot units
    if record["units_refined"]:
        record["units_refined"] = int((~flags["grid_only"]).sum())
    profiled = fit.profiled
    if profiled is not None:
        profiled = SigmaProfileLimits(*(getattr(profiled, f.name)[keep] for f in fields(profiled)))
    return replace(
        fit,
        units=kept(fit.units),
        gls_units=kept(fit.gls_units),
        begun=replace(begun, u=begun.u[keep], corr=begun.corr[keep], seeded=seeded),
        refined=replace(refined, u=refined.u[keep], flags=flags, record=record),
        u=fit.u[keep],
        likelihood_u=fit.likelihood_u[keep],
        hrf=fit.hrf[keep],
        delay_variance=None if fit.delay_variance is None else fit.delay_variance[keep],
        profiled=profiled,
    )


HRF_VARIABILITY = (("delay", DEFAULT_DELAY_SD), ("dispersion", 0.1))
"""HRF properties that differ between units around a fit's HRF, with their between-unit standard
deviations: the peak delay (s; the participant HRF's own estimate, ``HRF.delay_sd``, where it has
one) and the dispersion. The standard errors include what an HRF off by that much moves the
estimates by (:class:`~prfmap.engine.fit.uncertainty.CovarianceRecipe`); docs/validation.md,
"Uncertainty"."""


def hrf_alternatives(
    prob: Problem,
    stim: Stimulus,
    tr: float,
    nuisance: np.ndarray | None,
    slice_time_ref: float,
    whitening: np.ndarray | None,
) -> list[tuple[np.ndarray, float]]:
    """The sigma points of the HRF's variability: its HRF matrices with each property moved by ± its SD.

    Each :data:`HRF_VARIABILITY` property gives two points of weight ½ (a two-point rule, exact for
    the mean and variance of a symmetric spread through a linear response; a finite move also keeps
    the asymmetry of the estimates' response to it: a later HRF enlarges σ more than an earlier one
    shrinks it). None with per-unit derivative weights (``hrf="vertex"``), which fit the HRF's
    variability.

    Parameters
    ----------
    prob : Problem
        The fit's (unwhitened) problem.
    stim : Stimulus
        Its apertures.
    tr : float
        Repetition time, s.
    nuisance : ndarray, optional
        The fit's nuisance regressors.
    slice_time_ref : float
        As the fit's.
    whitening : ndarray, optional
        The noise model's whitening matrix.

    Returns
    -------
    list of (ndarray, float)
        Matrices (bases, distinct, frames) and weights.
    """
    if prob.n_bases != 1:
        return []
    problems = FitCache() if prob.cache is None else prob.cache
    out = []
    for name, default in HRF_VARIABILITY:
        sd = prob.hrf.delay_sd if name == "delay" and prob.hrf.delay_sd > 0 else default
        for sign in (1.0, -1.0):
            moved = replace(prob.hrf, **{name: getattr(prob.hrf, name) + sign * sd})
            alt = problems.problem(prob.model, stim, tr, 1, nuisance, prob.dtype, slice_time_ref, moved)
            matrices = np.asarray(to_numpy(alt.hrf_t), dtype=np.float64)
            out.append((matrices if whitening is None else matrices @ whitening.T, 0.5))
    return out


def resolve_noise(noise: str | BaseNoiseModel) -> BaseNoiseModel:
    """The noise model a fit whitens with.

    Parameters
    ----------
    noise : {"ols"} or BaseNoiseModel
        A catalogue entry with a class (``ar1``) is estimated before the fit, from all its units:
        :func:`prfmap.engine.estimate_noise`.

    Returns
    -------
    BaseNoiseModel
    """
    if isinstance(noise, BaseNoiseModel):
        return noise
    if catalog.get_noise_model(noise).implementation is None:  # an unknown option's error
        return OLS
    raise ValueError(
        f"noise={noise!r} is estimated before the fit: noise = estimate_noise(data, stim, tr, {noise!r}, "
        "...), then fit_prf(..., noise=noise)"
    )


def resolve_hrf(hrf: str | HRF) -> HRF:
    """The HRF a fit holds fixed (its ``bases``: with ``vertex``, its two derivatives too).

    Parameters
    ----------
    hrf : {"canonical", "vertex"} or HRF
        ``participant`` is not resolved here: estimate it (:func:`prfmap.engine.estimate_hrf`) and
        hand the fit the ``HRF`` it returns.

    Returns
    -------
    HRF
    """
    if isinstance(hrf, HRF):
        return hrf
    if hrf == "participant":
        raise ValueError(
            "hrf='participant' is estimated before the fit: hrf = estimate_hrf(data, stim, tr, ...), "
            "then fit_prf(..., hrf=hrf)"
        )
    if hrf not in HRF_OPTIONS:
        raise ValueError(f"unknown HRF option {hrf!r}; choose from {HRF_OPTIONS} or give an HRF")
    return HRF(option=hrf)


def check_data(data: np.ndarray, stim: Stimulus) -> np.ndarray:
    """``data`` as float64 (units, frames).

    Parameters
    ----------
    data : array-like
        Time courses.
    stim : Stimulus
        Their apertures.

    Returns
    -------
    ndarray, shape (units, frames)

    Raises
    ------
    ValueError
        When its frames do not match the stimulus's.
    """
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != stim.n_frames:
        raise ValueError(f"data must be (units, {stim.n_frames}) to match the stimulus, got {data.shape}")
    return data


def describe_hrf(hrf: HRF) -> str:
    """A sentence's worth on the HRF of a fit, for sidecars and the report's methods.

    Parameters
    ----------
    hrf : HRF
        The fit's response (``vertex``: SPM's, with per-unit derivative weights).

    Returns
    -------
    str
    """
    if hrf.option == "vertex":
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


def _settings(
    prob: Problem,
    opts: FitOptions,
    refined: dict[str, Any],
    begun: stages.Start,
    *,
    fixed: dict[str, float],
    units: tuple[int, int],
    bounds: dict[str, Any],
    noise: BaseNoiseModel,
) -> FitSettings:
    """The record of a fit for sidecars: model, refiner, HRF, sizes, software and device."""
    backend = get_backend()
    return FitSettings(
        model=prob.model.name,
        refine=opts.refine,
        hrf=describe_hrf(prob.hrf),
        hrf_model=prob.hrf.describe(),
        hrf_bases=prob.hrf.bases,
        slice_time_ref=opts.slice_time_ref,
        grid_points=begun.grid_points,
        seed_candidates=begun.seed_candidates,
        refine_r2_min=refined["refine_r2_min"],
        units_refined=refined["units_refined"],
        iterations=refined["iterations"],
        unit_iterations=refined["unit_iterations"],
        pixels=int(prob.pixels),
        max_iter=refined["max_iter"],
        fixed=fixed,
        dtype=prob.dtype,
        units=units[0],
        units_fitted=units[1],
        backend=backend.NAME,
        backend_version=backend.version(),
        keras_version=keras.__version__,
        device=backend.device(),
        compiled=compile_enabled(),
        seed=int(opts.seed),
        bounds=bounds,
        noise_model=noise.describe(),
        covariance=opts.covariance if opts.uncertainty else None,
    )
