"""Synthetic BIDS + fMRIPrep datasets with known pRFs: the demo's data, the tests' data, a validation tool.

:mod:`~prfmap.synth.config` (what a dataset is made of), :mod:`~prfmap.synth.layout` (where the units
and pRFs lie), :mod:`~prfmap.synth.response` and :mod:`~prfmap.synth.model` (the forward model),
:mod:`~prfmap.synth.surfaces` (meshes), :mod:`~prfmap.synth.writers` (the files),
:mod:`~prfmap.synth.dataset` (``make_synthetic_dataset``, ``load_truth``).
"""

from prfmap.synth.config import CLEAN, DEFAULT_NOISE, SPACES, SynthConfig
from prfmap.synth.dataset import load_truth, make_synthetic_dataset
from prfmap.synth.response import bar_apertures, gaussian_overlap

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
