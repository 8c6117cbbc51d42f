"""Viewing geometry, the crop around the fixation point and prfmap's field-of-view convention."""

from __future__ import annotations

import math

import numpy as np
import pytest

from prfmap.errors import UsageError
from prfmap.io.resample import AreaResampler
from prfmap.stimulus.geometry import Crop, Screen, choose_crop, resampler, stimulated_region


def test_one_centimetre_at_57_cm_is_about_one_degree() -> None:
    screen = Screen((1.0, 1.0), 57.0)
    assert screen.angle_deg(100, 100) == pytest.approx(1.0051, abs=1e-4)
    wide = Screen((52.0, 29.25), 57.0)
    assert wide.angle_deg(1920, 1920) == pytest.approx(2 * math.degrees(math.atan(26 / 57)))
    assert Screen(fov_deg=20.0).angle_deg(777, 1920) == 20.0


@pytest.mark.parametrize(
    ("screen", "message"),
    [
        (Screen((40.0, 30.0), 57.0), "aspect ratio"),  # a 4:3 size for 16:9 frames
        (Screen((520.0, 292.5), 57.0), "centimetres"),  # millimetres
        (Screen((0.52, 0.2925), 0.57), None),  # metres: the same angles, accepted
        (Screen(), "give the geometry"),
        (Screen((52.0, 29.25), 57.0, fov_deg=20.0), "give the geometry"),
        (Screen(fov_deg=200.0), "between 0 and 180"),
        (Screen(fov_deg=20.0, fov_centres_deg=20.0), "one of them"),
        (Screen(fov_centres_deg=200.0), "--fov-centres-deg 200 must lie between 0 and 180"),
        (Screen(fov_centres_deg=20.0), None),
    ],
)
def test_wrong_geometry_is_refused(screen: Screen, message: str | None) -> None:
    if message is None:
        screen.check(1080, 1920)
        return
    with pytest.raises(UsageError, match=message):
        screen.check(1080, 1920)


def test_the_crop_is_centred_on_the_fixation_and_covers_the_stimulus() -> None:
    region = np.zeros((100, 200), dtype=bool)
    region[20:70, 90:150] = True
    fixation = np.zeros_like(region)
    fixation[39:41, 99:101] = True  # centre (100, 40) in pixel-edge coordinates
    crop = choose_crop(region, fixation)
    assert crop.centre == (100.0, 40.0) and crop.centre_from == "fixation"
    assert (crop.left, crop.top, crop.width, crop.height) == (50, 10, 100, 60)
    square = choose_crop(region, fixation, square=True)
    assert (square.width, square.height) == (100, 100)
    cut = crop.cut(region.astype(np.uint8))
    assert cut.sum() == region.sum()  # nothing stimulated is cut off
    screen = choose_crop(region, np.zeros_like(region))
    assert screen.centre == (100.0, 50.0) and screen.centre_from == "screen"


def test_the_field_of_view_follows_prfmaps_pixel_centre_convention() -> None:
    crop = Crop(0, 0, 1000, 1000, (500.0, 500.0), "given")
    grid = resampler(crop, 20.0, 100)
    assert grid.shape_out == (100, 100)
    assert grid.fov_out == pytest.approx(20.0 * 99 / 100)  # first to last of 100 pixel centres
    default = resampler(crop, 20.0, None)
    assert default.shape_out == AreaResampler.for_model(1000, 1000, 20.0 * 999 / 1000).shape_out
    with pytest.raises(UsageError, match="exceeds"):
        resampler(crop, 20.0, 1001)


def test_small_separate_patches_are_left_out_of_the_region() -> None:
    union = np.zeros((100, 100), dtype=bool)
    union[10:90, 10:90] = True
    union[0:3, 97:100] = True
    region, dropped = stimulated_region(union)
    assert dropped == 1 and region.sum() == 80 * 80
