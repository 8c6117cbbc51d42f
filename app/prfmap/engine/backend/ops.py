"""Tensor operations the engine needs beyond ``keras.ops``, and conversions to and from numpy."""

from __future__ import annotations

from typing import Any

import numpy as np
from keras import ops

from prfmap.engine.backend import get_backend

# Keras' matrix product, unless the backend has its own (torch: Keras' returns float32 for float64)
_PRODUCT = getattr(get_backend(), "matmul", ops.matmul)


def matmul(a: Any, b: Any) -> Any:
    """Matrix product of ``a`` (..., m, k) and ``b`` (..., k, n), as plain 2-D or equal-batch 3-D products.

    Broadcast batch products are rewritten as a 2-D product (when ``b`` is a matrix) or as a batch product
    whose operands have equal batch dimensions: TensorFlow 2.19–2.21's oneDNN ``BatchMatMulV2`` crashes
    (SIGSEGV) on broadcast 4-D operands such as (4, 1, 256, 120) · (120, 10) in eager mode. The backend's
    own product keeps float64 (Keras' torch ``matmul`` returns float32).

    Parameters
    ----------
    a : tensor, shape (..., m, k)
        Left operand.
    b : tensor, shape (..., k, n)
        Right operand.

    Returns
    -------
    tensor, shape (..., m, n)
    """
    a_shape, b_shape = tuple(ops.shape(a)), tuple(ops.shape(b))
    if len(b_shape) == 2:
        if len(a_shape) <= 2:
            return _PRODUCT(a, b)
        flat = _PRODUCT(ops.reshape(a, (-1, a_shape[-1])), b)
        return ops.reshape(flat, a_shape[:-1] + (b_shape[-1],))
    batch = tuple(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]))
    if len(batch) <= 1 and a_shape[:-2] == b_shape[:-2]:
        return _PRODUCT(a, b)
    a3 = ops.reshape(ops.broadcast_to(a, batch + a_shape[-2:]), (-1,) + a_shape[-2:])
    b3 = ops.reshape(ops.broadcast_to(b, batch + b_shape[-2:]), (-1,) + b_shape[-2:])
    return ops.reshape(_PRODUCT(a3, b3), batch + (a_shape[-2], b_shape[-1]))


def at_least(x: Any, floor: float) -> Any:
    """Elementwise ``max(x, floor)`` for a Python scalar floor, keeping the dtype of ``x``.

    Parameters
    ----------
    x : tensor
        Values.
    floor : float
        The floor.

    Returns
    -------
    tensor
    """
    return ops.where(x > floor, x, floor)


def tensor(a: np.ndarray, dtype: str) -> Any:
    """A contiguous backend tensor of ``dtype`` from an array.

    Parameters
    ----------
    a : ndarray
        Values.
    dtype : str
        ``float32`` or ``float64``.

    Returns
    -------
    tensor
    """
    return ops.convert_to_tensor(np.ascontiguousarray(a, dtype=dtype), dtype=dtype)


def to_numpy(t: Any) -> np.ndarray:
    """A numpy array from a backend tensor.

    Parameters
    ----------
    t : tensor
        A backend tensor.

    Returns
    -------
    ndarray
    """
    return np.asarray(ops.convert_to_numpy(t))


def spd_solve(a: Any, b: Any) -> Any:
    """Solve batched symmetric positive definite systems ``a`` (batch, n, n) · x = ``b`` (batch, n, r).

    Cholesky factorisation and the two triangular solves written out for the static ``n`` (issue 18):
    the systems here are tiny (the linear weights' Gram matrix, LM's damped Gauss–Newton matrix, n ≤ 8),
    and ``keras.ops.solve`` lowers to a pivoted LU per matrix that costs seconds to compile (XLA, on a
    CPU) and a small kernel per batch row to run. Here every operation is one elementwise operation over
    the batch. Pivots are kept positive (rounding on a semi-definite matrix).

    Parameters
    ----------
    a : tensor, shape (batch, n, n)
        Symmetric positive definite matrices (only the lower triangle is read).
    b : tensor, shape (batch, n, r)
        Right-hand sides.

    Returns
    -------
    tensor, shape (batch, n, r)
    """
    n = tuple(ops.shape(a))[-1]
    low: list[list[Any]] = [[None] * n for _ in range(n)]
    for j in range(n):
        pivot = a[:, j, j]
        for k in range(j):
            pivot = pivot - low[j][k] * low[j][k]
        low[j][j] = ops.sqrt(at_least(pivot, 1e-30))
        for i in range(j + 1, n):
            value = a[:, i, j]
            for k in range(j):
                value = value - low[i][k] * low[j][k]
            low[i][j] = value / low[j][j]
    y: list[Any] = []
    for i in range(n):
        value = b[:, i, :]
        for k in range(i):
            value = value - low[i][k][:, None] * y[k]
        y.append(value / low[i][i][:, None])
    x: list[Any] = [None] * n
    for i in reversed(range(n)):
        value = y[i]
        for k in range(i + 1, n):
            value = value - low[k][i][:, None] * x[k]
        x[i] = value / low[i][i][:, None]
    return ops.stack(x, axis=1)
