"""Per-unit uncertainty of a fit: Laplace or sandwich covariances, standard errors and intervals.

At the final estimate of every fitted unit (refined or not) the information matrix of all its
parameters, the linear weights included, is built from the (whitened) residual's Jacobian
(:func:`~prfmap.engine.kernels.vp_information`); with the whitened residual variance ``s² = RSS / ν``
(``ν`` = frames − nuisance regressors − fitted parameters) the Laplace covariance is ``s² (JJᵀ)⁻¹``.
The sandwich covariance adds ``(JJᵀ)⁻¹ (M − s² E) (JJᵀ)⁻¹``: ``M`` is the observed covariance of the
per-frame scores ``J_t r_t`` with Newey–West's weights over a few lags within each run (White 1982;
Newey & West 1987), ``s² E`` what ``M`` is expected to be where the model and the noise model are
right (the same weights over the residual's projection, nuisance and fitted parameters removed). So
it equals the Laplace covariance on average where the model holds, and is wider where the residuals
are heteroscedastic, autocorrelated beyond the noise model, or carry what the model misses; without
the correction, the plain sandwich's intervals were 8–10 % narrower than Laplace's where the model
was right (the residual's own lagged correlation, from the fit's projection, lowers ``M``). The
centre's and σ's variances are widened where their likelihood is flatter than the curvature says
(:func:`path_reaches`: the residual sum of squares along each one's profile path), σ's interval on
each side by that side's own path (a small pRF's likelihood of log σ is flat toward the floor). The
reported parameters' standard errors follow by the delta method (finite-difference gradients of the
model's report, eccentricity and polar angle included); parameters held in a range by a transform
(σ > 0, CSS's n in (0, 1), ...) get their 95 % interval by transforming the internal interval, which
stays inside the range and is asymmetric where a symmetric one would be wrong (σ near its floor).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from prfmap.engine import catalog, kernels
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import batch_size, compiled, pad, run_batches
from prfmap.engine.catalog import CENTRE_SE_LIMIT, SIGMA_WIDTH_LIMIT, Z95, Z95_ONE_SIDED
from prfmap.engine.catalog.result import Uncertainty
from prfmap.engine.fit.costs import rss_rows
from prfmap.engine.models.transforms import InternalParameter, natural_values, saturated, transform_of
from prfmap.engine.problem import Problem, Units

__all__ = [
    "Z95",
    "CovarianceRecipe",
    "Uncertainty",
    "covariance_recipe",
    "doubtful_uncertainty",
    "parameter_uncertainty",
]

INSIDE_LOGIT = 10.0
"""Where the information of a ranged parameter at its range's end is evaluated (``|u|``; the end is
:data:`~prfmap.engine.models.transforms.LOGIT_LIMIT`): its natural value differs by 5e-5 of the range, and
the derivative that scales its standard error is exact in float32 there, not 0."""
_RELATIVE_STEP = 1e-5
PATH_STEPS = np.array([2.0, 3.0])
"""Where the centre's likelihood is evaluated along each coordinate's profile path, in that coordinate's
curvature standard errors from the estimate, each way (:func:`path_reaches`)."""
PATH_REACH_LIMIT = 3.0
"""A likelihood still short of the 95 % level at the last step is extrapolated as if quadratic from
there, to at most this many times the last step."""
CENTRE = ("x", "y")


@dataclass(frozen=True, eq=False)
class CovarianceRecipe:
    """How a fit's covariance is built.

    Attributes
    ----------
    lag_weights : ndarray, shape (lags + 1, frames), optional
        The sandwich's weights of the scores' lagged products
        (:func:`~prfmap.engine.kernels.score_covariance`, :func:`newey_west_weights`); None: Laplace
        alone.
    hrf_alternatives : sequence of (ndarray, float)
        HRF matrices (bases, distinct, frames) of alternative responses, in the problem's (whitened)
        space, and their weights: the covariance also holds what the unit's own HRF, unknown and
        different from the fit's, moves the estimates by. For each alternative response ``s`` of
        weight ``w_s`` (sigma points of the HRF's between-unit spread), the Gauss–Newton step ``d_s``
        from the fit's prediction to the alternative's (what a unit whose HRF is ``s`` would be
        estimated off by) adds ``w_s d_s d_sᵀ``: the second moment of the error the HRF causes.
    unit_scales : ndarray, shape (units, len(hrf_alternatives)), optional
        Each unit's factor on the variance each alternative's step adds to the internal parameter
        ``scaled_column`` (rows: the units of ``u`` in :func:`parameter_uncertainty`; its
        covariances with the others scale by the factor's square root): what of the HRF's spread
        is left for that parameter at that unit (σ re-estimated under a delay chosen per unit,
        :mod:`~prfmap.engine.fit.delay_prior`, the others not). None: 1 everywhere.
    scaled_column : int, optional
        The internal parameter ``unit_scales`` applies to.
    centre_path : bool
        Widen the centre's errors where its likelihood along its profile path is flatter than the
        curvature says (:func:`path_reaches`); False where only other parameters' errors are wanted.
        σ's are always taken from its path.
    """

    lag_weights: np.ndarray | None = None
    hrf_alternatives: Sequence[tuple[np.ndarray, float]] = ()
    unit_scales: np.ndarray | None = None
    scaled_column: int | None = None
    centre_path: bool = True

    @property
    def option(self) -> str:
        """The ``--covariance`` option this recipe is (:data:`prfmap.engine.catalog.COVARIANCES`)."""
        return "laplace" if self.lag_weights is None else "sandwich"


def covariance_recipe(
    option: str,
    run_lengths: Sequence[int],
    hrf_alternatives: Sequence[tuple[np.ndarray, float]] = (),
    unit_scales: np.ndarray | None = None,
    scaled_column: int | None = None,
) -> CovarianceRecipe:
    """The recipe of ``option`` for runs of ``run_lengths`` frames.

    Parameters
    ----------
    option : str
        A key of :data:`prfmap.engine.catalog.COVARIANCES`.
    run_lengths : sequence of int
        Frames of each run, in order.
    hrf_alternatives : sequence of (ndarray, float)
        As :class:`CovarianceRecipe`.
    unit_scales, scaled_column : ndarray, int, optional
        As :class:`CovarianceRecipe`.

    Returns
    -------
    CovarianceRecipe
    """
    if option not in catalog.COVARIANCES:
        raise ValueError(f"covariance must be one of {sorted(catalog.COVARIANCES)}, got {option!r}")
    weights = newey_west_weights(run_lengths) if option == "sandwich" else None
    return CovarianceRecipe(weights, tuple(hrf_alternatives), unit_scales, scaled_column)


def newey_west_weights(run_lengths: Sequence[int]) -> np.ndarray:
    """Bartlett weights of the scores' products ``lag`` frames apart within a run (Newey & West 1994).

    ``lags = ⌊4 (n / 100)^(2/9)⌋`` for runs of ``n`` frames on average (4 for runs of 190 frames);
    the product of frames ``t`` and ``t - lag`` gets ``1 - lag / (lags + 1)`` when both are in the
    same run, else 0.

    Parameters
    ----------
    run_lengths : sequence of int
        Frames of each run, in order.

    Returns
    -------
    ndarray, shape (lags + 1, frames)
        Row ``lag`` at column ``t``: the weight of ``g_t g_{t-lag}ᵀ``.
    """
    lengths = np.asarray(run_lengths, dtype=int)
    lags = int(math.floor(4.0 * (float(lengths.mean()) / 100.0) ** (2.0 / 9.0)))
    position = np.concatenate([np.arange(n) for n in lengths])  # frame index within its run
    out = np.zeros((lags + 1, int(lengths.sum())))
    for lag in range(lags + 1):
        out[lag] = np.where(position >= lag, 1.0 - lag / (lags + 1.0), 0.0)
    return out


def parameter_uncertainty(
    prob: Problem,
    units: Units,
    u: np.ndarray,
    free: np.ndarray,
    recipe: CovarianceRecipe,
    *,
    mem_gb: float,
    which: np.ndarray | None = None,
    floor_upper: np.ndarray | None = None,
) -> Uncertainty:
    """Standard errors and 95 % intervals of every fitted unit at its final internal parameters ``u``.

    Parameters
    ----------
    prob : Problem
        The problem the refinement used (whitened with a noise model).
    units : Units
        Its units and (whitened, projected) time courses; the outputs have ``units.total`` rows.
    u : ndarray, shape (len(units.index), K)
        Their final internal parameters.
    free : ndarray, shape (K,)
        1 for each fitted internal parameter.
    recipe : CovarianceRecipe
        Laplace or sandwich, and the HRF's variability.
    mem_gb : float
        Memory budget of a batch.
    which : ndarray of bool, shape (len(units.index),), optional
        The units to compute them for (the others get NaN); all by default.
    floor_upper : ndarray, shape (len(units.index),), optional
        Units whose σ ended at its floor hold σ's upper limit from their profile likelihood
        (:func:`~prfmap.engine.fit.sigma_prior.floor_sigma_limit`; infinite where it could not be
        computed), the others NaN. Their σ is an upper limit: the limit replaces the Laplace
        interval's upper end, whose curvature, taken just inside the floor where the profile is
        flat, puts that end far beyond what the data allow (10–25° for a pRF the data confine below
        1°). And a pRF that small is sharper than the unit's: the other parameters' standard errors
        at the floor are too small (on synthetic participants their nominal 95 % intervals held x
        for 77–83 %); theirs are the larger of those at the floor and at σ's upper limit.

    Returns
    -------
    Uncertainty
    """
    t0 = time.perf_counter()

    def at(values: np.ndarray, rows: np.ndarray | None) -> Uncertainty:
        return _covariance(prob, units, values, free, recipe, mem_gb, rows)

    names = prob.model.names
    k = names.index("sigma") if "sigma" in names else None
    limit = np.full(len(u), np.nan) if floor_upper is None or k is None else np.asarray(floor_upper)
    floor = ~np.isnan(limit)
    if which is not None:
        floor &= which
    profiled = floor & np.isfinite(limit)
    wider = u.copy()  # σ at its upper limit where its profile gave one: evaluated with the estimates
    wider[profiled, k] = np.log(limit[profiled])
    chosen = np.arange(len(u)) if which is None else np.flatnonzero(which)
    out, alt = _stacked_covariance(
        prob, units, [(u, chosen), (wider, np.flatnonzero(profiled))], free, recipe, mem_gb
    )
    _at_range_ends(out, at, prob.model.params, units.index, u, free, which)
    if floor.any() and "sigma" in out.upper:
        upper = out.upper["sigma"][units.index]
        out.upper["sigma"][units.index[profiled]] = limit[profiled]
        _keep_larger(out, alt, units.index[profiled])
        rest = floor & ~profiled  # no limit from the profile: at the interval's upper end
        if rest.any():
            wider[rest, k] = np.log(np.where(np.isfinite(upper[rest]), upper[rest], np.exp(u[rest, k])))
            _keep_larger(out, at(wider, rest), units.index[rest])
    return Uncertainty(out.se, out.lower, out.upper, out.dof, time.perf_counter() - t0, noise_se=out.noise_se)


def _keep_larger(out: Uncertainty, alt: Uncertainty, rows: np.ndarray) -> None:
    """``out``'s standard errors (σ's excepted) at ``rows``: the larger of its own and ``alt``'s."""
    for errors, alt_errors in ((out.se, alt.se), (out.noise_se, alt.noise_se)):
        for key, values in errors.items():
            if key != "sigma":
                values[rows] = np.fmax(values[rows], alt_errors[key][rows])


def _at_range_ends(
    out: Uncertainty,
    evaluate: Callable[[np.ndarray, np.ndarray | None], Uncertainty],
    params: Sequence[InternalParameter],
    index: np.ndarray,
    u: np.ndarray,
    free: np.ndarray,
    which: np.ndarray | None,
) -> None:
    """Standard errors and one-sided intervals of the units with a ranged parameter at its range's end.

    There the parameter's derivative vanishes (:func:`~prfmap.engine.models.transforms.saturated`), so its
    delta-method standard error would be 0 and the information matrix near singular. Every standard
    error of such a unit is evaluated again with that parameter just inside its range
    (:data:`INSIDE_LOGIT`), and the parameter's 95 % interval is one-sided: from its estimate minus
    :data:`Z95_ONE_SIDED` standard errors to the range's end (or from the other end up). ``out`` is
    changed in place; ``evaluate(u, rows)`` is :func:`_covariance` at ``u`` of the units ``rows``.
    """
    ends = saturated(params, u) & (np.asarray(free) > 0)[None, :]
    if which is not None:
        ends &= np.asarray(which, dtype=bool)[:, None]
    rows = ends.any(axis=1)
    if not rows.any():
        return
    inside = np.where(ends, np.sign(u) * INSIDE_LOGIT, u)
    alt = evaluate(inside, rows)
    at = index[rows]
    for key, values in out.se.items():
        values[at] = alt.se[key][at]
    for key, values in out.noise_se.items():
        values[at] = alt.noise_se[key][at]
    theta = natural_values(params, u)
    for k, param in enumerate(params):
        hit = ends[:, k]
        if not hit.any() or param.name not in out.lower:
            continue
        low_end, high_end = transform_of(param).low, transform_of(param).high
        top = hit & (u[:, k] > 0)
        bottom = hit & (u[:, k] < 0)
        spread = Z95_ONE_SIDED * alt.se[param.name][index]
        lower, upper = out.lower[param.name], out.upper[param.name]
        lower[index[top]] = np.maximum(low_end, theta[top, k] - spread[top])
        upper[index[top]] = high_end
        lower[index[bottom]] = low_end
        upper[index[bottom]] = np.minimum(high_end, theta[bottom, k] + spread[bottom])


def _covariance(
    prob: Problem,
    units: Units,
    u: np.ndarray,
    free: np.ndarray,
    recipe: CovarianceRecipe,
    mem_gb: float,
    which: np.ndarray | None,
) -> Uncertainty:
    """:func:`parameter_uncertainty` at ``u`` of the units ``which`` (all when None)."""
    chosen = np.arange(len(u)) if which is None else np.flatnonzero(which)
    (out,) = _stacked_covariance(prob, units, [(u, chosen)], free, recipe, mem_gb)
    return out


def _stacked_covariance(
    prob: Problem,
    units: Units,
    sets: Sequence[tuple[np.ndarray, np.ndarray]],
    free: np.ndarray,
    recipe: CovarianceRecipe,
    mem_gb: float,
) -> list[Uncertainty]:
    """:func:`_covariance` of several sets of parameters in the same batched calls.

    Each set ``(u, rows)`` is the internal parameters of ``units`` (``u``'s rows, as in
    :func:`parameter_uncertainty`) and the positions it is wanted for; one ``Uncertainty`` per set
    (untimed: :func:`parameter_uncertainty` times the whole). Evaluated together, the sets fill calls
    the smaller ones would each have padded on their own.
    """
    sets = [(values, np.asarray(rows, dtype=np.int64)) for values, rows in sets]
    chosen = np.concatenate([rows for _, rows in sets])
    u = np.concatenate([values[rows] for values, rows in sets])
    units = units.rows(chosen)
    scales = None if recipe.unit_scales is None else recipe.unit_scales[chosen]
    model, dtype, n = prob.model, prob.dtype, len(u)
    k, n_bases = u.shape[1], prob.n_bases
    fn = compiled(kernels.vp_information, model)
    hrf_alternatives = recipe.hrf_alternatives
    n_alt = len(hrf_alternatives)
    cost, beta, info = np.empty(n), np.empty(n), np.empty((n, k + n_bases, k + n_bases))
    cross, meat, expected = np.empty((n, k + n_bases, n_alt)), np.empty_like(info), np.empty_like(info)
    free_t = tensor(np.asarray(free, dtype=np.float64), dtype)
    shape = tuple(prob.hrf_t.shape)
    alt_t = tensor(np.stack([m for m, _ in hrf_alternatives]) if n_alt else np.zeros((0, *shape)), dtype)
    spread = np.array([weight for _, weight in hrf_alternatives], dtype=np.float64)
    lags_t = tensor(_lag_weights(recipe, to_numpy(prob.q).astype(np.float64), prob.frames), dtype)

    def run(start: int, stop: int, batch: int) -> None:
        out = fn(
            tensor(pad(u[start:stop], batch), dtype),
            tensor(pad(units.y[start:stop], batch), dtype),
            free_t,
            prob.stim,
            prob.hrf_t,
            prob.q,
            (alt_t, lags_t),
        )
        cost[start:stop] = to_numpy(out[0])[: stop - start]
        meat[start:stop] = to_numpy(out[4])[: stop - start]
        expected[start:stop] = to_numpy(out[5])[: stop - start]
        cross[start:stop] = to_numpy(out[3])[: stop - start]
        info[start:stop] = to_numpy(out[1])[: stop - start]
        beta[start:stop] = to_numpy(out[2])[: stop - start]

    run_batches(n, batch_size(prob, mem_gb, k), run, "uncertainty", None)
    fitted = np.flatnonzero(np.asarray(free) > 0)
    keep = np.concatenate([fitted, k + np.arange(n_bases)])
    dof = float(prob.frames - int(prob.q.shape[1]) - keep.size)
    inverse = _inverse(info[:, keep][:, :, keep])
    variance = np.maximum(cost, 0.0) / max(dof, 1.0)
    cov = inverse * variance[:, None, None]
    on_path = (*CENTRE, "sigma") if recipe.centre_path else ("sigma",)
    reaches = path_reaches(prob, units, u, fitted, variance, cov, mem_gb, on_path)
    widen, ends = path_factors(reaches, fitted, model.names)
    if recipe.lag_weights is not None:
        excess = meat[:, keep][:, :, keep] - variance[:, None, None] * expected[:, keep][:, :, keep]
        cov = cov + np.einsum("nij,njk,nkl->nil", inverse, excess, inverse)
    noise_cov = cov.copy()  # without the HRF's between-unit variability
    if n_alt:
        steps = np.einsum("nij,njs->nis", inverse, cross[:, keep])
        if scales is not None and recipe.scaled_column in keep:
            at = int(np.flatnonzero(keep == recipe.scaled_column)[0])
            steps[:, at, :] *= np.sqrt(scales)
        cov = cov + np.einsum("nis,njs,s->nij", steps, steps, spread)
    for j, factor in widen.items():  # variances by factor², covariances by factor
        for c in (cov, noise_cov):
            c[:, j, :] *= factor[:, None]
            c[:, :, j] *= factor[:, None]
    (se, noise_se), lower, upper = _reported(model, u, beta, (cov, noise_cov), fitted, ends)
    held = {p.name for k, p in enumerate(model.params) if not free[k]}  # fixed: no error to report
    se = {key: values for key, values in se.items() if key not in held}
    noise_se = {key: values for key, values in noise_se.items() if key not in held}

    parts, start = [], 0
    for _, rows in sets:
        part, start = slice(start, start + len(rows)), start + len(rows)

        def full(values: np.ndarray, part: slice = part) -> np.ndarray:
            out = np.full(units.total, np.nan)
            out[units.index[part]] = values[part]
            return out

        parts.append(
            Uncertainty(
                {key: full(v) for key, v in se.items()},
                {key: full(v) for key, v in lower.items()},
                {key: full(v) for key, v in upper.items()},
                full(np.full(n, dof)),
                noise_se={key: full(v) for key, v in noise_se.items()},
            )
        )
    return parts


def path_reaches(
    prob: Problem,
    units: Units,
    u: np.ndarray,
    fitted: np.ndarray,
    variance: np.ndarray,
    curvature: np.ndarray,
    mem_gb: float,
    names: Sequence[str] = CENTRE,
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Per unit, how far each way the likelihood interval of each parameter ``names`` reaches.

    The Laplace interval assumes the residual sum of squares is quadratic around the estimate; at low
    SNR it rises more slowly away from it, and the intervals are too narrow (docs/validation.md,
    "Laplace's position intervals"; σ's, on a pRF small against the bar, more slowly on one side).
    Along each parameter's profile path as the curvature gives it (the other parameters moved by
    their regression on it, ``curvature[:, :, j] / curvature[:, j, j]``; the linear weights profiled
    out), the residual sum of squares is evaluated (by the same kernel at the estimate itself, so
    that both ends of each difference share its rounding) at :data:`PATH_STEPS` curvature standard
    errors each way, and where its rise over the residual variance first reaches 1.96² is found on
    each side (:func:`root_deviance_reach`): 1.96 each way where the sum of squares is quadratic.

    Parameters
    ----------
    prob : Problem
        The (whitened) problem of the fit.
    units : Units
        Its units, ``u``'s rows.
    u : ndarray, shape (n, K)
        Their internal parameters at the estimate.
    fitted : ndarray of int
        The free internal parameters, ``curvature``'s first rows and columns in this order.
    variance : ndarray, shape (n,)
        The residual variance at the estimate.
    curvature : ndarray, shape (n, P, P)
        The Laplace covariance (fitted parameters, then the linear weights).
    mem_gb : float
        Memory budget of a batch.
    names : sequence of str
        The parameters whose paths are evaluated (those not fitted are left out).

    Returns
    -------
    dict
        ``curvature``'s row of each such parameter to its reaches below and above the estimate
        ((n,) each, in curvature standard errors; 1.96 where the path is singular).
    """
    model = prob.model
    rows = [j for j, k in enumerate(fitted) if model.names[k] in names]
    n = len(u)
    if not rows or n == 0:
        return {}
    steps = np.concatenate([-PATH_STEPS[::-1], PATH_STEPS])
    points = [u]  # the estimate itself first, then each parameter's path, unit by unit
    for j in rows:
        with np.errstate(divide="ignore", invalid="ignore"):  # singular: no path, 1.96 below
            direction = curvature[:, : fitted.size, j] / np.sqrt(curvature[:, j, j])[:, None]
        direction = np.nan_to_num(direction, nan=0.0, posinf=0.0, neginf=0.0)
        moved = np.repeat(u, steps.size, axis=0)
        moved[:, fitted] += np.repeat(direction, steps.size, axis=0) * np.tile(steps, n)[:, None]
        points.append(moved)
    of_unit = np.concatenate([np.arange(n), *[np.repeat(np.arange(n), steps.size)] * len(rows)])
    rss = rss_rows([prob], np.concatenate(points), units.y, of_unit, mem_gb, "likelihood path")[0]
    scale = np.maximum(variance, 1e-30)[:, None]
    out = {}
    for i, j in enumerate(rows):
        block = rss[n + i * n * steps.size : n + (i + 1) * n * steps.size].reshape(n, steps.size)
        root = np.sqrt(np.maximum(block - rss[:n, None], 0.0) / scale)
        half = PATH_STEPS.size
        below = root_deviance_reach(PATH_STEPS, root[:, half - 1 :: -1])
        above = root_deviance_reach(PATH_STEPS, root[:, half:])
        good = np.isfinite(below) & np.isfinite(above) & np.isfinite(curvature[:, j, j])
        out[j] = (np.where(good, below, Z95), np.where(good, above, Z95))
    return out


def path_factors(
    reaches: dict[int, tuple[np.ndarray, np.ndarray]], fitted: np.ndarray, names: Sequence[str]
) -> tuple[dict[int, np.ndarray], dict[int, tuple[np.ndarray, np.ndarray]]]:
    """The factors on the standard errors, and on each end of the interval, from :func:`path_reaches`.

    The centre's factor is the two reaches' mean over 1.96, at least 1 (its interval stays
    symmetric). σ's ends are each its own side's reach over 1.96, at least 1 (the interval of log σ
    asymmetric where its likelihood is: a small pRF's is flat toward the floor), its standard error's
    factor their mean.

    Parameters
    ----------
    reaches : dict
        :func:`path_reaches`'s.
    fitted : ndarray of int
        The free internal parameters, the rows' order.
    names : sequence of str
        The model's internal parameter names.

    Returns
    -------
    factors : dict
        Row to the factor on its standard error (n,).
    ends : dict
        Row to the factors on its interval's lower and upper half-widths, relative to ``factors``.
    """
    factors, ends = {}, {}
    for j, (below, above) in reaches.items():
        if names[fitted[j]] in CENTRE:
            factors[j] = np.maximum(1.0, (below + above) / (2.0 * Z95))
            continue
        low, high = np.maximum(1.0, below / Z95), np.maximum(1.0, above / Z95)
        factors[j] = 0.5 * (low + high)
        ends[j] = (low / factors[j], high / factors[j])
    return factors, ends


def root_deviance_reach(steps: np.ndarray, root: np.ndarray, level: float = Z95) -> np.ndarray:
    """Where a root deviance first reaches ``level``, per unit, along one side of a path.

    Parameters
    ----------
    steps : ndarray, shape (points,)
        Increasing distances from the estimate (> 0), where ``root`` was evaluated.
    root : ndarray, shape (n, points)
        ``√(ΔRSS / s²)`` there (0 at the estimate).
    level : float
        The root deviance of the interval's end (1.96 for 95 %).

    Returns
    -------
    ndarray, shape (n,)
        The distance, interpolated linearly between the estimate and the points; where ``root`` stays
        below ``level``, extrapolated from the last point as if the deviance were quadratic beyond it
        (``steps[-1] · level / root[-1]``), at most :data:`PATH_REACH_LIMIT` times ``steps[-1]``.
    """
    steps = np.asarray(steps, dtype=np.float64)
    root = np.asarray(root, dtype=np.float64)
    last = steps[-1] * level / np.maximum(root[:, -1], 1e-12)
    reach = np.minimum(last, PATH_REACH_LIMIT * steps[-1])
    known = np.concatenate([np.zeros((len(root), 1)), root], axis=1)
    at = np.concatenate([[0.0], steps])
    for i in range(len(steps), 0, -1):  # inward, so the first crossing from the estimate wins
        crosses = (known[:, i] >= level) & (known[:, i - 1] < level)
        share = (level - known[:, i - 1]) / np.maximum(known[:, i] - known[:, i - 1], 1e-12)
        reach = np.where(crosses, at[i - 1] + share * (at[i] - at[i - 1]), reach)
    return reach


def _lag_weights(recipe: CovarianceRecipe, q: np.ndarray, frames: int) -> np.ndarray:
    """The kernel's (2, lags + 1, frames) weights: the recipe's, then times ``(I - q qᵀ)_{t,t-lag}``."""
    if recipe.lag_weights is None:
        return np.zeros((2, 0, frames))
    band = np.zeros_like(recipe.lag_weights)
    for lag in range(band.shape[0]):
        band[lag, lag:] = (1.0 if lag == 0 else 0.0) - np.einsum("tk,tk->t", q[lag:], q[: frames - lag])
    return np.stack([recipe.lag_weights, recipe.lag_weights * band])


def _inverse(info: np.ndarray) -> np.ndarray:
    """Batched inverse of symmetric information matrices; NaN, inf on the diagonal, where singular."""
    scale = np.sqrt(np.maximum(np.einsum("nii->ni", info), 1e-300))
    corr = info / scale[:, :, None] / scale[:, None, :]
    eigval, eigvec = np.linalg.eigh(np.nan_to_num(corr))
    singular = ~np.isfinite(corr).all(axis=(1, 2)) | (eigval[:, 0] <= 1e-10 * np.abs(eigval[:, -1]))
    eigval = np.where(eigval > 0, eigval, np.inf)
    inv = np.einsum("nij,nj,nkj->nik", eigvec, 1.0 / eigval, eigvec) / scale[:, :, None] / scale[:, None, :]
    rows, diag = np.flatnonzero(singular), np.arange(info.shape[1])
    inv[rows] = np.nan
    inv[rows[:, None], diag[None], diag[None]] = np.inf
    return inv


def reported_values(model, u: np.ndarray, amplitude: np.ndarray) -> dict[str, np.ndarray]:
    """The reported parameters with amplitude, eccentricity and polar angle, from internal values.

    Parameters
    ----------
    model : PRFModel
        The model.
    u : ndarray, shape (units, K)
        Internal parameters.
    amplitude : ndarray, shape (units,)
        Amplitudes.

    Returns
    -------
    dict
        Reported key → (units,) values.
    """
    theta = natural_values(model.params, u)
    out = dict(model.report(theta, amplitude))
    out["amplitude"] = amplitude
    out["polar_angle"], out["eccentricity"] = catalog.visual_field_polar(out["x"], out["y"])
    return out


def _reported(
    model,
    u: np.ndarray,
    amplitude: np.ndarray,
    covs: Sequence[np.ndarray],
    fitted: np.ndarray,
    ends: dict[int, tuple[np.ndarray, np.ndarray]] | None = None,
) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Delta-method standard errors of the reported values under each covariance, and the intervals.

    The report's gradients are taken once for all of ``covs``; the transformed intervals are the
    first one's. ``ends`` maps a fitted row to the factors on its internal interval's lower and upper
    half-widths (:func:`path_factors`); 1 for the others.
    """
    ends = ends or {}
    n_free = fitted.size
    base = reported_values(model, u, amplitude)
    grads = {key: np.zeros((len(u), n_free + 1)) for key in base}
    for j in range(n_free + 1):
        if j < n_free:
            step = _RELATIVE_STEP * (1.0 + np.abs(u[:, fitted[j]]))
            up, down = u.copy(), u.copy()
            up[:, fitted[j]] += step
            down[:, fitted[j]] -= step
            plus, minus = reported_values(model, up, amplitude), reported_values(model, down, amplitude)
        else:
            step = _RELATIVE_STEP * (1.0 + np.abs(amplitude))
            plus = reported_values(model, u, amplitude + step)
            minus = reported_values(model, u, amplitude - step)
        for key in base:
            diff = plus[key] - minus[key]
            if key == "polar_angle":
                diff = (diff + 180.0) % 360.0 - 180.0
            grads[key][:, j] = diff / (2.0 * step)
    errors = []
    for cov in covs:
        block = cov[:, : n_free + 1][:, :, : n_free + 1]  # internal parameters, then the amplitude
        finite, bad = np.nan_to_num(block, nan=0.0, posinf=0.0), ~np.isfinite(block).all(axis=(1, 2))
        errors.append(
            {
                key: np.where(bad, np.inf, np.sqrt(np.maximum(np.einsum("ni,nij,nj->n", g, finite, g), 0.0)))
                for key, g in grads.items()
            }
        )
    block = covs[0][:, : n_free + 1][:, :, : n_free + 1]
    lower, upper = {}, {}
    theta = natural_values(model.params, u)
    for j, k in enumerate(fitted):
        param = model.params[k]
        if param.transform == "identity" or param.name not in base:
            continue
        if not np.allclose(base[param.name], theta[:, k], rtol=1e-12, equal_nan=True):
            continue
        se_u = np.sqrt(np.maximum(np.diagonal(block, axis1=1, axis2=2)[:, j], 0.0))
        sides = ends.get(j, (1.0, 1.0))
        for bound, sign, side in ((lower, -1.0, sides[0]), (upper, 1.0, sides[1])):
            moved = u.copy()
            moved[:, k] = u[:, k] + sign * Z95 * side * np.where(np.isfinite(se_u), se_u, 1e6)
            bound[param.name] = natural_values(model.params, moved)[:, k]
    return errors, lower, upper


def doubtful_uncertainty(unc: Uncertainty, params: dict[str, np.ndarray], radius: float) -> np.ndarray:
    """Per unit: the data do not pin the estimate down (the ``uncertain`` status bit).

    A unit is uncertain where a standard error of x, y or σ is not finite (its information matrix is
    singular), where the centre's standard error exceeds :data:`CENTRE_SE_LIMIT` of the stimulated
    radius, where the centre's 95 % interval of eccentricity leaves the stimulated field (the edge
    degeneracy: a pRF partly outside the field explains the data about as well moved outward with a
    larger σ), or where σ's interval is wider than :data:`SIGMA_WIDTH_LIMIT` of the stimulated
    radius.

    Parameters
    ----------
    unc : Uncertainty
        The fit's standard errors and intervals.
    params : dict
        The fit's reported parameters (NaN where not fitted); units without standard errors (NaN:
        not fitted, or grid-only) are never flagged.
    radius : float
        The largest stimulated eccentricity, degrees.

    Returns
    -------
    ndarray of bool
    """
    fitted = np.isfinite(params["x"]) & ~np.isnan(unc.se["x"])  # NaN: not computed (grid-only)
    se_x, se_y = unc.se["x"], unc.se["y"]
    centre_se = np.fmax(se_x, se_y)
    singular = ~np.isfinite(centre_se)
    wide = centre_se > CENTRE_SE_LIMIT * radius
    leaves = np.hypot(params["x"], params["y"]) + Z95 * unc.se["eccentricity"] > radius
    out = singular | wide | leaves
    if "sigma" in unc.lower:
        width = unc.upper["sigma"] - unc.lower["sigma"]
        out |= ~np.isfinite(unc.se["sigma"]) | (width > SIGMA_WIDTH_LIMIT * radius)
    return fitted & out
