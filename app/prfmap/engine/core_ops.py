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
