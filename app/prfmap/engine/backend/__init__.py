"""Backend selection and the small per-backend interface of the engine.

Keras 3 runs the models; what Keras does not abstract (compilation, gradients, device names) lives in one
module per backend, as Keras does in ``keras/src/backend/``. Only the selected backend's module is imported.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from types import ModuleType

from prfmap.errors import UsageError

SUPPORTED_BACKENDS = ("jax", "torch", "tensorflow")
_PACKAGE_OF = {"jax": "jax", "torch": "torch", "tensorflow": "tensorflow"}


def select_backend(name: str | None = None) -> str:
    """Choose the Keras backend before Keras is imported.

    Parameters
    ----------
    name : str, optional
        ``"jax"``, ``"torch"`` or ``"tensorflow"``; defaults to ``$KERAS_BACKEND`` or ``"jax"``.

    Returns
    -------
    str
        The selected backend.

    Raises
    ------
    UsageError
        If the backend is unknown, not installed, or Keras already runs another backend.
    """
    name = name or os.environ.get("KERAS_BACKEND") or "jax"
    if name not in SUPPORTED_BACKENDS:
        raise UsageError(
            f"unknown backend {name!r}: choose one of {', '.join(SUPPORTED_BACKENDS)}"
        )
    if importlib.util.find_spec(_PACKAGE_OF[name]) is None:
        raise UsageError(
            f"backend {name!r} is not installed: pip install 'prfmap[{name}]' "
            "or use a container image built for it"
        )
    if "keras" in sys.modules:
        import keras

        if keras.backend.backend() != name:
            raise UsageError(
                f"Keras already runs the {keras.backend.backend()!r} backend in this process; "
                f"set KERAS_BACKEND={name} before starting Python"
            )
    os.environ["KERAS_BACKEND"] = name
    return name


def get_backend() -> ModuleType:
    """Return the backend module matching Keras' active backend."""
    import keras

    name = keras.backend.backend()
    if name not in SUPPORTED_BACKENDS:
        raise UsageError(f"Keras backend {name!r} is not supported by prfmap")
    return importlib.import_module(f"prfmap.engine.backend.{name}")


def compile_enabled() -> bool:
    """Whether hot functions are compiled (``PRFMAP_COMPILE=0`` turns it off for debugging)."""
    return os.environ.get("PRFMAP_COMPILE", "1") not in ("0", "false", "False", "no")
