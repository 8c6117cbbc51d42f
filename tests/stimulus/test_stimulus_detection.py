"""Apertures recovered from rendered screenshots: bar, wedge and ring sweeps with checkerboard, pink-noise
and coloured-object carriers, anti-aliased edges and a fixation mark that changes colour, on letterboxed
screens (issue 20, Must show 1; the full-HD screenshots through the command line are in
tests/cli/test_stimulus_cli.py, the figures of every case in docs/stimuli.md)."""

from __future__ import annotations

import numpy as np
import pytest

from prfmap.errors import BadDataError
from prfmap.stimulus import ArrayFrames, Options, Screen, make_aperture
from stimulus.conftest import SMALL
from stimulus_render import CARRIERS, SHAPES, Scene, measure

SCREEN = Screen((52.0, 29.25), 57.0)


def run(pictures: np.ndarray, **options) -> object:
    return make_aperture(ArrayFrames(pictures), Options(SCREEN, tr=1.5, **options))


@pytest.mark.parametrize("carrier", CARRIERS)
@pytest.mark.parametrize("shape", SHAPES)
def test_sweeps_are_recovered_whatever_the_carrier(rendered, shape: str, carrier: str) -> None:
    pictures, truth, fixation = rendered(shape, carrier, steps=3 if shape == "bars" else 4)
    result = run(pictures)
    got = measure(result, truth, fixation)
    assert got["iou_median"] >= 0.97, got
    assert got["fixation_pixels"] == 0, got
    assert result.detector.background.rgb255 == (128, 128, 128)
    assert result.crop.centre == (480.0, 270.0) and result.crop.centre_from == "fixation"
    n = len(truth)
    assert result.blank_volumes == [0, 1, n - 2, n - 1]
    assert result.detector.static[:, : SMALL.letterbox].all()  # the letterbox bars are static marks


def test_any_background_colour_fixation_cross_and_a_larger_surround(rendered) -> None:
    """A blue background inside a presentation square on a black screen that covers most of the frame,
    and a fixation cross: the background is the blank screen's colour, not the frame's commonest one."""
    scene = Scene(
        rows=540,
        cols=960,
        radius=190.0,
        letterbox=0,
        background=(0.15, 0.25, 0.55),
        fixation_radius=9.0,
        fixation_cross=True,
        surround=(0.0, 0.0, 0.0),
        presentation=200,
    )
    pictures, truth, fixation = rendered("wedges", "objects", scene, steps=4)
    assert (pictures == 0).all(axis=-1).mean() > 0.5  # black is the commonest colour of the frames
    result = run(pictures)
    got = measure(result, truth, fixation)
    assert result.detector.background.rgb255 == (38, 64, 140)
    assert got["iou_median"] >= 0.97 and got["fixation_pixels"] == 0, got


def test_a_see_through_fixation_grid_is_filled_but_the_fixation_dot_is_not(rendered) -> None:
    """Thin static lines across the field through the fixation dot, blended 40 % with white over the
    stimulus: the stimulus shows through them (filled), the dot on their crossing is never stimulus."""
    pictures, truth, fixation = rendered("bars", "pinknoise", steps=3)
    grid = np.zeros(pictures.shape[1:3], dtype=bool)
    for offset in range(-240, 241, 80):
        grid[270 + offset : 272 + offset, 230:730] = True
        grid[20:520, 480 + offset : 482 + offset] = True
    grid &= fixation == 0
    gridded = pictures.copy()
    gridded[:, grid] += 0.4 * (1.0 - gridded[:, grid])
    result = run(gridded)
    got = measure(result, truth, fixation)
    assert got["iou_median"] >= 0.97 and got["fixation_pixels"] == 0, got
    assert result.detector.static_core[grid].mean() > 0.9  # the lines are static marks


