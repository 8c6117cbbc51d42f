"""Memory budgets: the default ``--mem-gb`` and how a budget is shared between chunks and tiles.

Arithmetic on host memory only; what a device has free is the engine's backend's to answer.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil

HOST_SHARE = 0.5
ENGINE_SHARE = 0.25
MIN_ENGINE_GB = 0.05
CHUNK_SHARE = 0.125
CHUNK_COPIES = 12
MIN_CHUNK, MAX_CHUNK = 256, 16384


def available_host_bytes() -> int:
    """Memory this process may still use.

    Psutil's available memory (on Linux ``MemAvailable``), bounded by a cgroup limit (SLURM, containers),
    which psutil does not read.
    """
    available = int(psutil.virtual_memory().available)
    limit = _cgroup_limit()
    return min(available, limit) if limit else available


def _cgroup_limit() -> int | None:
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        try:
            text = Path(path).read_text().strip()
        except OSError:
            continue
        if text.isdigit() and int(text) < 2**60:
            return int(text)
    return None


def default_mem_gb() -> float:
    """The default ``--mem-gb``: half of the host memory available now (at least 1 GB)."""
    return max(1.0, round(HOST_SHARE * available_host_bytes() / 2**30, 2))


def engine_mem_gb(mem_gb: float) -> float:
    """The engine's tile budget.

    A quarter of ``mem_gb`` (the engine also keeps within a GPU's free memory,
    :func:`prfmap.engine.batching.memory_budget`).
    """
    return max(ENGINE_SHARE * mem_gb, MIN_ENGINE_GB)


def chunk_units(mem_gb: float, frames: int) -> int:
    """Units per checkpointed chunk: a power of two whose per-unit arrays fit an eighth of ``mem_gb``.

    ``PRFMAP_CHUNK_UNITS`` overrides it (any positive integer), e.g. for more frequent checkpoints.
    """
    override = os.environ.get("PRFMAP_CHUNK_UNITS")
    if override:
        return max(1, int(override))
    per_unit = CHUNK_COPIES * 8 * max(frames, 1)
    rows = int(CHUNK_SHARE * mem_gb * 2**30 / per_unit)
    rows = 1 << max(rows.bit_length() - 1, 0)
    return int(min(max(rows, MIN_CHUNK), MAX_CHUNK))


KEPT_UNITS_PER_SEEDED = 2
"""A chunk of a model seeded from a Gaussian fit holds at most this many times ``chunk_units``: its
units kept Gaussian hold the data, its projections and time courses (about half of
``CHUNK_COPIES``), not the working copies of a fit."""


def seeded_chunk_units(chunk: int, units: int, seeded: int) -> int:
    """Units per chunk of a model seeded from a Gaussian fit, of which only ``seeded`` are fitted.

    Its cost is its seeded units', so a chunk holds ``chunk`` of them on average (one chunk where
    they all fit in one), and at most :data:`KEPT_UNITS_PER_SEEDED` × ``chunk`` units.

    Parameters
    ----------
    chunk : int
        :func:`chunk_units` of the data.
    units : int
        Units of the data.
    seeded : int
        Units the model seeds and refines (the Gaussian fit's r² at least ``refine_r2_min``).

    Returns
    -------
    int
    """
    if seeded <= chunk:
        wanted = units
    else:
        wanted = -(-chunk * units // seeded)
    return int(max(chunk, min(wanted, KEPT_UNITS_PER_SEEDED * chunk)))


def participant_need_gb(units: int, volumes: int, frames: int, pixels: int, predictions: bool) -> float:
    """The smallest ``--mem-gb`` a fit can keep to: what it must hold whole, plus the chunk and tile shares.

    Held whole for the length of the fit: the preprocessed runs (float32 units × volumes), the combined
    data (units × frames), the aperture at fitting resolution (frames × pixels) and its copy in the
    engine, and, when the report or ``--save-predictions`` needs them, the predictions (saved chunks and
    their merged copy). Chunks and tiles take ``CHUNK_SHARE + ENGINE_SHARE`` of the budget on top.

    Parameters
    ----------
    units : int
        Vertices, grayordinates or voxels fitted.
    volumes : int
        Volumes of all runs fitted together (after dummy scans).
    frames : int
        Frames of the fit (volumes of averaged runs count once).
    pixels : int
        Aperture pixels (rows × cols) at the fitting resolution.
    predictions : bool
        Whether the fitted time courses are kept.

    Returns
    -------
    float
        GB (2**30 bytes).
    """
    held = 4 * units * (volumes + frames) + 2 * 4 * frames * pixels
    if predictions:
        held += 2 * 4 * units * frames
    return held / (1.0 - CHUNK_SHARE - ENGINE_SHARE) / 2**30
