"""Shared fixtures of the engine tests; the backend is the process's ``KERAS_BACKEND``."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
os.environ.setdefault("KERAS_BACKEND", "jax")

from prfmap.engine import Stimulus  # noqa: E402

TR = 1.5
FOV = 20.0


def bar_design(n_frames: int = 120, size: int = 41, fov: float = FOV) -> np.ndarray:
    """Four bar sweeps (right, up, left, down) inside a circular aperture; (frames, rows, cols)."""
    x = np.linspace(-fov / 2, fov / 2, size)
    xx, yy = np.meshgrid(x, x[::-1])
    frames = []
    for angle in (0, 90, 180, 270):
        a = np.radians(angle)
        along = xx * np.cos(a) + yy * np.sin(a)
        for pos in np.linspace(-fov / 2, fov / 2, n_frames // 4):
            frames.append((np.abs(along - pos) < fov / 16) & (np.hypot(xx, yy) <= fov / 2))
    return np.asarray(frames, dtype=np.float32)


def random_params(model: str, n: int, rng: np.random.Generator, max_ecc: float = 7.0) -> dict:
    """Random pRF parameters with centres inside the aperture."""
    r = max_ecc * np.sqrt(rng.uniform(0, 1, n))
    a = rng.uniform(0, 2 * np.pi, n)
    p = {
        "x": r * np.cos(a),
        "y": r * np.sin(a),
        "sigma": rng.uniform(0.5, 3.0, n),
        "amplitude": rng.uniform(1, 3, n),
        "baseline": rng.uniform(-1, 1, n),
    }
    if model == "css":
        p["n"] = rng.uniform(0.3, 0.9, n)
    elif model == "dog":
        p["sigma_surround"] = p["sigma"] * rng.uniform(2, 4, n)
        p["amplitude_surround"] = p["amplitude"] * rng.uniform(0.05, 0.3, n)
    elif model == "dn":
        p["sigma_norm"] = p["sigma"] * rng.uniform(2, 4, n)
        p["amplitude_norm"] = rng.uniform(0.2, 1.0, n)
        p["baseline_activation"] = p["amplitude"] * rng.uniform(0.2, 1.0, n)
        p["baseline_norm"] = np.ones(n)
    return p


@pytest.fixture(scope="session")
def stim() -> Stimulus:
    return Stimulus(bar_design(), FOV)


@pytest.fixture(scope="session")
def backend() -> str:
    import keras

    return keras.backend.backend()
