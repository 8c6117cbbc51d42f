"""Tensor operations that need the backend's own implementation inside the Keras-ops engine."""

from __future__ import annotations

from typing import Any

from prfmap.engine.backend import get_backend


def matmul(a: Any, b: Any) -> Any:
    """Matrix product that keeps float64 on every backend (Keras' torch matmul returns float32)."""
    return get_backend().matmul(a, b)


def at_least(x: Any, floor: float) -> Any:
    """Elementwise ``max(x, floor)`` for a Python scalar floor, keeping the dtype of ``x``."""
    from keras import ops

    return ops.where(x > floor, x, floor)
