"""PyTorch: ``torch.compile`` and ``torch.func`` gradients.

Iterative solvers compile one step and loop in Python here: ``torch.compile`` unrolls loops.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

NAME = "torch"
LOOPS_COMPILE = False


def compile_fun(fn: Callable[..., Any], static_argnames: tuple[str, ...] = ()) -> Callable[..., Any]:
    """Compile ``fn`` with ``torch.compile`` (graph breaks fall back to eager, never fail)."""
    compiled = torch.compile(fn, dynamic=False)

    def run(*args: Any, **kwargs: Any) -> Any:
        with torch.no_grad():
            return compiled(*args, **kwargs)

    return run


def value_and_grad(fn: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
    """Return ``f(params, *args) -> (fn(params, *args), d fn / d params)``.

    With ``has_aux``, ``fn`` returns ``(value, aux)`` and only ``value`` is differentiated.
    """

    def wrapped(params: Any, *args: Any) -> tuple[Any, Any]:
        with torch.enable_grad():
            params = params.detach().requires_grad_(True)
            out = fn(params, *args)
            value = out[0] if has_aux else out
            (grad,) = torch.autograd.grad(value, params)
        if has_aux:
            return (value.detach(), out[1].detach()), grad
        return value.detach(), grad

    return wrapped


def version() -> str:
    """Backend package version."""
    return torch.__version__


def device() -> str:
    """The device the computation runs on."""
    if torch.cuda.is_available():
        return f"cuda:0 ({torch.cuda.get_device_name(0)})"
    return "cpu"


def enable_float64() -> None:
    """Nothing to do: float64 tensors are always available on this backend."""


def matmul(a: Any, b: Any) -> Any:
    """Matrix product keeping float64 (``keras.ops.matmul`` on torch returns float32 for float64)."""
    return torch.matmul(a, b)


def free_memory() -> int | None:
    """Free bytes of the current CUDA device's memory; None without CUDA."""
    return int(torch.cuda.mem_get_info()[0]) if torch.cuda.is_available() else None


def configure_threads(n: int) -> None:
    """Use ``n`` threads for intra-op parallelism (PyTorch ignores the environment once imported)."""
    torch.set_num_threads(n)


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` is PyTorch running out of device memory."""
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()
