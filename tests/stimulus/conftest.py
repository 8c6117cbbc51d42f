"""Rendered stimulus material for the prfmap-stimulus tests (``tests/stimulus_render.py`` draws it)."""

from __future__ import annotations

import numpy as np
import pytest

from stimulus_render import Scene, render

SMALL = Scene(rows=540, cols=960, radius=250.0, letterbox=60, fixation_radius=5.0)
"""A letterboxed 960 × 540 screen: the detection matrix runs at a quarter of full HD to stay quick."""


@pytest.fixture(scope="session")
def rendered():
    """``rendered(shape, carrier, scene=SMALL, **kw)`` → (pictures, truth, fixation), made once each."""
    cache: dict = {}

    def make(shape: str, carrier: str, scene: Scene = SMALL, **kw):
        key = (shape, carrier, scene, tuple(sorted(kw.items())))
        if key not in cache:
            frames = list(render(scene, shape, carrier, **kw))
            cache[key] = (
                np.stack([f[0] for f in frames]),
                np.stack([f[1] for f in frames]),
                frames[0][2],
            )
        return cache[key]

    return make
