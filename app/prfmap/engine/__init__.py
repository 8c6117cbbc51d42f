"""The numerical core of prfmap: pRF models and compiled fitters on JAX, PyTorch or TensorFlow.

The engine reads no files. The backend is ``KERAS_BACKEND`` (JAX when unset); choose it with
:func:`select_backend` before anything imports Keras. Importing this package does not import Keras: the
public names below load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from prfmap.engine.backend import get_backend, select_backend

_LAZY = {
    "FitResult": "prfmap.engine.catalog.result",
    "fit_prf": "prfmap.engine.fit",
    "estimate_hrf": "prfmap.engine.estimate.hrf",
    "estimate_noise": "prfmap.engine.estimate.noise",
    "estimate_sigma_prior": "prfmap.engine.estimate.sigma_prior",
    "NoiseModel": "prfmap.engine.noise",
    "BaseNoiseModel": "prfmap.engine.noise",
    "FitOptions": "prfmap.engine.options",
    "FitCache": "prfmap.engine.problem",
    "FitSettings": "prfmap.engine.catalog.settings",
    "HRF": "prfmap.engine.hrf",
    "predict": "prfmap.engine.prediction",
    "cartesian_grid": "prfmap.engine.fit.grid",
    "polar_grid": "prfmap.engine.fit.grid",
    "spm_hrf": "prfmap.engine.hrf",
    "MODELS": "prfmap.engine.catalog",
    "model_parameters": "prfmap.engine.models",
    "Stimulus": "prfmap.engine.stimulus",
    "seeded_by_gaussian": "prfmap.engine.fit.stages",
}

__all__ = [
    "HRF",
    "BaseNoiseModel",
    "FitCache",
    "FitOptions",
    "FitSettings",
    "MODELS",
    "FitResult",
    "NoiseModel",
    "Stimulus",
    "backend_info",
    "cartesian_grid",
    "estimate_hrf",
    "estimate_noise",
    "estimate_sigma_prior",
    "fit_prf",
    "model_parameters",
    "polar_grid",
    "predict",
    "seeded_by_gaussian",
    "select_backend",
    "spm_hrf",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'prfmap.engine' has no attribute {name!r}")


def backend_info() -> dict[str, str]:
    """Backend name, its version, the Keras version and the device the engine runs on.

    Returns
    -------
    dict
        ``backend``, ``version``, ``keras`` and ``device``.
    """
    # Imported here: importing prfmap.engine must not load Keras before select_backend has run.
    import keras

    backend = get_backend()
    return {
        "backend": backend.NAME,
        "version": backend.version(),
        "keras": keras.__version__,
        "device": backend.device(),
    }
