"""JAX: ``jax.jit`` compilation and ``jax.value_and_grad``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax

NAME = "jax"
LOOPS_COMPILE = True


def compile_fun(fn: Callable[..., Any], static_argnames: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Compile ``fn`` with XLA through ``jax.jit``."""
    return jax.jit(fn, static_argnames=static_argnames)


def value_and_grad(fn: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
    """Return ``f(params, *args) -> (fn(params, *args), d fn / d params)``.

    With ``has_aux``, ``fn`` returns ``(value, aux)`` and only ``value`` is differentiated.
    """
    return jax.value_and_grad(fn, has_aux=has_aux)


def version() -> str:
    """Backend package version."""
    return jax.__version__


def device() -> str:
    """The device the computation runs on, e.g. ``"cpu"`` or ``"gpu:0 (NVIDIA H200)"``."""
    dev = jax.devices()[0]
    kind = getattr(dev, "device_kind", "")
    return f"{dev.platform}:{dev.id} ({kind})" if dev.platform != "cpu" else "cpu"


def enable_float64() -> None:
    """Allow float64 arrays (JAX computes in float32 unless x64 is enabled)."""
    jax.config.update("jax_enable_x64", True)


def free_memory() -> int | None:
    """Free bytes of the device's memory; None on a CPU or when the device cannot tell."""
    dev = jax.devices()[0]
    if dev.platform == "cpu":
        return None
    stats = dev.memory_stats() or {}
    if "bytes_limit" not in stats:
        return None
    return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))


def configure_threads(n: int) -> None:
    """Nothing to do here: XLA reads its thread count from ``XLA_FLAGS``, set before jax is imported."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is XLA running out of device memory."""
    return "RESOURCE_EXHAUSTED" in str(exc) or "Out of memory" in str(exc)
