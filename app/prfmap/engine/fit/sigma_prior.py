"""An empirical-Bayes prior on log σ given eccentricity, and each unit's MAP σ under it.

Where the data hardly constrain σ (a small pRF at modest SNR: below the bar's width the prediction
changes by a few percent), the maximum-likelihood σ falls anywhere in a flat valley, often on the
floor. The participant's other units say what σ usually is at that eccentricity: log σ ~
N(a + b·eccentricity, τ²). The prior is estimated by maximising the marginal likelihood of the
units' profile likelihoods of log σ (each integrated against the prior on a grid), so units whose σ
is poorly determined count for little and none is selected by how well its σ is determined (the
well-determined units are the large pRFs: a prior fitted to them alone is biased upward). Each unit's
σ is then its posterior mode (MAP) on its profile, the centre and the linear weights held at the
fit's. The standard errors are computed at the maximum-likelihood estimate, as without a prior (so
are the ``uncertain`` flag and the centre's intervals: what the data determine); σ's is then the
posterior's, its log's precision the data's plus the prior's (:func:`posterior_uncertainty`).

Under a prior on each unit's HRF delay (:mod:`~prfmap.engine.fit.delay_prior`) each unit is profiled
under several HRFs at once (:func:`joint_profiles`: the neural responses computed once, each HRF's
regressors from them); σ's prior comes from the profiles' lower envelope and each unit takes the HRF
and σ of their joint posterior mode (:func:`posterior_sigma`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import minimize
from scipy.special import logsumexp

from prfmap.engine.catalog import Z95, Z95_ONE_SIDED
from prfmap.engine.catalog.result import Uncertainty
from prfmap.engine.fit.costs import rss_rows
from prfmap.engine.problem import Problem, Units

__all__ = [
    "PROFILE_POINTS",
    "SigmaPilot",
    "SigmaPosterior",
    "SigmaPrior",
    "SigmaProfileLimits",
    "at_likelihood_sigma",
    "floor_sigma_limit",
    "map_log_sigma",
    "posterior_sigma",
    "joint_profiles",
    "posterior_uncertainty",
    "prior_from_profiles",
    "profile_minimum",
    "profile_limits",
    "profile_upper_limit",
    "sigma_profiles",
]

PROFILE_POINTS = 32
"""Points of each unit's profile of log σ, evenly spaced between σ's bounds."""
MIN_UNITS = 30
"""Fewest profiled units a prior is estimated from (fewer: no prior)."""
MIN_SPREAD = 0.05
"""The smallest spread of log σ about its line a prior may have."""


@dataclass(frozen=True)
class SigmaPrior:
    """log σ ~ N(intercept + slope · eccentricity, spread²), σ in degrees.

    Attributes
    ----------
    intercept, slope, spread : float
        The line (log degrees; per degree) and the spread of log σ about it.
    units : int
        The units it was estimated from.
    """

    intercept: float
    slope: float
    spread: float
    units: int

    def mean(self, eccentricity: np.ndarray) -> np.ndarray:
        """The prior's mean of log σ.

        Parameters
        ----------
        eccentricity : ndarray
            Degrees.

        Returns
        -------
        ndarray
        """
        return self.intercept + self.slope * np.asarray(eccentricity, dtype=np.float64)

    def describe(self) -> dict[str, Any]:
        """The record of the sidecars' ``FitSettings.sigma_prior``.

        Returns
        -------
        dict
        """
        return {
            "option": "eccentricity",
            "log_sigma_intercept": round(self.intercept, 4),
            "log_sigma_slope_per_deg": round(self.slope, 4),
            "log_sigma_spread": round(self.spread, 4),
            "units": self.units,
            "description": "log sigma ~ N(intercept + slope * eccentricity, spread^2), estimated by the "
            "marginal likelihood of the refined units' profile likelihoods of log sigma; sigma is its "
            "posterior mode",
        }


@dataclass(frozen=True)
class SigmaPilot:
    """``FitOptions.sigma_prior`` of a chunk that estimates its participant's prior for every chunk.

    A participant's prior comes from a pilot sample of all its units (every k-th:
    :func:`prfmap.engine.estimate.sigma_prior.pilot_units`), so it depends neither on the chunking
    nor on any unit's SNR. The first chunk fitted takes the pilot units outside it along: they go
    through its starts, refinement and profiles with its own units, the prior is estimated from the
    pilot units' profiles, and they leave the fit there (the final fit, standard errors and settings
    are the chunk's). One pass instead of a pilot fit of its own before the chunks.

    Attributes
    ----------
    rows : ndarray of int
        The chunk's own units that are pilot units (positions in its data).
    extra : ndarray, shape (m, frames)
        The time courses of the pilot units outside the chunk.
    found : callable
        Called with the prior estimated (None where the pilot's refined units were too few) before
        the chunk's final fit, for the other chunks to use.
    """

    rows: np.ndarray
    extra: np.ndarray
    found: Callable[[SigmaPrior | None], None]


def sigma_profiles(
    prob: Problem, units: Units, u: np.ndarray, k: int, limits: tuple[float, float], mem_gb: float
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's −2 log profile likelihood of log σ, relative to its minimum over the grid.

    :func:`joint_profiles` under the one problem ``prob``.

    Parameters
    ----------
    prob : Problem
        The (whitened) problem.
    units, u, k, limits, mem_gb
        As :func:`joint_profiles`'.

    Returns
    -------
    grid : ndarray, shape (PROFILE_POINTS,)
        log σ.
    profile : ndarray, shape (n, PROFILE_POINTS)
        ``(RSS(log σ) − min RSS) / s²``, ``s²`` the smallest RSS over the residual's degrees of freedom.
    """
    grid, profiles = joint_profiles([prob], np.zeros(1), units, u, k, limits, mem_gb)
    return grid, profiles[0]


def joint_profiles(
    problems: Sequence[Problem],
    penalties: np.ndarray,
    units: Units,
    u: np.ndarray,
    k: int,
    limits: tuple[float, float],
    mem_gb: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's −2 log profile likelihood of log σ under each of several HRFs, on one scale.

    Parameters
    ----------
    problems : sequence of Problem
        The (whitened) problems, one per HRF (:mod:`~prfmap.engine.fit.delay_prior`'s delays).
    penalties : ndarray, shape (len(problems),)
        Added to each problem's profile (its delay's −2 log prior).
    units : Units
        The units, ``u``'s rows (the same under every problem: the HRF changes only predictions).
    u : ndarray, shape (n, K)
        Their internal parameters; column ``k`` (log σ) is varied, the others held.
    k : int
        The column of log σ.
    limits : (float, float)
        σ's internal bounds.
    mem_gb : float
        Memory budget of a batch.

    Returns
    -------
    grid : ndarray, shape (PROFILE_POINTS,)
        log σ.
    profiles : ndarray, shape (len(problems), n, PROFILE_POINTS)
        ``(RSS(log σ) − min RSS) / s² + penalty``, the minimum and ``s²`` (the smallest RSS over the
        residual's degrees of freedom) each unit's over every problem and point.
    """
    grid = np.linspace(limits[0], limits[1], PROFILE_POINTS)
    rss = _profile_rss(problems, units, u, k, grid, mem_gb)
    dof = _profile_dof(problems[0], u)
    lowest = rss.min(axis=(0, 2), keepdims=True)
    scaled = (rss - lowest) / np.maximum(lowest / dof, 1e-30)
    return grid, scaled + np.asarray(penalties, dtype=np.float64)[:, None, None]


def _profile_dof(prob: Problem, u: np.ndarray) -> float:
    """The residual's degrees of freedom that scale a profile (:func:`joint_profiles`)."""
    return max(float(prob.frames - int(prob.q.shape[1]) - u.shape[1] - prob.n_bases), 1.0)


def _profile_rss(
    problems: Sequence[Problem], units: Units, u: np.ndarray, k: int, grid: np.ndarray, mem_gb: float
) -> np.ndarray:
    """The residual sums of squares (problems, n, points) of the units at every log σ of ``grid``.

    Under each problem's HRF (the problems differ in nothing else), in one pass (:func:`kernels.vp_costs`).
    """
    n, points = len(u), grid.size
    block = np.repeat(u, points, axis=0)
    block[:, k] = np.tile(grid, n)
    of_unit = np.repeat(np.arange(n), points)
    rss = rss_rows(problems, block, units.y, of_unit, mem_gb, "sigma prior")
    return rss.reshape(len(problems), n, points)


def profile_limits(grid: np.ndarray, profile: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """Each unit's profile-likelihood interval of σ: where −2 log LR first reaches ``level``.

    Moving down and up from the profile's minimum, linear between grid points; the grid's end where
    the profile never reaches the level on that side (the floor: σ is an upper limit).

    Parameters
    ----------
    grid : ndarray, shape (G,)
        log σ of the profiles' points.
    profile : ndarray, shape (n, G)
        −2 log profile likelihoods relative to each unit's minimum (:func:`sigma_profiles`).
    level : float
        ``Z95²`` for a two-sided 95 % interval, ``Z95_ONE_SIDED²`` for a one-sided limit.

    Returns
    -------
    lower, upper : ndarray, shape (n,)
        σ (degrees); NaN where the profile is not finite.
    """
    points = grid.size
    finite = np.isfinite(profile).all(axis=1)
    mode = np.argmin(np.where(np.isfinite(profile), profile, np.inf), axis=1)
    rows = np.arange(len(mode))
    index = np.arange(points)[None, :]
    ends = []
    for side in (-1, 1):
        beyond = (profile >= level) & (side * (index - mode[:, None]) > 0)
        found = beyond.any(axis=1)
        # the nearest crossing on this side: the last one below the mode, the first one above
        first = points - 1 - np.argmax(beyond[:, ::-1], axis=1) if side < 0 else np.argmax(beyond, axis=1)
        inner = np.clip(first - side, 0, points - 1)
        near, far = profile[rows, inner], profile[rows, first]
        with np.errstate(invalid="ignore", divide="ignore"):
            fraction = np.clip(np.where(far > near, (level - near) / (far - near), 1.0), 0.0, 1.0)
        log_sigma = grid[inner] + fraction * (grid[first] - grid[inner])
        ends.append(np.where(finite, np.exp(np.where(found, log_sigma, grid[-1 if side > 0 else 0])), np.nan))
    return ends[0], ends[1]


def profile_upper_limit(grid: np.ndarray, profile: np.ndarray) -> np.ndarray:
    """Each unit's one-sided 95 % upper limit of σ from its profile likelihood of log σ.

    Where σ's maximum-likelihood estimate lies on its floor, σ is an upper limit, and the Laplace
    interval at the floor (from the curvature just inside it, where the profile is flat) reaches
    far beyond what the data allow. The limit is where the profile's −2 log likelihood ratio first
    reaches ``Z95_ONE_SIDED²`` above its minimum (:func:`profile_limits`).

    Parameters
    ----------
    grid : ndarray, shape (G,)
        log σ of the profiles' points.
    profile : ndarray, shape (n, G)
        −2 log profile likelihoods relative to each unit's minimum (:func:`sigma_profiles`).

    Returns
    -------
    ndarray, shape (n,)
        σ (degrees); the grid's top where the profile never reaches the level; NaN where it is not
        finite.
    """
    return profile_limits(grid, profile, Z95_ONE_SIDED**2)[1]


def floor_sigma_limit(
    prob: Problem,
    units: Units,
    u: np.ndarray,
    at_floor: np.ndarray,
    k: int,
    limits: tuple[float, float],
    mem_gb: float,
    known: np.ndarray | None = None,
) -> np.ndarray:
    """σ's profile-likelihood upper limit (:func:`profile_upper_limit`) of the units on σ's floor.

    Parameters
    ----------
    prob : Problem
        The (whitened) problem of the refinement.
    units : Units
        Its units, ``u``'s rows.
    u : ndarray, shape (n, K)
        Their maximum-likelihood internal parameters.
    at_floor : ndarray of bool, shape (n,)
        The units whose σ is on its floor.
    k : int
        The column of log σ.
    limits : (float, float)
        σ's internal bounds.
    mem_gb : float
        Memory budget of a batch.
    known : ndarray, shape (n,), optional
        Limits already computed (:func:`posterior_sigma`'s; NaN where not): only the floor units
        without one are profiled (each new batch shape costs the backend a compilation).

    Returns
    -------
    ndarray, shape (n,)
        σ (degrees) at the floor units (infinite where their profile is not finite), NaN elsewhere.
    """
    out = np.full(len(u), np.nan)
    if known is not None:
        out[at_floor] = known[at_floor]
    rows = np.flatnonzero(at_floor & np.isnan(out))
    if rows.size:
        grid, profile = sigma_profiles(prob, units.rows(rows), u[rows], k, limits, mem_gb)
        out[rows] = np.nan_to_num(profile_upper_limit(grid, profile), nan=np.inf)
    return out


def prior_from_profiles(grid: np.ndarray, profile: np.ndarray, eccentricity: np.ndarray) -> SigmaPrior | None:
    """The prior whose marginal likelihood of the units' profiles is largest.

    Parameters
    ----------
    grid : ndarray, shape (G,)
        log σ of the profiles' points.
    profile : ndarray, shape (n, G)
        −2 log profile likelihoods (:func:`sigma_profiles`).
    eccentricity : ndarray, shape (n,)
        The units' fitted eccentricities.

    Returns
    -------
    SigmaPrior or None
        None from fewer than :data:`MIN_UNITS` units with finite profiles.
    """
    ok = np.isfinite(profile).all(axis=1) & np.isfinite(eccentricity)
    if ok.sum() < MIN_UNITS:
        return None
    profile, ecc = profile[ok], np.asarray(eccentricity, dtype=np.float64)[ok]
    log_likelihood = -0.5 * profile
    step = float(grid[1] - grid[0])

    def negative(theta: np.ndarray) -> float:
        intercept, slope, log_spread = theta
        spread = np.exp(log_spread)
        z = (grid[None, :] - (intercept + slope * ecc)[:, None]) / spread
        log_prior = -0.5 * z * z - log_spread - 0.5 * np.log(2 * np.pi) + np.log(step)
        return -float(np.sum(logsumexp(log_likelihood + log_prior, axis=1)))

    modes = grid[np.argmin(profile, axis=1)]
    design = np.stack([np.ones_like(ecc), ecc], axis=1)
    start = np.linalg.lstsq(design, modes, rcond=None)[0]
    best = minimize(
        negative,
        x0=[start[0], start[1], np.log(0.3)],
        method="Nelder-Mead",
        options={"xatol": 1e-4, "fatol": 1e-3, "maxiter": 2000},
    )
    intercept, slope, log_spread = best.x
    return SigmaPrior(
        float(intercept), float(slope), float(max(np.exp(log_spread), MIN_SPREAD)), int(ok.sum())
    )


def map_log_sigma(
    grid: np.ndarray, profile: np.ndarray, eccentricity: np.ndarray, prior: SigmaPrior
) -> np.ndarray:
    """Each unit's posterior mode of log σ: its profile plus the prior, refined by a parabola.

    Parameters
    ----------
    grid : ndarray, shape (G,)
        log σ of the profiles' points.
    profile : ndarray, shape (n, G)
        −2 log profile likelihoods.
    eccentricity : ndarray, shape (n,)
        The units' fitted eccentricities.
    prior : SigmaPrior
        The prior.

    Returns
    -------
    ndarray, shape (n,)
        log σ, within the grid's ends; NaN where the profile is not finite.
    """
    z = (grid[None, :] - prior.mean(eccentricity)[:, None]) / prior.spread
    return profile_minimum(grid, profile + z * z)


def profile_minimum(grid: np.ndarray, profile: np.ndarray) -> np.ndarray:
    """Where each row of ``profile`` is lowest: its lowest point, refined by a parabola through three.

    Parameters
    ----------
    grid : ndarray, shape (G,)
        log σ of the profiles' points.
    profile : ndarray, shape (n, G)
        A (penalised) −2 log profile likelihood.

    Returns
    -------
    ndarray, shape (n,)
        log σ, within the grid's ends; NaN where the profile is not finite.
    """
    best = np.argmin(np.where(np.isfinite(profile), profile, np.inf), axis=1)
    inner = np.clip(best, 1, grid.size - 2)
    rows = np.arange(len(best))
    left, mid, right = (profile[rows, inner + d] for d in (-1, 0, 1))
    curvature = left - 2 * mid + right
    with np.errstate(invalid="ignore", divide="ignore"):
        shift = np.where(curvature > 0, 0.5 * (left - right) / curvature, 0.0)
    step = float(grid[1] - grid[0])
    out = np.where(best == inner, grid[inner] + np.clip(shift, -0.5, 0.5) * step, grid[best])
    return np.where(np.isfinite(profile).all(axis=1), out, np.nan)


@dataclass(frozen=True)
class SigmaProfileLimits:
    """Limits of σ from each profiled unit's profile likelihood of log σ (NaN for the others).

    Attributes
    ----------
    upper_one_sided : ndarray, shape (n,)
        The one-sided 95 % upper limit (:func:`profile_upper_limit`), degrees.
    fit_hrf_upper_one_sided : ndarray, shape (n,)
        The one-sided upper limit under the fit's own HRF (the first problem; ``upper_one_sided``
        where the unit keeps that HRF): the centre's errors are that HRF's.
    """

    upper_one_sided: np.ndarray
    fit_hrf_upper_one_sided: np.ndarray


@dataclass(frozen=True)
class SigmaPosterior:
    """What :func:`posterior_sigma` gives a fit's refined units.

    Attributes
    ----------
    u : ndarray, shape (n, K)
        The internal parameters, log σ at its posterior mode where there is a prior.
    likelihood_u : ndarray, shape (n, K)
        The same with log σ at its maximum-likelihood value under each unit's HRF: the refined one
        under the fit's HRF, the profile's minimum under another.
    prior : SigmaPrior or None
        The prior used; None (and ``u`` the maximum-likelihood σ) where too few units give one.
    profiled : SigmaProfileLimits
        Each profiled unit's one-sided upper limit at its maximum-likelihood σ, for
        :func:`floor_sigma_limit` to reuse.
    hrf : ndarray of int, shape (n,)
        Each unit's HRF, an index of the problems profiled (0, the fit's own, where not profiled).
    hrf_weights : ndarray, shape (n, len(problems))
        Each unit's posterior probability of each HRF (σ at its mode under each; one-hot at the fit's
        own where not profiled).
    """

    u: np.ndarray
    likelihood_u: np.ndarray
    prior: SigmaPrior | None
    profiled: SigmaProfileLimits
    hrf: np.ndarray
    hrf_weights: np.ndarray


def posterior_sigma(
    problems: Sequence[Problem],
    penalties: np.ndarray,
    units: Units,
    u: np.ndarray,
    which: np.ndarray,
    limits: tuple[float, float],
    option: str | SigmaPrior | np.ndarray,
    mem_gb: float,
) -> SigmaPosterior:
    """The units ``which``'s HRF and log σ at their joint posterior mode, σ's prior and profile limits.

    With one problem, σ's posterior mode on its profile (x, y and the shape parameters held at the
    refined values). With several (the HRFs of :mod:`~prfmap.engine.fit.delay_prior`, the fit's
    first), each unit's profiles of log σ under each, plus that HRF's penalty (−2 log its prior):
    the prior on σ is estimated from their lower envelope (the HRF profiled out under its prior), and
    each unit takes the HRF and σ whose penalised profile plus σ's prior is lowest.

    Parameters
    ----------
    problems : sequence of Problem
        The (whitened) problems of the refinement, the fit's own HRF first.
    penalties : ndarray, shape (len(problems),)
        −2 log prior of each problem's HRF (0 for the only one).
    units : Units
        Its units, ``u``'s rows.
    u : ndarray, shape (n, K)
        The refined internal parameters (under the first problem); ``x`` and ``y`` in columns 0
        and 1, log σ in the model's ``sigma`` column.
    which : ndarray of bool, shape (n,)
        The units to profile (the refined ones).
    limits : (float, float)
        σ's internal bounds.
    option : {"none", "eccentricity"}, SigmaPrior or ndarray of bool
        No prior on σ (each unit's HRF chosen under its own prior, σ its maximum-likelihood value
        there); estimate the prior from these units; use the one given (a participant's, estimated
        once); or estimate it from the profiles of the units marked, shape (n,) (a participant's
        pilot sample, :class:`SigmaPilot`).
    mem_gb : float
        Memory budget of a batch.

    Returns
    -------
    SigmaPosterior
    """
    k = problems[0].model.names.index("sigma")
    rows = np.flatnonzero(which)
    ends = [np.full(len(u), np.nan) for _ in range(2)]
    profiled, hrf = SigmaProfileLimits(*ends), np.zeros(len(u), dtype=int)
    weights = np.zeros((len(u), len(problems)))
    weights[:, 0] = 1.0
    given = option if isinstance(option, SigmaPrior) else None
    if rows.size == 0:
        return SigmaPosterior(u, u, given, profiled, hrf, weights)
    grid, profiles = joint_profiles(problems, penalties, units.rows(rows), u[rows], k, limits, mem_gb)
    # the prior from the delays' lower envelope: from the fit HRF's profiles alone it kept part of σ's
    # late-response bias (docs/validation.md, "A prior on each vertex's HRF delay")
    envelope = profiles.min(axis=0)
    envelope -= envelope.min(axis=1, keepdims=True)
    eccentricity = np.hypot(u[rows, 0], u[rows, 1])
    prior = given
    if isinstance(option, np.ndarray) or option == "eccentricity":
        pilot = option[rows] if isinstance(option, np.ndarray) else slice(None)
        prior = prior_from_profiles(grid, envelope[pilot], eccentricity[pilot])
    penalised = profiles
    if prior is not None:
        z = (grid[None, :] - prior.mean(eccentricity)[:, None]) / prior.spread
        penalised = profiles + (z * z)[None]
    lowest = np.nan_to_num(penalised.min(axis=2), nan=np.inf)  # (problems, units)
    chosen = np.argmin(lowest, axis=0)
    with np.errstate(invalid="ignore", over="ignore"):
        odds = np.exp(-0.5 * (lowest - lowest[chosen, np.arange(rows.size)]))
    finite = np.isfinite(odds).all(axis=0) & (odds.sum(axis=0) > 0)
    weights[rows[finite]] = (odds / odds.sum(axis=0))[:, finite].T
    own = profiles[chosen, np.arange(rows.size)]
    own = own - own.min(axis=1, keepdims=True)
    hrf[rows] = chosen
    profiled.upper_one_sided[rows] = profile_upper_limit(grid, own)
    # on the fit HRF's own scale (its smallest RSS, not the smallest of all problems'), as
    # sigma_profiles would give it
    first_min = profiles[0].min(axis=1, keepdims=True)
    first = (profiles[0] - first_min) / (1.0 + first_min / _profile_dof(problems[0], u))
    profiled.fit_hrf_upper_one_sided[rows] = profile_upper_limit(grid, first)
    likelihood_u = u.copy()
    moved = chosen != 0  # under the fit's own HRF the refined σ is the maximum-likelihood one
    found = profile_minimum(grid, own)
    likelihood_u[rows[moved & np.isfinite(found)], k] = found[moved & np.isfinite(found)]
    if prior is None:
        return SigmaPosterior(likelihood_u, likelihood_u, None, profiled, hrf, weights)
    mapped = map_log_sigma(grid, own, eccentricity, prior)
    out = likelihood_u.copy()
    ok = np.isfinite(mapped)
    out[rows[ok], k] = mapped[ok]
    return SigmaPosterior(out, likelihood_u, prior, profiled, hrf, weights)


def at_likelihood_sigma(
    checked: np.ndarray, likelihood: np.ndarray, posterior: np.ndarray, model: Any
) -> np.ndarray:
    """``checked`` with log σ back at its maximum-likelihood value where the prior moved it.

    Parameters
    ----------
    checked : ndarray, shape (n, K)
        The final internal parameters (a unit whose refinement was rejected is back at its start).
    likelihood, posterior : ndarray, shape (n, K)
        The refined parameters before and after :func:`posterior_sigma`.
    model : PRFModel
        The model.

    Returns
    -------
    ndarray, shape (n, K)
    """
    if "sigma" not in model.names:
        return checked
    k = model.names.index("sigma")
    moved = np.isclose(checked[:, k], posterior[:, k], rtol=0.0, atol=1e-12) & (
        posterior[:, k] != likelihood[:, k]
    )
    out = checked.copy()
    out[moved, k] = likelihood[moved, k]
    return out


def posterior_uncertainty(
    unc: Uncertainty,
    sigma: np.ndarray,
    prior: SigmaPrior,
    likelihood_sigma: np.ndarray,
) -> Uncertainty:
    """``unc`` (at the maximum-likelihood σ) with σ's error and interval from the posterior and the data.

    The posterior of log σ: centred on the unit's posterior mode ``sigma``, its precision the data's
    (``se(σ) / σ`` at the maximum-likelihood estimate) plus the prior's ``1 / spread²``. The 95 %
    interval reaches at least as far as the maximum-likelihood one on each side: the prior moves σ
    where the data are flat, but its interval never leaves out what the data alone cannot; the
    standard error is at least the one that interval implies (its log width over 2 × 1.96, times σ),
    so what uses it (the group level's inverse-variance weights) says what the interval says (the
    test–retest check uses the maximum-likelihood σ with ``noise_se`` instead: two runs' posteriors
    shrink alike). Where the data's σ are biased the same way at every vertex (a forward model that
    is not prfmap's), the prior estimated from them is biased too and can be tight (spread 0.05), and
    the posterior interval alone held the truth for 16 % of the vertices of an independent simulator
    (ML interval: 90 %).

    Parameters
    ----------
    unc : Uncertainty
        The fit's standard errors, computed at the maximum-likelihood σ.
    sigma : ndarray, shape (units,)
        The posterior modes (the fit's σ).
    prior : SigmaPrior
        The prior.
    likelihood_sigma : ndarray, shape (units,)
        The maximum-likelihood σ, kept with its standard error in the result's ``likelihood`` and
        ``likelihood_se``: what the data alone say.

    Returns
    -------
    Uncertainty
    """
    if "sigma" not in unc.se:
        return unc
    with np.errstate(invalid="ignore", divide="ignore"):
        lower, upper = unc.lower.get("sigma"), unc.upper.get("sigma")
        # the data's SD of log σ: from its interval where it has one (one-sided at the floor)
        data = (np.log(upper) - np.log(lower)) / (2 * Z95) if lower is not None else unc.se["sigma"] / sigma
        precision = np.where(np.isfinite(data) & (data > 0), 1.0 / data**2, 0.0) + 1.0 / prior.spread**2
        sd = 1.0 / np.sqrt(precision)
    known = ~np.isnan(unc.se["sigma"]) & np.isfinite(sigma)  # an infinite error is known: unbounded
    se, low, high = dict(unc.se), dict(unc.lower), dict(unc.upper)
    se["sigma"] = np.where(known, sigma * sd, unc.se["sigma"])
    low["sigma"] = np.where(known, sigma * np.exp(-Z95 * sd), unc.lower.get("sigma", np.nan))
    high["sigma"] = np.where(known, sigma * np.exp(Z95 * sd), unc.upper.get("sigma", np.nan))
    if lower is not None:  # never narrower than what the data alone allow
        low["sigma"] = np.where(known, np.fmin(low["sigma"], lower), low["sigma"])
        high["sigma"] = np.where(known, np.fmax(high["sigma"], upper), high["sigma"])
        with np.errstate(invalid="ignore", divide="ignore"):
            spanned = sigma * (np.log(high["sigma"]) - np.log(low["sigma"])) / (2 * Z95)
        se["sigma"] = np.where(known, np.fmax(se["sigma"], spanned), se["sigma"])
    return Uncertainty(
        se,
        low,
        high,
        unc.dof,
        unc.seconds,
        likelihood={**unc.likelihood, "sigma": likelihood_sigma},
        likelihood_se={**unc.likelihood_se, "sigma": unc.se["sigma"]},
        noise_se=unc.noise_se,
    )
