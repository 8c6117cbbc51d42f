"""``fit_prf`` and ``predict``: grid search, linear fit and refinement over all units."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import keras
import numpy as np
from keras import ops

from prfmap.engine import catalog, core
from prfmap.engine.backend import compile_enabled, get_backend
from prfmap.engine.grid import grid_theta, polar_grid
from prfmap.engine.hrf import HRF_BASES, convolution_matrices, hrf_kernels
from prfmap.engine.models import PRFModel, floatx, get_model
from prfmap.engine.stimulus import Stimulus

ProgressFn = Callable[[str, int, int], None]
DEFAULT_MEM_GB = 2.0
logger = logging.getLogger(__name__)


@dataclass
class FitResult:
    """Per-unit pRF parameters, goodness of fit, timings and settings of one fit."""

    model: str
    params: dict[str, np.ndarray]
    r2: np.ndarray
    loss: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    predictions: np.ndarray | None = None

    def maps(self) -> dict[str, np.ndarray]:
        """Every parameter map under its BIDS file label, with ``r2``, ``polarangle``, ``eccentricity``."""
        derived = {
            "r2": self.r2,
            "polar_angle": np.degrees(np.arctan2(self.params["y"], self.params["x"])),
            "eccentricity": np.hypot(self.params["x"], self.params["y"]),
        }
        return {catalog.PARAMETERS[k].label: v for k, v in {**self.params, **derived}.items()}


@dataclass
class _Problem:
    """Tensors shared by every stage of one fit."""

    model: PRFModel
    stim: tuple
    hrf_t: Any
    q: Any
    dtype: str
    n_bases: int
    pixels: int
    frames: int


_COMPILED: dict[tuple, Callable] = {}


def _compiled(key: tuple, fn: Callable) -> Callable:
    """Compile ``fn`` once per process and key (so shapes seen before run without re-tracing)."""
    if not compile_enabled():
        return fn
    if key not in _COMPILED:
        _COMPILED[key] = get_backend().compile_fun(fn)
    return _COMPILED[key]


def _tensor(a: np.ndarray, dtype: str) -> Any:
    return ops.convert_to_tensor(np.ascontiguousarray(a, dtype=dtype), dtype=dtype)


def _numpy(t: Any) -> np.ndarray:
    return np.asarray(ops.convert_to_numpy(t))


def nuisance_basis(n_frames: int, nuisance: np.ndarray | None) -> np.ndarray:
    """Orthonormal basis (frames, k) of a constant and the mean-centred nuisance regressors."""
    cols = [np.ones((n_frames, 1))]
    if nuisance is not None:
        nuisance = np.asarray(nuisance, dtype=np.float64)
        if nuisance.ndim == 1:
            nuisance = nuisance[:, None]
        if nuisance.shape[0] != n_frames:
            raise ValueError(f"nuisance has {nuisance.shape[0]} frames, the data {n_frames}")
        cols.append(nuisance - nuisance.mean(axis=0))
    u, s, _ = np.linalg.svd(np.hstack(cols), full_matrices=False)
    return u[:, s > s.max() * 1e-8]


def _problem(model: PRFModel, stim: Stimulus, tr: float, n_bases: int, nuisance: np.ndarray | None,
             dtype: str, slice_time_ref: float) -> _Problem:
    if dtype == "float64":
        get_backend().enable_float64()
    design, px, py = stim.stimulated
    hrf = convolution_matrices(hrf_kernels(tr, n_bases, slice_time_ref), stim.run_lengths)
    pixel_area = stim.pixel_size**2
    stim_t = (_tensor(design.T, dtype), _tensor(px, dtype), _tensor(py, dtype), pixel_area)
    return _Problem(model, stim_t, _tensor(np.transpose(hrf, (0, 2, 1)), dtype),
                    _tensor(nuisance_basis(stim.n_frames, nuisance), dtype), dtype, n_bases,
                    design.shape[1], stim.n_frames)


def _tiles(n: int, size: int) -> list[tuple[int, int]]:
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def _pad(a: np.ndarray, size: int) -> np.ndarray:
    if a.shape[0] == size:
        return a
    pad = np.zeros((size - a.shape[0],) + a.shape[1:], dtype=a.dtype)
    return np.concatenate([a, pad])


def _padded_size(n: int, smallest: int = 256) -> int:
    """Batch size for ``n`` rows: a power of two, at least ``smallest``, so few shapes get compiled."""
    return max(smallest, 1 << max(int(n - 1).bit_length(), 0))


def _budget_rows(mem_gb: float, bytes_per_row: float, lo: int = 16, hi: int = 65536) -> int:
    rows = int(mem_gb * 2**30 / max(bytes_per_row, 1.0))
    return int(np.clip(rows, lo, hi))


def _grid_search(prob: _Problem, y_proj: np.ndarray, theta_grid: np.ndarray, mem_gb: float,
                 progress: ProgressFn | None,
                 timings: dict[str, float]) -> tuple[np.ndarray, np.ndarray]:
    model, dtype = prob.model, prob.dtype
    t0 = time.perf_counter()
    item = np.dtype(dtype).itemsize
    n_grid = theta_grid.shape[0]
    g_tile = min(n_grid, _budget_rows(mem_gb / 2, prob.pixels * item * 3, hi=4096))
    predict_fn = _compiled(("grid_pred", model.name, dtype),
                           partial(core.grid_predictions, model))
    preds = []
    for start, stop in _tiles(n_grid, g_tile):
        theta = _pad(theta_grid[start:stop], g_tile)
        theta[stop - start:] = theta_grid[:1]
        preds.append(_numpy(predict_fn(_tensor(theta, dtype), prob.stim, prob.hrf_t, prob.q))
                     [: stop - start])
    grid_unit = np.concatenate(preds)
    timings["grid_predictions"] = time.perf_counter() - t0
    t0 = time.perf_counter()

    norm = np.linalg.norm(y_proj, axis=1, keepdims=True)
    y_unit = np.divide(y_proj, norm, out=np.zeros_like(y_proj), where=norm > 0)
    n_units = y_unit.shape[0]
    g_block = min(n_grid, _budget_rows(mem_gb / 4, prob.frames * item, hi=16384))
    u_tile = min(_padded_size(n_units), _budget_rows(mem_gb / 2, g_block * item * 2, hi=16384))
    score_fn = _compiled(("grid_score", dtype), core.grid_score)
    best = np.full(n_units, -np.inf)
    best_idx = np.zeros(n_units, dtype=np.int64)
    grid_blocks = [(_tensor(_pad(grid_unit[a:b], g_block), dtype), a)
                   for a, b in _tiles(n_grid, g_block)]
    unit_tiles = _tiles(n_units, u_tile)
    for i, (start, stop) in enumerate(unit_tiles):
        yt = _tensor(_pad(y_unit[start:stop], u_tile), dtype)
        for block, offset in grid_blocks:
            score, idx = score_fn(yt, block)
            score, idx = _numpy(score)[: stop - start], _numpy(idx)[: stop - start] + offset
            better = score > best[start:stop]
            best[start:stop] = np.where(better, score, best[start:stop])
            best_idx[start:stop] = np.where(better, idx, best_idx[start:stop])
        if progress:
            progress("grid", i + 1, len(unit_tiles))
    timings["grid_scoring"] = time.perf_counter() - t0
    return theta_grid[np.minimum(best_idx, n_grid - 1)], best


def _batch_size(prob: _Problem, mem_gb: float, derivatives: int) -> int:
    item = np.dtype(prob.dtype).itemsize
    n_gauss = catalog.MODELS[prob.model.name].gaussians
    per_unit = item * (prob.pixels * (derivatives + 1) * (n_gauss + 1)
                       + prob.frames * (derivatives + 1) * (prob.n_bases + 2) * 2)
    return _budget_rows(mem_gb, per_unit, lo=8, hi=8192)


def _run_batches(n_units: int, batch: int, run: Callable[[int, int, int], None],
                 stage: str, progress: ProgressFn | None, shrink: bool = True) -> None:
    """Call ``run(start, stop, batch)`` over the units; halve the batch and retry on out-of-memory."""
    if shrink:
        batch = min(batch, _padded_size(n_units))
    backend = get_backend()
    start = 0
    while start < n_units:
        stop = min(start + batch, n_units)
        try:
            run(start, stop, batch)
        except Exception as exc:
            if batch <= 8 or not backend.is_out_of_memory(exc):
                raise
            batch //= 2
            logger.warning("%s: out of device memory, retrying with batches of %d units", stage, batch)
            continue
        start = stop
        if progress:
            progress(stage, -(-start // batch), -(-n_units // batch))


def _refine_lm(prob: _Problem, u0: np.ndarray, y: np.ndarray, free: np.ndarray, mem_gb: float,
               max_iter: int, tol: float, progress: ProgressFn | None,
               round_length: int = 8) -> tuple[np.ndarray, list[int]]:
    """Levenberg–Marquardt in rounds: units still moving after a round are re-batched for the next,
    so converged units stop costing anything."""
    model, dtype = prob.model, prob.dtype
    backend = get_backend()
    init_fn = partial(core.lm_init, model)
    step_fn = partial(core.lm_step, model, tol=tol)

    def loop(u, lam, y, free, stim, hrf_t, q):
        state = init_fn(u, lam, y, free, stim, hrf_t, q) + (ops.convert_to_tensor(0),)

        def cond(*s):
            return ops.any(s[5])

        def body(*s):
            return step_fn(s[:-1], y, free, stim, hrf_t, q) + (s[-1] + 1,)

        return keras.ops.while_loop(cond, body, state, maximum_iterations=round_length)

    loop_compiled = backend.LOOPS_COMPILE and compile_enabled()
    loop_fn = _compiled(("lm_loop", model.name, dtype, round_length, tol), loop)
    init_c = _compiled(("lm_init", model.name, dtype), init_fn)
    step_c = _compiled(("lm_step", model.name, dtype, tol), step_fn)
    u = u0.copy()
    lam = np.full(len(u0), 1e-3)
    still = np.ones(len(u0), dtype=bool)
    iterations = [0, 0]  # most iterations of a unit, unit-iterations computed
    free_t = _tensor(free, dtype)
    # one batch shape for every round, so the loop is compiled once
    batch = min(_batch_size(prob, mem_gb, u0.shape[1]), _padded_size(len(u0)))

    for done_rounds in range(-(-max_iter // round_length)):
        todo = np.flatnonzero(still)
        if todo.size == 0:
            break

        def run(start: int, stop: int, batch: int, todo: np.ndarray = todo) -> None:
            rows = todo[start:stop]
            args = (_tensor(_pad(u[rows], batch), dtype), _tensor(_pad(lam[rows], batch), dtype),
                    _tensor(_pad(y[rows], batch), dtype), free_t, prob.stim, prob.hrf_t, prob.q)
            if loop_compiled:
                state = loop_fn(*args)
                n_it = int(_numpy(state[-1]))
            else:
                state = init_c(*args)
                n_it = 0
                while n_it < round_length and bool(_numpy(ops.any(state[5]))):
                    state = step_c(state, *args[2:])
                    n_it += 1
            k = stop - start
            u[rows] = _numpy(state[0])[:k]
            lam[rows] = _numpy(state[4])[:k]
            still[rows] = _numpy(state[5])[:k]
            iterations[1] += n_it * batch

        _run_batches(todo.size, batch, run, "refine", progress, shrink=False)
        iterations[0] = min(max_iter, (done_rounds + 1) * round_length)
    return u, iterations


def _refine_sgd(prob: _Problem, u0: np.ndarray, y: np.ndarray, free: np.ndarray, mem_gb: float,
                max_iter: int, tol: float, learning_rate: float, patience: int,
                progress: ProgressFn | None) -> tuple[np.ndarray, list[int]]:
    model, dtype = prob.model, prob.dtype
    backend = get_backend()
    batch = _batch_size(prob, mem_gb, u0.shape[1]) // 2 or 8
    batch = min(batch, _padded_size(len(u0)))
    var = keras.Variable(np.zeros((batch, u0.shape[1]), dtype=dtype), dtype=dtype)
    optimizer = keras.optimizers.Adam(learning_rate=learning_rate)
    optimizer.build([var])
    # a fresh optimizer state (zero moments, iteration 0, learning rate) for every batch
    initial_vars = [_numpy(v.value) for v in optimizer.variables]
    grad_fn = backend.value_and_grad(
        lambda u, yb, stim, hrf_t, q: _sgd_objective(model, u, yb, stim, hrf_t, q), has_aux=True)

    def step(u, opt_vars, best, stall, active, yb, free, stim, hrf_t, q):
        (_, cost), grad = grad_fn(u, yb, stim, hrf_t, q)
        grad = ops.where(ops.isfinite(grad), grad, 0.0) * free[None]
        new_u, new_vars = optimizer.stateless_apply(opt_vars, [grad], [u])
        new_u = ops.where(active[:, None], new_u[0], u)
        improved = cost < best * (1.0 - tol)
        stall = ops.where(improved, 0.0, stall + 1.0)
        best = ops.minimum(best, cost)
        active = active & (stall < patience)
        return new_u, new_vars, best, stall, active

    def loop(u, opt_vars, yb, free, stim, hrf_t, q):
        n = ops.shape(u)[0]
        state = (u, opt_vars, ops.full((n,), np.inf, dtype=dtype), ops.zeros((n,), dtype=dtype),
                 ops.ones((n,), dtype="bool"), ops.convert_to_tensor(0))

        def cond(*s):
            return ops.any(s[4])

        def body(*s):
            return step(*s[:5], yb, free, stim, hrf_t, q) + (s[5] + 1,)

        return keras.ops.while_loop(cond, body, state, maximum_iterations=max_iter)

    loop_compiled = backend.LOOPS_COMPILE and compile_enabled()
    key = (model.name, dtype, max_iter, tol, learning_rate, patience, batch)
    loop_fn = _compiled(("sgd_loop",) + key, loop)
    step_c = _compiled(("sgd_step",) + key, step)
    free_t = _tensor(free, dtype)
    out = np.empty_like(u0)
    iterations = [0, 0]

    if not backend.STATELESS_OPTIMIZER:
        # TensorFlow: the optimizer updates ``var`` in place inside a compiled step
        def stateful_step(best, stall, active, yb, free, stim, hrf_t, q):
            u = ops.convert_to_tensor(var.value)
            (_, cost), grad = grad_fn(u, yb, stim, hrf_t, q)
            grad = ops.where(ops.isfinite(grad), grad, 0.0) * free[None]
            optimizer.apply([grad], [var])
            var.assign(ops.where(active[:, None], var.value, u))
            improved = cost < best * (1.0 - tol)
            stall = ops.where(improved, 0.0, stall + 1.0)
            return ops.minimum(best, cost), stall, active & (stall < patience)

        step_c = _compiled(("sgd_stateful",) + key, stateful_step)

    def run_stateful(start: int, stop: int, size: int) -> None:
        var.assign(_pad(u0[start:stop], size).astype(dtype))
        for v, init in zip(optimizer.variables, initial_vars, strict=True):
            v.assign(init)
        yb = _tensor(_pad(y[start:stop], size), dtype)
        state = (ops.full((size,), np.inf, dtype=dtype), ops.zeros((size,), dtype=dtype),
                 ops.ones((size,), dtype="bool"))
        n_it = 0
        while n_it < max_iter and bool(_numpy(ops.any(state[2]))):
            state = step_c(*state, yb, free_t, prob.stim, prob.hrf_t, prob.q)
            n_it += 1
        out[start:stop] = _numpy(var.value)[: stop - start]
        iterations[0] = max(iterations[0], n_it)
        iterations[1] += n_it * size

    def run(start: int, stop: int, size: int) -> None:
        ub = _tensor(_pad(u0[start:stop], size), dtype)
        yb = _tensor(_pad(y[start:stop], size), dtype)
        opt_vars = [ops.convert_to_tensor(v) for v in initial_vars]
        if loop_compiled:
            state = loop_fn(ub, opt_vars, yb, free_t, prob.stim, prob.hrf_t, prob.q)
            n_it = int(_numpy(state[-1]))
        else:
            n = size
            state = (ub, opt_vars, ops.full((n,), np.inf, dtype=dtype),
                     ops.zeros((n,), dtype=dtype), ops.ones((n,), dtype="bool"))
            n_it = 0
            while n_it < max_iter and bool(_numpy(ops.any(state[4]))):
                state = step_c(*state, yb, free_t, prob.stim, prob.hrf_t, prob.q)
                n_it += 1
        out[start:stop] = _numpy(state[0])[: stop - start]
        iterations[0] = max(iterations[0], n_it)
        iterations[1] += n_it * size

    _run_batches(len(u0), batch, run if backend.STATELESS_OPTIMIZER else run_stateful, "refine",
                 progress)
    return out, iterations


def _sgd_objective(model, u, y, stim, hrf_t, q):
    cost = core.vp_cost(model, u, y, stim, hrf_t, q)
    return ops.sum(cost), cost


def _finalize(prob: _Problem, u: np.ndarray, y: np.ndarray, y_raw: np.ndarray, mem_gb: float,
              with_predictions: bool) -> tuple[np.ndarray, ...]:
    model, dtype = prob.model, prob.dtype
    fn = _compiled(("finalize", model.name, dtype), partial(core.finalize, model))
    n = len(u)
    beta = np.empty((n, prob.n_bases))
    baseline, cost = np.empty(n), np.empty(n)
    fitted = np.empty_like(y) if with_predictions else None

    def run(start: int, stop: int, batch: int) -> None:
        out = fn(_tensor(_pad(u[start:stop], batch), dtype), _tensor(_pad(y[start:stop], batch), dtype),
                 _tensor(_pad(y_raw[start:stop], batch), dtype), prob.stim, prob.hrf_t, prob.q)
        k = stop - start
        beta[start:stop] = _numpy(out[0])[:k]
        baseline[start:stop] = _numpy(out[1])[:k]
        cost[start:stop] = _numpy(out[2])[:k]
        if fitted is not None:
            fitted[start:stop] = _numpy(out[3])[:k]

    _run_batches(n, _batch_size(prob, mem_gb, 0), run, "finalize", None)
    return beta, baseline, cost, fitted


def _free_mask(model: PRFModel, fixed: Mapping[str, float]) -> tuple[np.ndarray, dict[str, float]]:
    fixed = {**catalog.MODELS[model.name].fixed, **dict(fixed)}
    unknown = set(fixed) - set(model.names)
    if unknown:
        raise ValueError(
            f"cannot fix {sorted(unknown)} of model {model.name!r}; fixable: {', '.join(model.names)}"
        )
    return np.array([0.0 if n in fixed else 1.0 for n in model.names]), fixed


def fit_prf(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    model: str = "gauss",
    refine: str = "lm",
    *,
    nuisance: np.ndarray | None = None,
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
        A refiner of :data:`prfmap.engine.catalog.REFINERS`: ``lm``, ``sgd`` or ``none``:
        Levenberg–Marquardt, Adam SGD, or the grid + linear fit alone.
    nuisance : ndarray, shape (frames, k), optional
        Regressors that preprocessing removed (high-pass basis, confounds, run constants); data and every
        prediction are projected onto their orthogonal complement (a constant is always included).
    fit_hrf : bool
        Also fit per-unit weights of the HRF's temporal and dispersion derivatives.
    grid : dict, optional
        Grid of ``x``, ``y``, ``sigma`` (and model extras) points; default :func:`polar_grid`.
    mem_gb : float, optional
        Memory budget for tiles and batches (default 2 GB).
    dtype : {"float32", "float64"}
    seed : int
        Seed of the random generator (kept for reproducible future stochastic stages).
    fixed : dict, optional
        Internal parameters held at a value, e.g. ``{"n": 0.5}`` or ``{"baseline_norm": 1.0}``.
    max_iter : int, optional
        Iterations of the refinement (default 30 for LM, 400 for SGD).
    tol : float, optional
        Per-unit relative cost change under which a unit stops (default 1e-4 LM, 1e-5 SGD).
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
    t_start = time.perf_counter()
    prf_model = get_model(model)
    refiner = catalog.get_refiner(refine)
    dtype = floatx(dtype)
    data = np.asarray(data, dtype=np.float64)
    if data.ndim != 2 or data.shape[1] != stim.n_frames:
        raise ValueError(f"data must be (units, {stim.n_frames}) to match the stimulus, "
                         f"got {data.shape}")
    mem_gb = float(mem_gb or DEFAULT_MEM_GB)
    free, fixed_values = _free_mask(prf_model, fixed or {})
    n_bases = 3 if fit_hrf else 1
    timings: dict[str, float] = {}

    prob = _problem(prf_model, stim, tr, n_bases, nuisance, dtype, slice_time_ref)
    q_np = _numpy(prob.q).astype(np.float64)
    finite = np.all(np.isfinite(data), axis=1)
    clean = np.where(finite[:, None], data, 0.0)
    y_proj = clean - (clean @ q_np) @ q_np.T
    valid = finite & (np.sum(y_proj**2, axis=1) > 1e-12 * np.maximum(np.sum(clean**2, axis=1), 1e-30))
    index = np.flatnonzero(valid)
    timings["setup"] = time.perf_counter() - t_start

    t0 = time.perf_counter()
    theta_grid = grid_theta(prf_model, grid if grid is not None else polar_grid(stim))
    for name, value in fixed_values.items():
        theta_grid[:, prf_model.names.index(name)] = value
    theta0, grid_corr = _grid_search(prob, y_proj[index], theta_grid, mem_gb, progress, timings)
    timings["grid"] = time.perf_counter() - t0

    u = prf_model.internal(theta0)
    t0 = time.perf_counter()
    iterations = [0, 0]
    chosen = np.flatnonzero(np.maximum(grid_corr, 0.0) ** 2 >= refine_r2_min)
    if refine == "lm" and chosen.size:
        u[chosen], iterations = _refine_lm(prob, u[chosen], y_proj[index][chosen], free, mem_gb,
                                           max_iter or refiner.max_iter, tol or refiner.tol, progress)
    elif refine == "sgd" and chosen.size:
        u[chosen], iterations = _refine_sgd(prob, u[chosen], y_proj[index][chosen], free, mem_gb,
                                            max_iter or refiner.max_iter, tol or refiner.tol, learning_rate,
                                            20, progress)
    timings["refine"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    beta, baseline, cost, fitted = _finalize(prob, u, y_proj[index], clean[index], mem_gb,
                                             return_predictions)
    theta = _numpy(prf_model.natural(_tensor(u, dtype))[0]).astype(np.float64)
    timings["linear"] = time.perf_counter() - t0

    n_units = data.shape[0]

    def full(values: np.ndarray, fill: float = np.nan) -> np.ndarray:
        out = np.full(n_units, fill)
        out[index] = values
        return out

    amplitude = beta[:, 0]
    reported = prf_model.report(theta, amplitude)
    params = {k: full(v) for k, v in reported.items()}
    params["amplitude"] = full(amplitude)
    params["baseline"] = full(baseline)
    if fit_hrf:
        safe = np.where(amplitude != 0, amplitude, np.nan)
        params["hrf_deriv"] = full(beta[:, 1] / safe)
        params["hrf_disp"] = full(beta[:, 2] / safe)
    total = np.sum(y_proj[index] ** 2, axis=1)
    r2 = full(1.0 - cost / np.maximum(total, 1e-30), 0.0)
    predictions = None
    if return_predictions:
        predictions = np.full(data.shape, np.nan)
        predictions[index] = fitted
    backend = get_backend()
    timings["total"] = time.perf_counter() - t_start
    settings = {
        "model": prf_model.name,
        "refine": refine,
        "hrf": "SPM canonical" + (" + temporal and dispersion derivatives" if fit_hrf else ""),
        "hrf_bases": list(HRF_BASES[:n_bases]),
        "slice_time_ref": slice_time_ref,
        "grid_points": int(theta_grid.shape[0]),
        "refine_r2_min": float(refine_r2_min),
        "units_refined": int(chosen.size) if refine != "none" else 0,
        "iterations": int(iterations[0]),
        "unit_iterations": int(iterations[1]),
        "pixels": int(prob.pixels),
        "max_iter": int(max_iter or refiner.max_iter),
        "fixed": {k: float(v) for k, v in fixed_values.items()},
        "dtype": dtype,
        "units": int(n_units),
        "units_fitted": int(index.size),
        "backend": backend.NAME,
        "backend_version": backend.version(),
        "keras_version": keras.__version__,
        "device": backend.device(),
        "compiled": compile_enabled(),
        "seed": int(seed),
    }
    return FitResult(prf_model.name, params, r2, full(cost), timings, settings, predictions)


def predict(
    params: Mapping[str, np.ndarray],
    stim: Stimulus,
    tr: float,
    model: str = "gauss",
    *,
    dtype: str = "float32",
    slice_time_ref: float = 0.5,
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
    prob = _problem(prf_model, stim, tr, 3, None, dtype, slice_time_ref)
    fn = _compiled(("predict", prf_model.name, dtype), partial(_predict_tensor, prf_model))
    out = fn(_tensor(theta, dtype), _tensor(weights, dtype), prob.stim, prob.hrf_t)
    return _numpy(out).astype(np.float64) + arrays.get("baseline", np.zeros(n))[:, None]


def _predict_tensor(model: PRFModel, theta, weights, stim, hrf_t):
    neural = model.neural(theta, stim, jacobian=False)
    regs = core.hrf_regressors(neural, hrf_t)[0]  # (bases, units, frames)
    return ops.sum(ops.transpose(weights)[:, :, None] * regs, axis=0)
