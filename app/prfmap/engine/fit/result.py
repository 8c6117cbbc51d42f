"""``FitResult``: a fit's per-unit parameters, and the checks that give each unit its status."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from prfmap.engine import catalog, kernels
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import batch_size, compiled, pad, run_batches
from prfmap.engine.catalog.result import FitResult
from prfmap.engine.models import InternalBounds, PRFModel
from prfmap.engine.models.transforms import InternalParameter, natural_values, saturated, transform_of
from prfmap.engine.problem import Problem, Units

__all__ = [
    "CheckedFit",
    "FinalFit",
    "FitResult",
    "bounds_record",
    "checked_fit",
    "final_fit",
    "keeping_gaussian",
]


@dataclass(frozen=True)
class FinalFit:
    """The final linear fit at given internal parameters, before the status checks.

    Attributes
    ----------
    params : dict
        Reported parameters, (units,) each (NaN for units without usable data).
    r2, loss : ndarray, shape (units,)
        Variance explained and residual cost.
    predictions : ndarray or None
        (units, frames) fitted time courses, when asked for.
    flags : dict
        The model's own per-unit flags (``surround_vanished``), and ``took_gaussian``.
    seconds : float
        Time it took.
    """

    params: dict[str, np.ndarray]
    r2: np.ndarray
    loss: np.ndarray
    predictions: np.ndarray | None
    flags: dict[str, np.ndarray]
    seconds: float


@dataclass(frozen=True)
class CheckedFit:
    """The final fit after the checks: every unit's parameters, status and flags.

    Attributes
    ----------
    params, r2, loss, predictions, flags, seconds
        As :class:`FinalFit`, with NaN where a unit has no signal and the model's flags only where
        it was fitted.
    status : ndarray, shape (units,)
        Sum of the :data:`~prfmap.engine.catalog.STATUS_FLAGS` bits of each unit.
    u : ndarray, shape (fitted units, K)
        The internal parameters written (the start where the refinement was rejected).
    """

    params: dict[str, np.ndarray]
    r2: np.ndarray
    loss: np.ndarray
    predictions: np.ndarray | None
    flags: dict[str, np.ndarray]
    seconds: float
    status: np.ndarray
    u: np.ndarray


def final_fit(
    prob: Problem,
    units: Units,
    u: np.ndarray,
    *,
    shape: tuple[int, int],
    mem_gb: float,
    with_predictions: bool,
    rows: np.ndarray | None = None,
) -> FinalFit:
    """Linear weights, baseline and r² at the final parameters; every unit's reported parameters.

    Parameters
    ----------
    prob : Problem
        The fit's tensors.
    units : Units
        The units with usable data and their projected time courses.
    u : ndarray, shape (len(units.index), K)
        Their internal parameters.
    shape : tuple of int
        (units, frames) of all the data.
    mem_gb : float
        Memory budget of a batch.
    with_predictions : bool
        Also the fitted time courses.
    rows : ndarray of int, optional
        Only these of the units (positions in ``units.index`` and ``u``); the others are NaN.

    Returns
    -------
    FinalFit
    """
    t0 = time.perf_counter()
    if rows is not None:
        units, u = units.rows(rows), u[rows]
    model, dtype, n = prob.model, prob.dtype, len(u)
    fn = compiled(kernels.finalize, model)
    beta, baseline, cost = np.empty((n, prob.n_bases)), np.empty(n), np.empty(n)
    fitted = np.empty_like(units.y) if with_predictions else None

    def run(start: int, stop: int, batch: int) -> None:
        out = fn(
            tensor(pad(u[start:stop], batch), dtype),
            tensor(pad(units.y[start:stop], batch), dtype),
            tensor(pad(units.raw[start:stop], batch), dtype),
            prob.stim,
            prob.hrf_t,
            prob.q,
        )
        k = stop - start
        beta[start:stop], baseline[start:stop] = to_numpy(out[0])[:k], to_numpy(out[1])[:k]
        cost[start:stop] = to_numpy(out[2])[:k]
        if fitted is not None:
            fitted[start:stop] = to_numpy(out[3])[:k]

    run_batches(n, batch_size(prob, mem_gb, 0), run, "finalize", None)
    theta = natural_values(model.params, u)
    seconds = time.perf_counter() - t0

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
    return FinalFit(params, r2, full(cost), predictions, flags, seconds)


def checked_fit(
    final: Callable[[np.ndarray], FinalFit],
    u: np.ndarray,
    u_start: np.ndarray,
    index: np.ndarray,
    bounds: InternalBounds,
    free: np.ndarray,
    flags: Mapping[str, np.ndarray],
    params: Sequence[InternalParameter],
) -> CheckedFit:
    """``final(u)``, with the unit's start instead where the refinement left the valid range.

    Every unit's status.

    Parameters
    ----------
    final : callable
    ``final(u, rows=None) -> FinalFit`` (:func:`final_fit` with its problem bound).
    u, u_start : ndarray, shape (units, K)
    Refined and starting (grid point or seed) internal parameters of the fitted units.
    index : ndarray of int
    Which units of the data they are.
    bounds : InternalBounds
    The refinement's bounds.
    free : ndarray, shape (K,)
    1 for each fitted internal parameter.
    flags : mapping
    The refinement's per-unit flags (``refined``, ``not_converged``, ``grid_only``).
    params : sequence of InternalParameter
    The model's internal parameters (their names, in column order): one whose range transform reached its end
    (:func:`~prfmap.engine.models.transforms.saturated`) is on a bound too.

    Returns
    -------
    CheckedFit
    """
    inside = np.clip(u, bounds.lower, bounds.upper)  # a float32 step may end a hair past its bound
    u = np.where(np.abs(u - inside) <= BOUND_TOLERANCE * (1.0 + np.abs(inside)), inside, u)
    result = final(u)
    rejected = flags["refined"] & (~_valid(result, index) | _amplitude_capped(result, index))
    if rejected.any():  # back to the start, chosen for its positive correlation with the data
        u = np.where(rejected[:, None], u_start, u)
        result = _replaced(result, final(u, rows=np.flatnonzero(rejected)), index[rejected])
    checks = {**flags, "refinement_rejected": rejected}
    names = tuple(p.name for p in params)
    for name, on in _bound_flags(u, bounds, free, names).items():
        checks[name] = flags["refined"] & ~rejected & on
    if params:
        ends = (saturated(params, u) & (np.asarray(free) > 0)[None, :]).any(axis=1)
        checks["at_bound"] = checks["at_bound"] | (flags["refined"] & ~rejected & ends)
    checks["at_bound"] = checks["at_bound"] | _amplitude_capped(result, index)
    checks["not_converged"] = flags["not_converged"] & ~rejected
    for name, on in result.flags.items():  # the model's own (surround_vanished)
        checks[name] = on[index]
    fitted = np.zeros(len(result.r2), dtype=bool)
    fitted[index] = _valid(result, index)
    params = {
        k: np.where(fitted, v, np.nan) for k, v in _within_bounds(result.params, params, bounds).items()
    }
    r2, loss = np.where(fitted, result.r2, np.nan), np.where(fitted, result.loss, np.nan)
    model_flags = {name: on & np.isfinite(r2) for name, on in result.flags.items()}
    status = _status(fitted, index, checks)
    return CheckedFit(params, r2, loss, result.predictions, model_flags, result.seconds, status, u)


GAUSSIAN_FIT = ("x", "y", "sigma", "amplitude", "baseline", "r2", "loss")
"""What a Gaussian fit of the same data must give for a model to take it over (:func:`keeping_gaussian`)."""


def keeping_gaussian(
    final: Callable[..., FinalFit],
    model: PRFModel,
    index: np.ndarray,
    kept: np.ndarray,
    gauss: Mapping[str, np.ndarray],
) -> Callable[..., FinalFit]:
    """``final`` where the units ``kept`` take a Gaussian fit of the same data instead of a final fit.

    A model seeded from a Gaussian fit (a comparison of models) does not seed the units that fit
    explains too little to refine: at those, the model is that Gaussian (its extras where it is one,
    :meth:`PRFModel.as_gaussian`), with the Gaussian's linear fit, r², loss and time courses, not
    computed again.

    Parameters
    ----------
    final : callable
        ``final(u, rows=None) -> FinalFit`` (:func:`final_fit` with its problem bound).
    model : PRFModel
        The model fitted.
    index : ndarray of int
        The units of the data ``u`` holds.
    kept : ndarray of bool, shape (len(index),)
        The units that keep the Gaussian fit.
    gauss : mapping
        The Gaussian fit of the same units (:data:`GAUSSIAN_FIT`, and ``hrf_deriv``, ``hrf_disp``
        and ``predictions`` where the final fit has them), one row per unit of ``index``.

    Returns
    -------
    callable
        ``final`` itself where nothing is kept or the Gaussian fit lacks something the final fit gives.
    """
    if not kept.any() or model.as_gaussian(np.ones((1, len(model.names)))) is None:
        return final
    if not set(GAUSSIAN_FIT) <= set(gauss):
        return final

    def run(u: np.ndarray, rows: np.ndarray | None = None) -> FinalFit:
        if rows is not None:
            return final(u, rows=rows)
        result = final(u, rows=np.flatnonzero(~kept))
        wanted = {k for k in catalog.HRF_PARAMETERS if k in result.params}
        if result.predictions is not None:
            wanted.add("predictions")
        if not wanted <= set(gauss):
            return final(u)
        merged = _replaced(result, _as_gaussian(model, gauss, kept, index[kept], result), index[kept])
        taken = np.zeros(len(merged.r2), dtype=bool)
        taken[index[kept]] = True
        return dataclasses.replace(merged, flags={**merged.flags, catalog.TOOK_GAUSSIAN: taken})

    return run


def _as_gaussian(
    model: PRFModel, gauss: Mapping[str, np.ndarray], kept: np.ndarray, at: np.ndarray, like: FinalFit
) -> FinalFit:
    """The Gaussian fit ``gauss`` at its units ``kept`` (data units ``at``) as the model's."""
    rows = {k: np.asarray(v)[kept] for k, v in gauss.items()}
    theta, gain = model.as_gaussian(model.from_report({k: rows[k] for k in ("x", "y", "sigma")}))
    amplitude = rows["amplitude"] / gain

    def full(values: np.ndarray, fill: float = np.nan) -> np.ndarray:
        out = np.full(len(like.r2), fill)
        out[at] = values
        return out

    params = {k: full(v) for k, v in model.report(theta, amplitude).items()}
    params["amplitude"], params["baseline"] = full(amplitude), full(rows["baseline"])
    for key in catalog.HRF_PARAMETERS:
        if key in like.params:
            params[key] = full(rows[key])
    predictions = None
    if like.predictions is not None:
        predictions = np.full(like.predictions.shape, np.nan)
        predictions[at] = rows["predictions"]
    flags = {k: full(v, False).astype(bool) for k, v in model.flags(theta).items()}
    return FinalFit(params, full(rows["r2"]), full(rows["loss"]), predictions, flags, 0.0)


