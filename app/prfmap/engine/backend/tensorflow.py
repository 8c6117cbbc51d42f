"""TensorFlow: ``tf.function`` with XLA and ``tf.GradientTape``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tensorflow as tf

NAME = "tensorflow"
LOOPS_COMPILE = True


def compile_fun(fn: Callable[..., Any], static_argnames: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Compile ``fn`` with ``tf.function(jit_compile=True)``; Python scalars are trace-time constants."""
    return tf.function(fn, jit_compile=True, reduce_retracing=False)


def value_and_grad(fn: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
    """Return ``f(params, *args) -> (fn(params, *args), d fn / d params)``.

    With ``has_aux``, ``fn`` returns ``(value, aux)`` and only ``value`` is differentiated.
    """

    def wrapped(params: Any, *args: Any) -> tuple[Any, Any]:
        with tf.GradientTape() as tape:
            tape.watch(params)
            out = fn(params, *args)
        value = out[0] if has_aux else out
        return out, tape.gradient(value, params)

    return wrapped


def version() -> str:
    """Backend package version."""
    return tf.__version__


def device() -> str:
    """The device the computation runs on."""
    gpus = tf.config.list_logical_devices("GPU")
    return f"gpu:0 ({gpus[0].name})" if gpus else "cpu"


def enable_float64() -> None:
    """Nothing to do: float64 tensors are always available on this backend."""


def free_memory() -> int | None:
    """Free bytes of the first GPU's memory; None on a CPU or when TensorFlow cannot tell."""
    if not tf.config.list_logical_devices("GPU"):
        return None
    info = tf.config.experimental.get_memory_info("GPU:0")
    return None if "limit" not in info else int(info["limit"]) - int(info["current"])


def configure_threads(n: int) -> None:
    """Nothing to do here: TensorFlow reads ``TF_NUM_INTRAOP_THREADS``, set before it is imported."""


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is TensorFlow running out of device memory."""
    return isinstance(exc, tf.errors.ResourceExhaustedError) or "RESOURCE_EXHAUSTED" in str(exc)
