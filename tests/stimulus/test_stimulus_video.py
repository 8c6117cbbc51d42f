"""Apertures from a screen recording: an H.264 MP4 at 60 Hz (written with PyAV, as it is read) of bars
moving every frame over a flickering checkerboard, averaged to a TR of 1.5 s (issue 20, Must show 1)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from prfmap.stimulus import Options, Screen, make_aperture, open_source
from stimulus_render import Scene, fixation_mark, measure, moving_bars, write_mp4

SCENE = Scene(rows=450, cols=800, radius=210.0, letterbox=50, fixation_radius=5.0)
TR, RATE = 1.5, 60


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """The MP4 and the true aperture per volume (the mean of its 90 frames' coverage)."""
    path = tmp_path_factory.mktemp("video") / "recording.mp4"
    truths: list[np.ndarray] = []

    def pictures():
        for picture, truth in moving_bars(SCENE, tr=TR, rate=RATE, sweep_volumes=2):
            truths.append(truth)
            yield picture

    write_mp4(path, pictures(), RATE)
    per_volume = int(TR * RATE)
    return path, np.stack(truths).reshape(-1, per_volume, SCENE.rows, SCENE.cols).mean(axis=1)


@pytest.fixture(scope="module")
def made(recording: tuple[Path, np.ndarray]):
    source = open_source([recording[0]])
    assert source.timed and "60 Hz" in source.description
    return make_aperture(source, Options(Screen((52.0, 29.25), 57.0), tr=TR))


def test_a_60_hz_recording_averaged_to_the_tr(recording: tuple[Path, np.ndarray], made) -> None:
    _, truth = recording
    result = made
    assert result.frames_read == len(truth) * int(TR * RATE)
    got = measure(result, truth, fixation_mark(SCENE, SCENE.polar()))
    assert got["volumes"] == len(truth) == 6
    assert got["iou_median"] >= 0.97, got
    assert got["fixation_pixels"] == 0, got
    assert got["value_error_mean"] <= 0.05 and got["share_error_max"] <= 0.05, got
    assert np.any((result.design > 0.05) & (result.design < 0.95))  # the moving bars give fractions
    assert result.blank_volumes == [0, 5]


def test_the_start_time_skips_the_recording_before_the_first_volume(recording, made) -> None:
    options = Options(Screen((52.0, 29.25), 57.0), tr=TR, volumes=4)
    shifted = make_aperture(open_source([recording[0]], start_time=TR), options)
    assert shifted.crop == made.crop
    np.testing.assert_allclose(shifted.design, made.design[1:5], atol=2 / 255)
