"""The participant-level HRF: the two-gamma delay that best predicts a participant's best units.

:func:`estimate_hrf` fits every unit with the canonical HRF (grid and linear fit),
keeps the best units by r² (:func:`top_units`), fits them with per-unit temporal and dispersion
derivative weights, and then searches, with those units' pRFs held fixed, the delay of one
two-gamma response (:class:`prfmap.engine.hrf.HRF`, SPM's shape otherwise) that explains most of
their variance (:func:`best_hrf`). Every unit is then fitted with that response held fixed: one
parameter per participant estimated from up to 200 units, where per-unit derivative weights trade
off with each unit's pRF size.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import numpy as np
from scipy.optimize import minimize_scalar
from scipy.signal import lfilter

from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import ProgressFn, compiled, memory_budget
from prfmap.engine.fit import fit_prf
from prfmap.engine.fit.grid import grid_theta, polar_grid
from prfmap.engine.fit.search import grid_search
from prfmap.engine.hrf import DELAY, DISPERSION, HRF, hrf_kernels
from prfmap.engine.models import PRFModel, floatx, get_model
from prfmap.engine.options import FitOptions
from prfmap.engine.problem import FitCache, make_problem, project_units
from prfmap.engine.stimulus import Stimulus, StimulusTensors

TOP_FRACTION = 0.05
"""Share of the units (with a finite fit) an estimate uses, clipped to [MIN_UNITS, MAX_UNITS]."""
MIN_UNITS = 50
MAX_UNITS = 200
MIN_R2 = 0.1
"""A unit whose canonical fit explains less of its variance does not inform the HRF."""
FEWEST_UNITS = 20
"""With fewer informative units the participant keeps the canonical HRF."""
SPREAD_UNITS = 300
"""Units the between-unit spread of the delay is estimated from (:func:`delay_spread_of`)."""
OUTLIER_MADS = 6.0
"""Delay offsets further from their median, in robust SDs, are fits gone astray
(:func:`spread_beyond_errors`)."""
HRF_PASSES = 2
"""Rounds of refitting the best units' pRFs (with derivative weights, then with the HRF found) and
searching the HRF again with them held fixed."""
DELAYS = np.arange(3.0, 10.0001, 0.25)
"""The coarse search of the delay; a finer one (0.05 s) follows around its best point."""


def top_units(
    r2: np.ndarray,
    fraction: float = TOP_FRACTION,
    min_units: int = MIN_UNITS,
    max_units: int = MAX_UNITS,
    min_r2: float = MIN_R2,
) -> np.ndarray:
    """Indices of the units an HRF estimate uses, best first.

    Parameters
    ----------
    r2 : ndarray
        (units,) variance explained by each unit's canonical fit; NaN where it has none.
    fraction, min_units, max_units : float, int, int
        The best ``fraction`` of the units with a finite ``r2``, at least ``min_units`` and at
        most ``max_units`` of them.
    min_r2 : float
        Units below it are never used, however few remain.

    Returns
    -------
    ndarray of int
    """
    r2 = np.asarray(r2, dtype=np.float64)
    finite = np.isfinite(r2)
    wanted = int(np.clip(round(fraction * finite.sum()), min_units, max_units))
    usable = np.flatnonzero(finite & (r2 >= min_r2))
    return usable[np.argsort(-r2[usable], kind="stable")][:wanted]


def explained(
    neural: np.ndarray,
    y: np.ndarray,
    q: np.ndarray,
    tr: float,
    run_lengths: Sequence[int],
    slice_time_ref: float,
    hrf: HRF,
) -> float:
    """Mean over units of :func:`unit_explained`.

    Parameters
    ----------
    neural, y, q, tr, run_lengths, slice_time_ref, hrf
        As :func:`unit_explained`.

    Returns
    -------
    float
    """
    return float(np.mean(unit_explained(neural, y, q, tr, run_lengths, slice_time_ref, hrf)))


def unit_explained(
    neural: np.ndarray,
    y: np.ndarray,
    q: np.ndarray,
    tr: float,
    run_lengths: Sequence[int],
    slice_time_ref: float,
    hrf: HRF,
) -> np.ndarray:
    """Mean over units of the variance of ``y`` that ``neural`` convolved with ``hrf`` explains.

    Parameters
    ----------
    neural : ndarray
        (units, frames) neural time courses of fixed pRFs.
    y : ndarray
        (units, frames) data, already projected off the nuisance basis ``q`` (frames, k).
    tr, run_lengths, slice_time_ref : float, sequence of int, float
        The acquisition; the convolution restarts at each run.
    hrf : HRF

    Returns
    -------
    ndarray, shape (units,)
        ``max(c, 0)²`` with ``c`` each unit's correlation with its projected prediction.
    """
    pred = _by_run(neural, hrf_kernels(tr, 1, slice_time_ref, hrf=hrf)[0], np.cumsum([0, *run_lengths]))
    pred -= (pred @ q) @ q.T
    cross = np.sum(pred * y, axis=1)
    norms = np.sqrt(np.sum(pred**2, axis=1) * np.sum(y**2, axis=1))
    corr = np.where(norms > 0, cross / np.maximum(norms, 1e-300), 0.0)
    return np.maximum(corr, 0.0) ** 2


def best_hrf(
    neural: np.ndarray,
    y: np.ndarray,
    q: np.ndarray,
    tr: float,
    run_lengths: Sequence[int],
    slice_time_ref: float,
) -> tuple[HRF, float]:
    """The delay that explains most of the units' variance, and that mean r².

    A coarse grid (:data:`DELAYS`), then a fine one (0.05 s) around its best point; arguments as
    :func:`explained`. The dispersion stays SPM's: with the pRFs held fixed it trades off with their
    sizes (on noiseless data delayed by 1.5 s, a joint search found dispersion 0.88 for 1.0 and
    biased every σ by +0.05°), while the delay does not.

    Parameters
    ----------
    neural : ndarray, shape (units, frames)
        Neural time courses of the units' fixed pRFs.
    y : ndarray, shape (units, frames)
        Their data, projected off ``q``.
    q : ndarray, shape (frames, k)
        The nuisance basis.
    tr : float
        Repetition time, s.
    run_lengths : sequence of int
        Frames per run (the convolution restarts at each).
    slice_time_ref : float
        Where in each TR the volumes sample the signal.

    Returns
    -------
    hrf : HRF
        ``option`` "participant", ``units`` the units used.
    score : float
        Mean r² it explains.
    """

    def search(delays: np.ndarray) -> tuple[float, float]:
        return max(
            (explained(neural, y, q, tr, run_lengths, slice_time_ref, HRF(d, DISPERSION)), d)
            for d in delays
            if d > 1.0
        )

    _, delay = search(DELAYS)
    score, delay = search(delay + np.arange(-0.2, 0.2001, 0.05))
    return HRF(float(round(delay, 4)), DISPERSION, "participant", len(y)), score


def canonical_fallback() -> HRF:
    """The participant HRF when too few units inform it: the canonical one, with no units.

    Returns
    -------
    HRF
    """
    return HRF(DELAY, DISPERSION, "participant", 0)


def screen_r2(data: np.ndarray, stim: Stimulus, tr: float, **common: Any) -> np.ndarray:
    """Every unit's r² with the Gaussian and SPM's HRF at its best grid point (NaN without signal).

    The grid correlation squared is the r² of the linear fit at that point, so (issue 18) no final
    fit is run for it.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        Preprocessed time courses of every unit.
    stim : Stimulus
        Apertures, one frame per TR.
    tr : float
        Repetition time in seconds.
    **common
        ``nuisance``, ``slice_time_ref``, ``mem_gb``, ``dtype``, ``progress`` and ``cache``, as
        :func:`estimate_hrf`.

    Returns
    -------
    ndarray, shape (units,)
    """
    model, mem_gb = get_model("gauss"), memory_budget(common["mem_gb"])
    build = make_problem if common.get("cache") is None else common["cache"].problem
    prob = build(model, stim, tr, 1, common["nuisance"], floatx(common["dtype"]), common["slice_time_ref"])
    units = project_units(prob, np.asarray(data, dtype=np.float64))
    _, corr, _ = grid_search(prob, units.y, grid_theta(model, polar_grid(stim)), mem_gb, common["progress"])
    r2 = np.full(len(data), np.nan)
    r2[units.index] = corr**2
    return r2


def _neural(model: PRFModel, theta: Any, stim: StimulusTensors) -> Any:
    """The neural response (units, distinct frames) of natural parameters, without derivatives."""
    return model.neural(theta, stim, False)[0]


def _neural_and_derivatives(model: PRFModel, theta: Any, stim: StimulusTensors) -> Any:
    """The neural response and its derivatives in the natural parameters (1 + P, units, distinct)."""
    return model.neural(theta, stim, True)


HRF_FIT_OPTIONS = ("slice_time_ref", "mem_gb", "dtype")
"""The options of :func:`estimate_hrf`'s fits it takes (the rest are its own: the Gaussian, SPM's
response and its derivatives)."""


def estimate_hrf(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    *,
    nuisance: np.ndarray | None = None,
    progress: ProgressFn | None = None,
    spread: bool = True,
    cache: FitCache | None = None,
    **fit_options: Any,
) -> HRF:
    """One HRF for all units of a participant, estimated from its best units.

    Every unit is fitted with the canonical HRF (Gaussian pRF, grid and linear fit); the best of
    them by r² (:func:`top_units`: 5 %, 50 to 200 units, r² ≥ 0.1) are refitted with per-unit HRF
    derivative weights, and with their pRFs held fixed, the delay of one two-gamma response (SPM's
    shape otherwise) that explains most of their variance is searched (:func:`best_hrf`); a second
    pass refits them with that response and searches again. With fewer than 20 such units the
    canonical HRF is returned (``units`` 0). The fits of the participant are then handed this HRF
    (``fit_prf(..., hrf=hrf)``): it is one stage before them, not part of them.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        Preprocessed time courses of every unit.
    stim : Stimulus
        Apertures, one frame per TR.
    tr : float
        Repetition time in seconds.
    nuisance : ndarray, shape (frames, k), optional
        Regressors that preprocessing removed (as :func:`prfmap.engine.fit_prf`).
    progress : callable, optional
        ``progress(stage, done, total)``.
    spread : bool
        Also estimate the between-unit spread of the delay (``HRF.delay_sd``, for the standard
        errors: :func:`delay_spread_of`).
    cache : FitCache, optional
        Problems and grid predictions shared with the caller's fits of the same design (by default
        the estimate keeps its own).
    **fit_options
        Options of the fits, as :class:`~prfmap.engine.FitOptions`' (:data:`HRF_FIT_OPTIONS`:
        ``slice_time_ref``, where in each TR the volumes sample the signal; ``mem_gb``, their
        memory budget; ``dtype``, their precision).

    Returns
    -------
    HRF
        ``option`` "participant", ``units`` the number of units it was estimated from.
    """
    others = set(fit_options) - set(HRF_FIT_OPTIONS)
    if others:
        raise TypeError(f"estimate_hrf() got unexpected keyword arguments {sorted(others)}")
    options = FitOptions.from_keywords(None, **fit_options)
    common: dict[str, Any] = {
        **{name: getattr(options, name) for name in HRF_FIT_OPTIONS},
        "nuisance": nuisance,
        "progress": progress,
        "cache": FitCache() if cache is None else cache,
    }
    r2 = screen_r2(data, stim, tr, **common)
    top = top_units(r2)
    if top.size < FEWEST_UNITS:
        return canonical_fallback()
    chosen = spread_units(r2) if spread else np.zeros(0, dtype=int)
    # the first pass's fit of the best units and the spread's fit of its sample are one call: the
    # same fit (per-unit derivative weights), the sets overlap and each call has its fixed cost
    both = np.union1d(top, chosen)
    fits = {"model": "gauss", "refine": "lm", "uncertainty": False, **common}
    first = fit_prf(data[both], stim, tr, hrf="vertex", **fits)
    delay_sd = 0.0
    if chosen.size:
        at_chosen = np.searchsorted(both, chosen)
        sample = {k: first.params[k][at_chosen] for k in ("x", "y", "sigma")}
        delay_sd = spread_from_fit(data[chosen], sample, stim, tr, common)
    model = get_model("gauss")
    dtype = floatx(options.dtype)
    prob = common["cache"].problem(model, stim, tr, 1, nuisance, dtype, options.slice_time_ref)
    units = project_units(prob, np.asarray(data[top], dtype=np.float64))
    q = to_numpy(prob.q).astype(np.float64)

    def searched(params: dict[str, np.ndarray]) -> HRF:
        """The delay search's HRF with the best units' pRFs held at ``params``."""
        theta = model.from_report({k: params[k][units.index] for k in ("x", "y", "sigma")})
        neural = to_numpy(compiled(_neural, model)(tensor(theta, prob.dtype), prob.stim))
        neural = neural[:, prob.frame_index].astype(np.float64)  # distinct frames to frames
        return best_hrf(neural, units.y, q, tr, stim.run_lengths, options.slice_time_ref)[0]

    hrf = searched({k: first.params[k][np.searchsorted(both, top)] for k in ("x", "y", "sigma")})
    for _ in range(HRF_PASSES - 1):
        hrf = searched(fit_prf(data[top], stim, tr, hrf=hrf, **fits).params)
    return replace(hrf, delay_sd=delay_sd)


def spread_units(r2: np.ndarray) -> np.ndarray:
    """The units :func:`delay_spread_of` reads the delay's spread from, sorted (empty: too few).

    :data:`SPREAD_UNITS` drawn at random (seed 0) from the better half, by canonical r², of the units
    with r² ≥ :data:`MIN_R2`; none where that half has fewer than :data:`FEWEST_UNITS`.

    Parameters
    ----------
    r2 : ndarray, shape (units,)
        The canonical screen's r² (:func:`screen_r2`).

    Returns
    -------
    ndarray of int
    """
    r2 = np.nan_to_num(r2, nan=0.0)
    driven = np.flatnonzero(r2 >= MIN_R2)
    pool = driven[r2[driven] >= np.median(r2[driven])] if driven.size else driven
    if pool.size < FEWEST_UNITS:
        return np.zeros(0, dtype=int)
    return np.sort(np.random.default_rng(0).choice(pool, min(SPREAD_UNITS, pool.size), replace=False))


def delay_spread_of(
    data: np.ndarray, stim: Stimulus, tr: float, r2: np.ndarray, common: dict[str, Any]
) -> float:
    """Between-unit SD of the HRF delay, beyond its estimates' errors, from :data:`SPREAD_UNITS` units.

    Drawn at random from the better half (by canonical r²) of the units with r² ≥ :data:`MIN_R2`
    (:func:`spread_units`), not the best few: those are the units whose delay is closest to the
    canonical one (on a synthetic participant the 100 best had a delay SD of 0.34 s, all pRFs 0.69 s).
    They are fitted with per-unit derivative weights and the SD read off that fit
    (:func:`spread_from_fit`).

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        Every unit's time course.
    stim : Stimulus
        Apertures.
    tr : float
        Repetition time, s.
    r2 : ndarray, shape (units,)
        The canonical screen's r² (:func:`screen_r2`).
    common : dict
        The fits' keywords (``nuisance``, ``slice_time_ref``, ``mem_gb``, ``dtype``, ``progress``,
        ``cache``).

    Returns
    -------
    float
        Seconds; 0 with fewer than :data:`FEWEST_UNITS` such units.
    """
    chosen = spread_units(r2)
    if chosen.size == 0:
        return 0.0
    fit = fit_prf(
        data[chosen], stim, tr, model="gauss", refine="lm", hrf="vertex", uncertainty=False, **common
    )
    return spread_from_fit(data[chosen], fit.params, stim, tr, common)


def spread_from_fit(
    data: np.ndarray, params: dict[str, np.ndarray], stim: Stimulus, tr: float, common: dict[str, Any]
) -> float:
    """The delay's between-unit SD beyond its errors, from units' pRFs fitted with derivative weights.

    Each unit's delay offset is read off its temporal-derivative weight
    (:func:`derivative_delay_offsets`), and the SD is the one whose normal distribution, widened at
    each unit by its offset's error, makes the offsets likeliest (:func:`spread_beyond_errors`): the
    offsets' own spread also holds their errors, which grow with the noise (docs/validation.md, "The
    delay's spread beyond its errors").

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        The units' time courses.
    params : dict
        Their fit's ``x``, ``y`` and ``sigma`` (NaN where a unit was not fitted).
    stim, tr, common
        As :func:`delay_spread_of`'s.

    Returns
    -------
    float
        Seconds; 0 with fewer than :data:`FEWEST_UNITS` fitted units.
    """
    fitted = np.isfinite(params["x"])
    if fitted.sum() < FEWEST_UNITS:
        return 0.0
    model = get_model("gauss")
    build = make_problem if common.get("cache") is None else common["cache"].problem
    prob = build(model, stim, tr, 1, common["nuisance"], floatx(common["dtype"]), common["slice_time_ref"])
    theta = model.from_report({k: params[k][fitted] for k in ("x", "y", "sigma")})
    responses = to_numpy(compiled(_neural_and_derivatives, model)(tensor(theta, prob.dtype), prob.stim))
    responses = responses[:, :, prob.frame_index].astype(np.float64)  # distinct frames to frames
    q = to_numpy(prob.q).astype(np.float64)
    y = np.asarray(data[fitted], dtype=np.float64)
    offsets, errors = derivative_delay_offsets(
        responses, y - (y @ q) @ q.T, q, tr, stim.run_lengths, common["slice_time_ref"]
    )
    return spread_beyond_errors(offsets, errors)


def derivative_delay_offsets(
    responses: np.ndarray,
    y: np.ndarray,
    q: np.ndarray,
    tr: float,
    run_lengths: Sequence[int],
    slice_time_ref: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's delay offset from its temporal-derivative weight, and that offset's standard error.

    The weights of SPM's response and its two derivatives are fitted by least squares with each
    unit's pRF held; the offset is the derivative's weight over the response's, over
    :func:`derivative_scale`. Its error is the delta method's, with the weights' covariance from
    the Gauss–Newton information of the weights and the pRF's parameters together (a later
    response and a larger pRF look alike: with the pRF held the errors were a third too small), under
    an AR(1) correlation of the residuals (one coefficient for every unit, the median of their
    lag-1 autocorrelations within the runs).

    Parameters
    ----------
    responses : ndarray, shape (1 + P, units, frames)
        Each unit's neural response, then its derivatives in the pRF's P parameters.
    y : ndarray, shape (units, frames)
        Its data, ``q`` projected out.
    q : ndarray, shape (frames, k)
        The nuisance basis.
    tr : float
        Repetition time, s.
    run_lengths : sequence of int
        Frames per run.
    slice_time_ref : float
        Where in each TR the volumes sample the signal.

    Returns
    -------
    offsets, errors : ndarray, shape (units,)
        Seconds; NaN where the response's weight is not positive.
    """
    kernels = hrf_kernels(tr, 3, slice_time_ref)
    bounds = np.cumsum([0, *run_lengths])
    a = np.stack(
        [_by_run(responses[0], kernel, bounds) for kernel in kernels], axis=2
    )  # (units, frames, bases)
    a -= q @ (q.T @ a)
    a_t = np.transpose(a, (0, 2, 1))
    weights = (np.linalg.inv(a_t @ a) @ (a_t @ y[:, :, None]))[:, :, 0]
    residual = y - (a @ weights[:, :, None])[:, :, 0]
    # the prediction's derivatives in the pRF's parameters, beside the three bases'
    prf = np.stack(
        [
            sum(weights[:, [b]] * _by_run(d, kernel, bounds) for b, kernel in enumerate(kernels))
            for d in responses[1:]
        ],
        axis=2,
    )
    jacobian = np.concatenate([a, prf - q @ (q.T @ prf)], axis=2)
    jacobian_t = np.transpose(jacobian, (0, 2, 1))
    information_inverse = np.linalg.pinv(jacobian_t @ jacobian)
    n_frames = y.shape[1]
    variance = np.sum(residual**2, axis=1) / max(n_frames - q.shape[1] - jacobian.shape[2], 1)
    run = np.repeat(np.arange(len(run_lengths)), run_lengths)
    same_run = run[1:] == run[:-1]
    with np.errstate(invalid="ignore", divide="ignore"):
        lag1 = np.sum((residual[:, 1:] * residual[:, :-1])[:, same_run], axis=1) / np.sum(residual**2, axis=1)
    rho = float(np.clip(np.nan_to_num(np.nanmedian(lag1)), 0.0, 0.95))
    coloured = _ar1_factor_t(jacobian, rho, bounds)
    meat = np.transpose(coloured, (0, 2, 1)) @ coloured  # Jᵀ R J, R the runs' AR(1) correlation
    cov = variance[:, None, None] * (information_inverse @ meat @ information_inverse)
    amplitude = weights[:, 0]
    positive = amplitude > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = weights[:, 1] / amplitude
        ratio_variance = (cov[:, 1, 1] - 2 * ratio * cov[:, 0, 1] + ratio**2 * cov[:, 0, 0]) / amplitude**2
    scale = derivative_scale(tr, slice_time_ref)
    offsets = np.where(positive, ratio / scale, np.nan)
    errors = np.where(positive, np.sqrt(np.maximum(ratio_variance, 0.0)) / abs(scale), np.nan)
    return offsets, errors


