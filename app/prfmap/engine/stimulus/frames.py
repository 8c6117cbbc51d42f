"""The stimulus as its distinct frames, and the HRF convolution folded with their expansion (issue 18).

Retinotopy runs repeat their apertures (a wedge run is eight cycles of the same 32 positions, every
blank is alike), and a pRF's neural response to a frame depends on the frame alone. So the engine
computes the response once per distinct frame, ``n = g @ U`` with ``U`` (pixels, distinct), and
reaches the BOLD of every volume through one matrix that expands the distinct frames to the frames
and convolves each run with the HRF at once:

    bold = n @ M,   M[b] = Eᵀ Hᵀ[b]   (distinct, frames)

with ``E`` (frames, distinct) the one-hot expansion and ``H[b]`` the per-run Toeplitz convolution of
HRF basis ``b`` (:func:`prfmap.engine.hrf.convolution_matrices`). One LM evaluation of one unit then
costs ``2·D·P + 2·D·F`` flops instead of ``2·F·P + 2·F²`` (``D`` distinct frames, ``F`` frames,
``P`` pixels); with no repeats ``M`` is ``Hᵀ`` and nothing changes.

What these changes do to the maps was measured against the engine without them (docs/performance.md,
"Issue 18"); ``tests/benchmarks/compare_reference.py`` repeats that comparison against a checkout of
the commit before them.
"""

from __future__ import annotations

import numpy as np

__all__ = ["distinct_frames", "fold_expansion"]


def distinct_frames(design: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct frames of ``design`` in order of first appearance, and each frame's index among them.

    Parameters
    ----------
    design : ndarray, shape (frames, pixels)
        Apertures.

    Returns
    -------
    unique : ndarray, shape (distinct, pixels)
    index : ndarray of int, shape (frames,)
        ``design == unique[index]`` exactly.
    """
    design = np.ascontiguousarray(design)
    rows = design.view(np.dtype((np.void, design.dtype.itemsize * design.shape[1])))[:, 0]
    _, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    order = np.argsort(first, kind="stable")  # distinct frames in order of first appearance
    rank = np.empty_like(order)
    rank[order] = np.arange(order.size)
    return design[first[order]], rank[inverse.ravel()]


def fold_expansion(conv_t: np.ndarray, index: np.ndarray, n_distinct: int) -> np.ndarray:
    """``M[b] = Eᵀ conv_t[b]``: convolution matrices summed over the frames that show one aperture.

    Parameters
    ----------
    conv_t : ndarray, shape (bases, frames, frames)
        Transposed per-run convolution matrices (:func:`prfmap.engine.hrf.convolution_matrices`).
    index : ndarray of int, shape (frames,)
        Each frame's distinct frame (:func:`distinct_frames`).
    n_distinct : int
        Distinct frames.

    Returns
    -------
    ndarray, shape (bases, distinct, frames)
    """
    folded = np.zeros((conv_t.shape[0], n_distinct, conv_t.shape[2]), dtype=conv_t.dtype)
    np.add.at(folded, (slice(None), index), conv_t)
    return folded
