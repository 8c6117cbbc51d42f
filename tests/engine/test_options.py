"""FitOptions: one frozen description of a fit, whose identity names its checkpoints."""

from __future__ import annotations

import json
from dataclasses import fields, replace

import numpy as np
import pytest

from prfmap.engine import HRF, FitOptions, NoiseModel
from prfmap.engine.options import jsonable

CHANGED = {
    "model": "css",
    "refine": "sgd",
    "hrf": HRF(6.5, 1.0, "participant", 100),
    "grid": {"x": np.zeros(3), "y": np.zeros(3), "sigma": np.ones(3)},
    "dtype": "float64",
    "seed": 1,
    "fixed": {"n": 0.5},
    "max_iter": 3,
    "tol": 1e-3,
    "refine_options": {"learning_rate": 0.1},
    "refine_r2_min": 0.2,
    "slice_time_ref": 0.0,
    "return_predictions": True,
    "noise": NoiseModel("ar1", (0.3,), 100),
    "uncertainty": False,
    "covariance": "sandwich",
    "sigma_prior": "eccentricity",
    "delay_prior": "spread",
    "gauss_start": {"x": np.zeros(4)},
}


def test_every_option_but_the_budget_tells_fits_apart():
    base = FitOptions()
    assert set(CHANGED) == {f.name for f in fields(FitOptions)} - {"mem_gb"}
    keys = {json.dumps(base.identity(), sort_keys=True)}
    for name, value in CHANGED.items():
        keys.add(json.dumps(replace(base, **{name: value}).identity(), sort_keys=True))
    assert len(keys) == len(CHANGED) + 1
    assert replace(base, mem_gb=8.0).identity() == base.identity()


def test_values_that_describe_alike_still_differ():
    """An HRF's record rounds its delay to 1e-4 s and an array's text elides: the identity does not."""
    hrf = HRF(6.0, 1.0, "participant", 100)
    assert hrf.describe() == replace(hrf, delay=6.00001).describe()
    assert jsonable(hrf) != jsonable(replace(hrf, delay=6.00001))
    big = np.zeros(5000)
    moved = big.copy()
    moved[2500] = 1e-9
    assert str(big) == str(moved) and jsonable(big) != jsonable(moved)


def test_an_option_without_an_identity_is_an_error():
    with pytest.raises(TypeError, match="no identity for a object"):
        FitOptions(refine_options={"callback": object()}).identity()