def _replaced(result: FinalFit, redone: FinalFit, units: np.ndarray) -> FinalFit:
    """``result`` with the values of ``redone`` (a final fit of some units again) at ``units``."""
    mask = np.zeros(len(result.r2), dtype=bool)
    mask[units] = True

    def merged(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        return np.where(mask.reshape((-1,) + (1,) * (old.ndim - 1)), new, old)

    predictions = result.predictions
    if predictions is not None and redone.predictions is not None:
        predictions = merged(predictions, redone.predictions)
    return FinalFit(
        {k: merged(v, redone.params[k]) for k, v in result.params.items()},
        merged(result.r2, redone.r2),
        merged(result.loss, redone.loss),
        predictions,
        {k: merged(v, redone.flags.get(k, np.zeros_like(v))) for k, v in result.flags.items()},
        result.seconds + redone.seconds,
    )


def _valid(result: FinalFit, index: np.ndarray) -> np.ndarray:
    """Per fitted unit: finite cost and amplitude of the sign the models define (positive)."""
    amplitude = result.params["amplitude"][index]
    return np.isfinite(result.loss[index]) & np.isfinite(amplitude) & (amplitude > 0)


def _amplitude_capped(result: FinalFit, index: np.ndarray) -> np.ndarray:
    """Per fitted unit: the final linear fit held the amplitude at its catalogue bound's upper end."""
    return result.params["amplitude"][index] >= _amplitude_bound()[1] * (1.0 - 1e-6)


def _amplitude_bound() -> tuple[float, float]:
    """The amplitude's ``(low, high)`` from the catalogue (absolute limits: no stimulus scale needed).

    Returns
    -------
    tuple of float
    """
    low, high = catalog.PARAMETERS["amplitude"].bound.resolve()
    return float(low), float(high)


BOUND_TOLERANCE = 1e-4
"""An internal parameter this close to a bound (relative to 1 + |bound|) is on it."""


def _bound_flags(
    u: np.ndarray, bounds: InternalBounds, free: np.ndarray, names: tuple[str, ...]
) -> dict[str, np.ndarray]:
    """Per unit.

    ``size_at_floor`` where sigma ended on (within 1e-4 of) its lower bound, the resolution floor;
    ``at_bound`` where another fitted internal parameter, or the centre's eccentricity, ended on one of its
    bounds.
    """
    near = np.zeros((2,) + u.shape, dtype=bool)
    for side, limit in enumerate((bounds.lower, bounds.upper)):
        finite = np.isfinite(limit) & (free > 0)
        gap = np.abs(u - np.where(finite, limit, 0.0))
        near[side] = finite[None] & (gap <= BOUND_TOLERANCE * (1.0 + np.abs(limit)))
    floor = np.zeros(len(u), dtype=bool)
    if "sigma" in names:
        k = names.index("sigma")
        floor, near[0, :, k] = near[0, :, k].copy(), False
    centre_free = free[0] > 0 or free[1] > 0
    edge = centre_free & (np.hypot(u[:, 0], u[:, 1]) >= bounds.eccentricity * (1 - 1e-4))
    return {"at_bound": near.any(axis=(0, 2)) | edge, "size_at_floor": floor}


def _natural_limits(param: InternalParameter, bounds: InternalBounds, k: int) -> tuple[float, float]:
    """Natural values of parameter ``k``'s bounds (12 digits: exp(log(100)) is 100.00000000000004)."""
    return transform_of(param).natural_limits(bounds.lower[k], bounds.upper[k])


def _within_bounds(
    reported: Mapping[str, np.ndarray], params: Sequence[InternalParameter], bounds: InternalBounds
) -> dict[str, np.ndarray]:
    """``reported`` with each parameter the optimisers move directly held inside its natural bounds.

    The internal parameters are clipped to their bounds; an ``exp`` transform of a clipped value can
    still exceed the natural bound in its last digits (exp(log(100)) is 100.00000000000004).
    """
    out = dict(reported)
    for k, param in enumerate(params):
        if param.name in out and transform_of(param).held_by_bounds:
            low, high = _natural_limits(param, bounds, k)
            out[param.name] = np.clip(out[param.name], low, high)
    return out


def _status(fitted: np.ndarray, index: np.ndarray, flags: Mapping[str, np.ndarray]) -> np.ndarray:
    """The per-unit status bits (:data:`catalog.STATUS_FLAGS`), as floats.

    Units without usable data, or whose best fit has no positive response (the grid's best correlation
    is not positive), get ``no_signal`` (and NaN in every parameter, r² and the loss).
    """
    status = np.zeros(len(fitted), dtype=np.int64)
    status[~fitted] |= catalog.STATUS_BITS["no_signal"]
    for name, on in flags.items():
        if name in catalog.STATUS_BITS:
            status[index[on & fitted[index]]] |= catalog.STATUS_BITS[name]
    return status.astype(np.float64)


def bounds_record(model: PRFModel, bounds: InternalBounds, free: np.ndarray) -> dict[str, Any]:
    """The natural-unit bounds the refinement held each fitted parameter in, for the sidecars.

    Parameters
    ----------
    model : PRFModel
        The model.
    bounds : InternalBounds
        Internal bounds.
    free : ndarray, shape (K,)
        1 for each fitted parameter.

    Returns
    -------
    dict
        Parameter → ``[low, high]`` (None where open), and the centre's ``eccentricity``.
    """
    record: dict[str, Any] = {
        "eccentricity": [0.0, bounds.eccentricity],
        "amplitude": list(_amplitude_bound()),
    }
    for k, p in enumerate(model.params):
        if free[k] and (np.isfinite(bounds[0][k]) or np.isfinite(bounds[1][k])):
            low, high = _natural_limits(p, bounds, k)
            record[p.name] = [low if np.isfinite(low) else None, high if np.isfinite(high) else None]
    return record
