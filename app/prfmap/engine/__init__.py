"""The numerical core of prfmap: pRF models and compiled fitters on JAX, PyTorch or TensorFlow.

The engine reads no files. Select the backend with ``KERAS_BACKEND`` (or
:func:`prfmap.engine.backend.select_backend`) before importing it.
"""

from prfmap.engine.backend import select_backend
from prfmap.engine.fit import FitResult, fit_prf, predict
from prfmap.engine.grid import cartesian_grid, polar_grid
from prfmap.engine.hrf import spm_hrf
from prfmap.engine.models import MODELS, PARAMETER_LABELS, model_parameters
from prfmap.engine.stimulus import Stimulus

__all__ = [
    "MODELS", "PARAMETER_LABELS", "FitResult", "Stimulus", "backend_info", "cartesian_grid",
    "fit_prf", "model_parameters", "polar_grid", "predict", "select_backend", "spm_hrf",
]


def backend_info() -> dict[str, str]:
    """Backend name, its version, the Keras version and the device the engine runs on."""
    import keras

    from prfmap.engine.backend import get_backend

    backend = get_backend()
    return {"backend": backend.NAME, "version": backend.version(), "keras": keras.__version__,
            "device": backend.device()}
