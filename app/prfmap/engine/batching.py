"""How the engine cuts its work into compiled calls.

Tiles, padding, memory budgets, the compile cache and out-of-memory recovery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from functools import partial

import numpy as np

from prfmap.engine import catalog
from prfmap.engine.backend import compile_enabled, get_backend
from prfmap.engine.problem import Problem

ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True)
class RunContext:
    """How a stage runs, apart from what it computes: its memory budget and where it reports progress.

    Attributes
    ----------
    mem_gb : float
        Memory budget of a tile or batch, GB.
    progress : callable, optional
        ``progress(stage, done, total)`` between batches.
    """

    mem_gb: float = 2.0
    progress: ProgressFn | None = None


DEFAULT_MEM_GB = 2.0
GPU_SHARE = 0.6  # of a GPU's free memory, at most, for the engine's tiles and batches
MIN_MEM_GB = 0.05
MIN_BATCH = 8
logger = logging.getLogger(__name__)

_COMPILED: dict[tuple, Callable] = {}


def compiled(kernel: Callable, *static: Hashable) -> Callable:
    """``kernel`` with its leading arguments ``static`` bound, compiled once per process.

    Parameters
    ----------
    kernel : callable
        A traceable function of the engine (``kernels.finalize``, ``solvers.iterate_loop``, a solver's
        ``step``...).
    *static : hashable
        Its leading arguments that are not tensors (a model, a frozen solver): bound to it, and with
        ``kernel`` the compile key, so nothing the compiled function depends on besides its tensor
        arguments can be left out of the key. Shapes seen before run without re-tracing.

    Returns
    -------
    callable
        The compiled function; with ``PRFMAP_COMPILE=0`` the bound, uncompiled one.
    """
    fn = partial(kernel, *static)
    if not compile_enabled():
        return fn
    key = (kernel, *static)
    if key not in _COMPILED:
        _COMPILED[key] = get_backend().compile_fun(fn)
    return _COMPILED[key]


def tiles(n: int, size: int) -> list[tuple[int, int]]:
    """``(start, stop)`` of consecutive tiles of at most ``size`` rows covering ``n`` rows.

    Parameters
    ----------
    n : int
        Rows to cover.
    size : int
        Rows per tile.

    Returns
    -------
    list of tuple of int
    """
    return [(i, min(i + size, n)) for i in range(0, n, size)]


def pad(a: np.ndarray, size: int) -> np.ndarray:
    """``a`` with zero rows appended up to ``size`` rows (so every tile has one compiled shape).

    Parameters
    ----------
    a : ndarray
        Rows to pad.
    size : int
        Rows wanted (at least ``len(a)``).

    Returns
    -------
    ndarray
        ``a`` itself when it has ``size`` rows already.
    """
    if a.shape[0] == size:
        return a
    padding = np.zeros((size - a.shape[0],) + a.shape[1:], dtype=a.dtype)
    return np.concatenate([a, padding])


def padded_size(n: int, smallest: int = 256) -> int:
    """Batch size for ``n`` rows: a power of two, at least ``smallest``, so few shapes get compiled.

    Parameters
    ----------
    n : int
        Rows to hold.
    smallest : int
        The smallest batch.

    Returns
    -------
    int
    """
    return max(smallest, 1 << max(int(n - 1).bit_length(), 0))


def budget_rows(mem_gb: float, bytes_per_row: float, lo: int = 16, hi: int = 65536) -> int:
    """Rows of ``bytes_per_row`` that fit in ``mem_gb``, clipped to ``[lo, hi]``.

    Parameters
    ----------
    mem_gb : float
        The budget, GB.
    bytes_per_row : float
        Memory one row needs.
    lo, hi : int
        The clip.

    Returns
    -------
    int
    """
    rows = int(mem_gb * 2**30 / max(bytes_per_row, 1.0))
    return int(np.clip(rows, lo, hi))


def memory_budget(mem_gb: float | None) -> float:
    """The engine's budget in GB: ``mem_gb`` (default 2), at most a share of a GPU's free memory.

    Parameters
    ----------
    mem_gb : float, optional
        The budget asked for (default :data:`DEFAULT_MEM_GB`).

    Returns
    -------
    float
        GB, at least :data:`MIN_MEM_GB`.
    """
    budget = float(mem_gb or DEFAULT_MEM_GB)
    try:
        free = get_backend().free_memory()
    except Exception:  # noqa: BLE001 - a device that cannot report its memory keeps the given budget
        free = None
    if free:
        budget = min(budget, GPU_SHARE * free / 2**30)
    return max(budget, MIN_MEM_GB)


def batch_size(prob: Problem, mem_gb: float, derivatives: int) -> int:
    """Units per batch of a refinement or final evaluation with ``derivatives`` parameters.

    Parameters
    ----------
    prob : Problem
        The fit's tensors (pixels, frames, bases, dtype, model).
    mem_gb : float
        The budget, GB.
    derivatives : int
        Parameters whose derivatives a batch holds (0 for the final fit).

    Returns
    -------
    int
    """
    item = np.dtype(prob.dtype).itemsize
    n_gauss = catalog.MODELS[prob.model.name].gaussians
    per_unit = item * (
        prob.pixels * (derivatives + 1) * (n_gauss + 1)
        + prob.frames * (derivatives + 1) * (prob.n_bases + 2) * 2
    )
    return budget_rows(mem_gb, per_unit, lo=MIN_BATCH, hi=8192)


def run_batches(
    n_units: int,
    batch: int,
    run: Callable[[int, int, int], None],
    stage: str,
    progress: ProgressFn | None,
    shrink: bool = True,
) -> None:
    """Call ``run(start, stop, batch)`` over the units; halve the batch and retry on out-of-memory.

    With ``shrink``, a batch larger than the units (padded to :func:`padded_size`) is reduced first:
    these stages (profiles, standard errors, final fits) compile in a fraction of a second, so a
    power of two pads them less than a coarse ladder would (631 units: 1,024 rows, not 2,048).

    Parameters
    ----------
    n_units : int
        Units to run.
    batch : int
        Units per call (the padded shape).
    run : callable
        ``run(start, stop, batch)`` computes units ``start:stop`` padded to ``batch``.
    stage : str
        The stage's name in warnings and progress.
    progress : callable, optional
        ``progress(stage, done, total)`` after each batch.
    shrink : bool
        Reduce a batch larger than the (padded) units first.
    """
    if shrink:
        batch = min(batch, padded_size(n_units))
    backend = get_backend()
    start = 0
    while start < n_units:
        stop = min(start + batch, n_units)
        try:
            run(start, stop, batch)
        except Exception as exc:
            if batch <= MIN_BATCH or not backend.is_out_of_memory(exc):
                raise
            batch //= 2
            logger.warning("%s: out of device memory, retrying with batches of %d units", stage, batch)
            continue
        start = stop
        if progress:
            progress(stage, -(-start // batch), -(-n_units // batch))