def _by_run(x: np.ndarray, kernel: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    """``x`` (units, frames) convolved with ``kernel``, afresh in each run (runs start at ``bounds``)."""
    return np.concatenate(
        [lfilter(kernel, [1.0], x[:, a:b], axis=1) for a, b in zip(bounds[:-1], bounds[1:], strict=True)],
        axis=1,
    )


def _ar1_factor_t(j: np.ndarray, rho: float, bounds: np.ndarray) -> np.ndarray:
    """``Cᵀ j`` for ``j`` (units, frames, p), ``C Cᵀ`` the runs' stationary AR(1) correlation ``rho^|t−s|``.

    ``C`` is the AR(1) recursion's (``x₀ = e₀``, ``x_t = rho·x_{t−1} + √(1 − rho²)·e_t``, each run
    afresh): ``(Cᵀ j)_s = c_s Σ_{t ≥ s} rho^(t−s) j_t`` with ``c`` 1 at a run's first frame and
    ``√(1 − rho²)`` after; an anti-causal filter, linear in the frames.
    """
    parts = []
    for a, b in zip(bounds[:-1], bounds[1:], strict=True):
        part = lfilter([1.0], [1.0, -rho], j[:, a:b][:, ::-1], axis=1)[:, ::-1]
        part[:, 1:] *= np.sqrt(1.0 - rho * rho)
        parts.append(part)
    return np.concatenate(parts, axis=1)


def spread_beyond_errors(offsets: np.ndarray, errors: np.ndarray) -> float:
    """The SD ``τ`` of the units' true offsets: the maximum-likelihood one of offsets ~ N(μ, τ² + error²).

    Offsets more than :data:`OUTLIER_MADS` robust SDs from their median (fits gone astray) are
    left out; with fewer than :data:`FEWEST_UNITS` left, the offsets' robust SD (1.4826 times their
    median absolute deviation), errors and all.

    Parameters
    ----------
    offsets, errors : ndarray, shape (units,)
        :func:`derivative_delay_offsets`'.

    Returns
    -------
    float
        Seconds.
    """
    finite = np.isfinite(offsets) & np.isfinite(errors)
    if not finite.any():
        return 0.0
    centre = np.median(offsets[finite])
    robust = 1.4826 * float(np.median(np.abs(offsets[finite] - centre)))
    kept = finite & (np.abs(offsets - centre) <= OUTLIER_MADS * robust)
    if kept.sum() < FEWEST_UNITS or robust <= 0:
        return robust
    d, e2 = offsets[kept], errors[kept] ** 2

    def negative_log_likelihood(tau: float) -> float:
        v = tau * tau + e2
        mean = np.sum(d / v) / np.sum(1 / v)
        return 0.5 * float(np.sum(np.log(v) + (d - mean) ** 2 / v))

    return float(minimize_scalar(negative_log_likelihood, bounds=(0.0, 3.0 * robust), method="bounded").x)


def derivative_scale(tr: float, slice_time_ref: float) -> float:
    """The temporal-derivative weight (relative to the amplitude) of a delay moved by 1 s.

    A delay moved by ``δ`` changes the response by about ``δ`` times this times the temporal
    derivative basis (least squares on the kernels).

    Parameters
    ----------
    tr, slice_time_ref : float
        The acquisition.

    Returns
    -------
    float
        Per second.
    """
    base = hrf_kernels(tr, 3, slice_time_ref)
    moved = hrf_kernels(tr, 1, slice_time_ref, hrf=HRF(DELAY + 0.1, DISPERSION))[0]
    n = min(base.shape[1], moved.shape[0])
    change = (moved[:n] - base[0, :n]) / 0.1
    return float(change @ base[1, :n] / (base[1, :n] @ base[1, :n]))