def test_off_centre_fixation_is_the_origin(rendered) -> None:
    scene = Scene(rows=540, cols=960, radius=200.0, letterbox=0, centre=(420.0, 300.0))
    pictures, truth, fixation = rendered("rings", "checkerboard", scene, steps=4)
    result = run(pictures)
    assert result.crop.centre == (420.0, 300.0)
    assert (
        result.crop.left + result.crop.width / 2 == 420.0
        and result.crop.top + result.crop.height / 2 == 300.0
    )
    got = measure(result, truth, fixation)
    assert got["iou_median"] >= 0.97 and got["fixation_pixels"] == 0, got


def test_a_flashing_patch_outside_the_stimulus_is_left_out(rendered) -> None:
    """A photodiode square that flashes every other frame changes like stimulus but lies apart from it."""
    pictures, truth, fixation = rendered("bars", "checkerboard", steps=4)
    flashing = pictures.copy()
    flashing[::2, 500:520, 880:900] = 1.0
    result = run(flashing)
    assert result.dropped_patches == 1
    assert result.crop == run(pictures).crop
    assert measure(result, truth, fixation)["iou_median"] >= 0.97


def test_a_start_screen_of_another_colour_is_left_out_of_the_crop(rendered) -> None:
    """A black "press a key" screen before the sweep differs from the background everywhere."""
    pictures, truth, fixation = rendered("bars", "checkerboard", steps=3)
    started = pictures.copy()
    started[0] = 0.0
    started[0, 260:280, 400:560] = 1.0  # its text
    result = run(started)
    assert result.flooded_frames == [0]
    assert result.crop == run(pictures).crop
    assert measure(result, truth, fixation)["iou_median"] >= 0.97


def test_a_fixation_radius_adds_a_disk_that_is_never_stimulus(rendered) -> None:
    pictures, truth, fixation = rendered("bars", "pinknoise", steps=4)
    result = run(pictures, fixation_radius_px=30.0)
    yy, xx = np.mgrid[0:540, 0:960]
    disk = np.hypot(xx + 0.5 - 480, yy + 0.5 - 270) <= 30
    assert all(result.screen_mask(v)[disk].max() == 0 for v in range(len(result.design)))
    assert result.screen_mask(len(result.design) // 4)[~disk].max() > 0


def test_a_rectangular_stimulus_keeps_its_shape_and_the_width_gives_the_field_of_view() -> None:
    """Full-width bars over an 8:3 region: the crop is that rectangle, the field of view its width's."""
    rows, cols = 300, 800
    pictures = np.full((12, 540, 960, 3), 0.5, dtype=np.float32)
    yy, xx = np.mgrid[0:rows, 0:cols]
    checks = ((yy // 20 + xx // 20) % 2).astype(np.float32)
    for k in range(10):
        band = (yy >= 30 * k) & (yy < 30 * k + 60)
        pictures[k + 1, 120 : 120 + rows, 80 : 80 + cols] = np.where(band, checks, 0.5)[..., None]
    result = run(pictures, centre="screen")
    assert (result.crop.width, result.crop.height) == (cols, rows)
    n = result.design.shape[2]
    assert abs(result.design.shape[1] - n * rows / cols) <= 1
    assert result.fov_deg == pytest.approx(SCREEN.angle_deg(cols, 960) * (n - 1) / n)


def test_frames_of_noise_have_no_background() -> None:
    rng = np.random.default_rng(0)
    with pytest.raises(BadDataError, match="no background"):
        run(rng.uniform(0, 1, (12, 90, 160, 3)).astype(np.float32))


def test_a_wrong_background_colour_is_refused(rendered) -> None:
    pictures, _, _ = rendered("rings", "checkerboard", steps=4)
    with pytest.raises(BadDataError, match="no background found"):
        run(pictures, background=(1.0, 0.0, 1.0))


def test_frames_that_never_change_show_no_stimulus() -> None:
    with pytest.raises(BadDataError, match="no stimulus found"):
        run(np.full((6, 90, 160, 3), 0.5, dtype=np.float32))
