"""``FitResult``: a fit's per-unit parameters, and the checks that give each unit its status."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from prfmap.engine import catalog, core
from prfmap.engine.batching import batch_size, compiled, pad, run_batches
from prfmap.engine.core_ops import tensor, to_numpy
from prfmap.engine.models import Bounds, PRFModel, natural_values
from prfmap.engine.problem import Problem, Units

__all__ = ["FitResult", "bounds_record", "checked_fit", "final_fit"]


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


def final_fit(
    prob: Problem,
    units: Units,
    u: np.ndarray,
    *,
    shape: tuple[int, int],
    mem_gb: float,
    with_predictions: bool,
    timings: dict[str, float],
) -> FitResult:
    """Linear weights, baseline and r² at the final parameters; every unit's reported parameters."""
    t0 = time.perf_counter()
    model, dtype, n = prob.model, prob.dtype, len(u)
    fn = compiled(("finalize", model, dtype), partial(core.finalize, model))
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
    theta = natural_values(model, u)
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


def checked_fit(
    final: Callable[[np.ndarray], FitResult],
    u: np.ndarray,
    u_start: np.ndarray,
    index: np.ndarray,
    bounds: Bounds,
    free: np.ndarray,
    flags: dict[str, np.ndarray],
    names: tuple[str, ...],
) -> FitResult:
    """``final(u)``, with the unit's start (grid point or seed) instead where the refinement left the
    valid range, and the status of every unit."""
    result = final(u)
    rejected = flags["refined"] & ~_valid(result, index)
    if rejected.any():  # back to the start, chosen for its positive correlation with the data
        u[rejected] = u_start[rejected]
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


def _bound_flags(
    u: np.ndarray, bounds: Bounds, free: np.ndarray, names: tuple[str, ...]
) -> dict[str, np.ndarray]:
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


def bounds_record(model: PRFModel, bounds: Bounds, free: np.ndarray) -> dict[str, Any]:
    """The natural-unit bounds the refinement held each fitted parameter in, for the sidecars."""
    record: dict[str, Any] = {"eccentricity": [0.0, bounds.eccentricity]}
    for k, p in enumerate(model.params):
        if free[k] and (np.isfinite(bounds[0][k]) or np.isfinite(bounds[1][k])):
            low, high = (
                float(np.exp(b[k])) if p.transform == "exp" else float(b[k])
                for b in (bounds.lower, bounds.upper)
            )
            record[p.name] = [low if np.isfinite(low) else None, high if np.isfinite(high) else None]
    return record
