"""Frames on the screen averaged into volumes by the time they overlap each volume."""

from __future__ import annotations

import numpy as np
import pytest

from prfmap.errors import BadDataError
from prfmap.stimulus.timing import VolumeAccumulator


def feed(rate: float, seconds: float, on, tr: float = 1.5, volumes=None) -> np.ndarray:
    """Frames at ``rate`` Hz whose 1×1 mask is ``on(start)``, averaged per ``tr``."""
    acc = VolumeAccumulator((1, 1), tr, volumes)
    for k in range(int(round(seconds * rate))):
        start = k / rate
        acc.add(np.full((1, 1), float(on(start)), dtype=np.float32), start, start + 1 / rate)
    return acc.finish()[:, 0, 0] / 255.0


def test_sixty_hertz_frames_are_averaged_ninety_to_a_volume() -> None:
    values = feed(60, 6.0, lambda t: round(t * 60) % 3 == 0)
    assert values == pytest.approx([1 / 3] * 4, abs=1 / 255)


def test_a_rate_that_does_not_divide_the_tr_is_weighed_by_overlap() -> None:
    """At 59.94 Hz a volume holds 89.91 frames; a stimulus on for the first half of every volume gives
    0.5 per volume (to one frame's share), where counting whole frames would drift."""
    rate = 60 / 1.001
    values = feed(rate, 15.0, lambda t: (t % 1.5) < 0.75)
    assert values.size == 10
    assert values == pytest.approx([0.5] * 10, abs=1.5 / 90)


def test_each_frame_is_a_volume_without_a_tr() -> None:
    acc = VolumeAccumulator((2, 2), None)
    for value in (0, 1, 0):
        acc.add(np.full((2, 2), value, dtype=bool))
    assert acc.finish()[:, 0, 0].tolist() == [0, 255, 0]


def test_more_volumes_than_the_frames_cover_is_an_error() -> None:
    with pytest.raises(BadDataError, match="fewer than the 5 asked for"):
        feed(60, 6.0, lambda t: 1, volumes=5)


def test_frames_before_the_first_volume_are_skipped_and_a_partial_last_volume_dropped() -> None:
    acc = VolumeAccumulator((1, 1), 1.0)
    for k in range(-30, 95):  # 0.5 s before the first volume, 3.17 s in all
        start = k / 30
        acc.add(np.full((1, 1), float(k >= 0), dtype=np.float32), start, start + 1 / 30)
    values = acc.finish()
    assert values.shape == (3, 1, 1) and (values == 255).all()


def test_a_gap_in_the_frames_is_an_error() -> None:
    acc = VolumeAccumulator((1, 1), 1.0)
    acc.add(np.ones((1, 1), dtype=np.float32), 0.0, 1.0)
    acc.add(np.ones((1, 1), dtype=np.float32), 2.8, 3.0)
    with pytest.raises(BadDataError, match="cover only"):
        acc.finish()
