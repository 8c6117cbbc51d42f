"""Backend selection and the small per-backend interface of the engine.

Keras 3 runs the models; what Keras does not abstract lives in one module per backend, as Keras does in
``keras/src/backend/``, and only the selected backend's module is imported. No module of prfmap outside
this folder imports jax, torch or tensorflow. Each backend module provides (:class:`BackendModule`):

- ``NAME``; ``LOOPS_COMPILE`` (whether a whole ``keras.ops.while_loop`` compiles well);
- ``compile_fun(fn)``, ``value_and_grad(fn, has_aux)``, ``is_out_of_memory(exc)``;
- ``version()``, ``device()``, ``free_memory()`` (free bytes of the device, None on a CPU or when the
  backend cannot tell), ``enable_float64()``, ``configure_threads(n)``;
- optionally ``matmul(a, b)`` where ``keras.ops.matmul`` does not do (torch: it keeps float64).

The environment a backend reads when it is imported (threads, visible devices) is set here, by
:func:`select_backend`, before the backend is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any, Protocol

from prfmap.errors import UsageError

DEFAULT_BACKEND = "jax"
"""The backend when ``KERAS_BACKEND`` is unset (Keras' own default is TensorFlow)."""
COMPILE_ENV = "PRFMAP_COMPILE"
"""``PRFMAP_COMPILE=0``: hot functions run uncompiled, for debugging (:func:`compile_enabled`)."""
_OFF = ("0", "false", "False", "no")

# Keras reads KERAS_BACKEND once, when first imported: the engine's default must be in place first.
os.environ.setdefault("KERAS_BACKEND", DEFAULT_BACKEND)


class BackendModule(Protocol):
    """What each backend module (``jax.py``, ``torch.py``, ``tensorflow.py``) provides.

    Attributes
    ----------
    NAME : str
        The backend's name (``KERAS_BACKEND``).
    LOOPS_COMPILE : bool
        Whether a whole ``keras.ops.while_loop`` compiles well on it (else a compiled step is looped
        from Python).
    """

    NAME: str
    LOOPS_COMPILE: bool

    def compile_fun(
        self, fn: Callable[..., Any], static_argnames: tuple[str, ...] = ()
    ) -> Callable[..., Any]:
        """The backend's compiled version of a traceable function.

        Parameters
        ----------
        fn : callable
            A function of tensors (``keras.ops`` only).
        static_argnames : tuple of str
            Arguments that are not tensors and select a trace.

        Returns
        -------
        callable
        """
        ...

    def value_and_grad(self, fn: Callable[..., Any], has_aux: bool = False) -> Callable[..., Any]:
        """``fn`` and its gradient with respect to its first argument, by the backend's autodiff.

        Parameters
        ----------
        fn : callable
            A scalar function of tensors (``(value, aux)`` with ``has_aux``).
        has_aux : bool
            ``fn`` also returns auxiliary values.

        Returns
        -------
        callable
            ``f(*args) -> (value, gradient)`` (``((value, aux), gradient)`` with ``has_aux``).
        """
        ...

    def is_out_of_memory(self, exc: BaseException) -> bool:
        """Whether an exception means the device ran out of memory.

        Parameters
        ----------
        exc : BaseException
            What a compiled call raised.

        Returns
        -------
        bool
        """
        ...

    def version(self) -> str:
        """The framework's version.

        Returns
        -------
        str
        """
        ...

    def device(self) -> str:
        """The device the engine runs on (``cpu``, ``cuda:0``...).

        Returns
        -------
        str
        """
        ...

    def free_memory(self) -> int | None:
        """Free bytes of the device.

        Returns
        -------
        int or None
            None on a CPU or when the backend cannot tell.
        """
        ...

    def enable_float64(self) -> None:
        """Let the backend compute in float64."""
        ...

    def configure_threads(self, n: int) -> None:
        """Bound the backend's own thread pools.

        Parameters
        ----------
        n : int
            Threads.
        """
        ...

    def matmul(self, a: Any, b: Any) -> Any:
        """The product, where ``keras.ops.matmul`` does not do (optional; torch: it keeps float64).

        Parameters
        ----------
        a, b : tensor
            Operands, broadcast as ``keras.ops.matmul`` broadcasts them.

        Returns
        -------
        tensor
        """
        ...


SUPPORTED_BACKENDS = ("jax", "torch", "tensorflow")
_PACKAGE_OF = {"jax": "jax", "torch": "torch", "tensorflow": "tensorflow"}
_THREADS_BY_CALL = ("torch",)
"""Backends whose thread count is set by a call once imported (``configure_threads``); XLA and
TensorFlow read theirs from the environment when imported, so selecting them imports nothing."""
OMP_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")
"""The per-process OpenMP/BLAS pools (``omp_threads``; ``nprocs`` bounds them too)."""
THREAD_VARIABLES = OMP_VARIABLES + ("TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")


def select_backend(
    name: str | None = None,
    *,
    nprocs: int | None = None,
    device: str | None = None,
    omp_threads: int | None = None,
) -> str:
    """Choose the Keras backend, its threads and its device before Keras is imported.

    The framework itself is imported only where a setting needs it now: PyTorch's thread count (a
    call), a framework already loaded, a GPU asked for (checked here, so that a missing one is a usage
    error before any data are read). JAX and TensorFlow otherwise load when the first fit needs them.

    Parameters
    ----------
    name : str, optional
        ``"jax"``, ``"torch"`` or ``"tensorflow"``; defaults to ``$KERAS_BACKEND`` or ``"jax"``.
    nprocs : int, optional
        Threads the backend (and BLAS) may use; None leaves the defaults.
    device : str, optional
        ``"auto"`` (default), ``"cpu"``, ``"gpu"`` or ``"gpu:N"`` (the N-th visible GPU).
    omp_threads : int, optional
        Threads of each OpenMP/BLAS pool (default: ``nprocs``).

    Returns
    -------
    str
        The selected backend.

    Raises
    ------
    UsageError
        If the backend is unknown or not installed, Keras already runs another backend, the GPU index
        is out of range, or a GPU was asked for and the backend sees none.
    """
    name = name or os.environ.get("KERAS_BACKEND") or DEFAULT_BACKEND
    if name not in SUPPORTED_BACKENDS:
        raise UsageError(f"unknown backend {name!r}: choose one of {', '.join(SUPPORTED_BACKENDS)}")
    if importlib.util.find_spec(_PACKAGE_OF[name]) is None:
        raise UsageError(
            f"backend {name!r} is not installed: pip install {_PACKAGE_OF[name]} (prfmap's [{name}] "
            "extra) or use a container image built for it"
        )
    running = sys.modules["keras"].backend.backend() if "keras" in sys.modules else name
    if running != name:
        raise UsageError(
            f"Keras already runs the {running!r} backend in this process; "
            f"set KERAS_BACKEND={name} before starting Python"
        )
    device = device or "auto"
    _set_environment(nprocs, omp_threads, device)
    os.environ["KERAS_BACKEND"] = name
    threads_by_call = nprocs and (name in _THREADS_BY_CALL or _PACKAGE_OF[name] in sys.modules)
    if threads_by_call or device.startswith("gpu"):
        module = importlib.import_module(f"prfmap.engine.backend.{name}")
        if threads_by_call:
            module.configure_threads(nprocs)
        if device.startswith("gpu") and not any(t in module.device().lower() for t in ("gpu", "cuda")):
            raise UsageError(
                f"--device {device}: the {name} backend sees no GPU (device {module.device()}); "
                "install the backend's CUDA build or use --device cpu"
            )
    return name


def _set_environment(nprocs: int | None, omp_threads: int | None, device: str) -> None:
    """Threads and visible devices, as the backends read them when they are imported."""
    if nprocs:
        for variable in THREAD_VARIABLES:
            os.environ[variable] = str(nprocs)
        flags = os.environ.get("XLA_FLAGS", "")
        if "intra_op_parallelism_threads" not in flags:
            os.environ["XLA_FLAGS"] = (
                f"{flags} --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads={nprocs}"
            ).strip()
    if omp_threads:
        for variable in OMP_VARIABLES:
            os.environ[variable] = str(omp_threads)
    if device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        os.environ["JAX_PLATFORMS"] = "cpu"
    elif device.startswith("gpu:"):
        index = int(device.partition(":")[2])
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        if visible and index >= len(visible):
            raise UsageError(
                f"--device {device}: only {len(visible)} GPU(s) are visible "
                f"(CUDA_VISIBLE_DEVICES={','.join(visible)})"
            )
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[index] if visible else str(index)


def get_backend() -> ModuleType:
    """Return the backend module matching Keras' active backend (this imports Keras).

    Returns
    -------
    module
        The backend module (:class:`BackendModule`) of Keras' active backend.
    """
    # Imported here: Keras reads KERAS_BACKEND when first imported, which select_backend sets first.
    import keras

    name = keras.backend.backend()
    if name not in SUPPORTED_BACKENDS:
        raise UsageError(f"Keras backend {name!r} is not supported by prfmap")
    return importlib.import_module(f"prfmap.engine.backend.{name}")


def compile_enabled() -> bool:
    """Whether hot functions are compiled (``PRFMAP_COMPILE=0`` turns it off for debugging).

    Returns
    -------
    bool
    """
    return compile_switch(os.environ)


def compile_switch(env: Mapping[str, str]) -> bool:
    """Whether ``env`` (a process's environment) leaves compilation on: ``PRFMAP_COMPILE`` not off.

    Parameters
    ----------
    env : mapping
        Environment variables.

    Returns
    -------
    bool
    """
    return env.get(COMPILE_ENV, "1") not in _OFF


def loops_compiled() -> bool:
    """Whether iterative solvers run as one compiled loop (else: a compiled step called from Python).

    Returns
    -------
    bool
    """
    return get_backend().LOOPS_COMPILE and compile_enabled()
