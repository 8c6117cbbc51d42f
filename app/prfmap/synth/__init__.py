"""Synthetic BIDS + fMRIPrep datasets with known pRFs: the demo's data, the tests' data, a validation tool.

:mod:`~prfmap.synth.config` (what a dataset is made of), :mod:`~prfmap.synth.layout` (where the units
and pRFs lie), :mod:`~prfmap.synth.response` and :mod:`~prfmap.synth.model` (the forward model),
:mod:`~prfmap.synth.surfaces` (meshes), :mod:`~prfmap.synth.writers` (the files),
:mod:`~prfmap.synth.dataset` (``make_synthetic_dataset``, ``load_truth``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prfmap.synth.config import CLEAN, DEFAULT_NOISE, SPACES, SynthConfig
    from prfmap.synth.dataset import load_truth, make_synthetic_dataset
    from prfmap.synth.response import bar_apertures, gaussian_overlap

_MODULE_OF = {
    "CLEAN": "config",
    "DEFAULT_NOISE": "config",
    "SPACES": "config",
    "SynthConfig": "config",
    "bar_apertures": "response",
    "gaussian_overlap": "response",
    "load_truth": "dataset",
    "make_synthetic_dataset": "dataset",
}
__all__ = [
    "CLEAN",
    "DEFAULT_NOISE",
    "SPACES",
    "SynthConfig",
    "bar_apertures",
    "gaussian_overlap",
    "load_truth",
    "make_synthetic_dataset",
]


def __getattr__(name: str) -> Any:
    """The package's names, each imported from its module on first use.

    ``prfmap-synth --help`` imports this package for its choices, not its forward model and writers.
    """
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value
