"""Apertures from a .mat image stack and the sequence that showed it (vistadisp's ``stimulus`` struct,
analyzePRF/HCP-style stacks), MATLAB v5 and v7.3 (issue 20, Must show 1)."""

from __future__ import annotations

from pathlib import Path

import hdf5storage
import numpy as np
import pytest
import scipy.io

from prfmap.errors import BadDataError, UsageError
from prfmap.stimulus import Options, Screen, make_aperture, open_source
from stimulus_render import Scene, aperture, carrier, fixation_mark, measure, sequence, to_uint8

SCENE = Scene(rows=512, cols=512, radius=250.0, letterbox=0, fixation_radius=5.0)
PER_TR = 6  # sequence entries per 1.5 s volume (4 Hz flicker)


@pytest.fixture(scope="module")
def stack() -> dict:
    """Grey images (two checkerboard phases per bar aperture, a black fixation dot drawn in), the
    1-based sequence with 0 for blank volumes, its timing, and the truth per volume."""
    polar = SCENE.polar()
    fixation = fixation_mark(SCENE, polar)
    rng = np.random.default_rng(1)
    specs = sequence("bars", steps=3, blanks=0)
    images, truths = [], []
    for spec in specs:
        stim = aperture(SCENE, spec, polar) * (1 - fixation)
        truths.append(stim)
        for phase in range(2):
            grey = carrier("checkerboard", SCENE, phase, rng, polar)[..., 0]
            picture = 0.5 + stim * (grey - 0.5)
            images.append(to_uint8(picture * (1 - fixation)))
    blank = [0] * (2 * PER_TR)
    seq = blank + [1 + 2 * k + (j % 2) for k in range(len(specs)) for j in range(PER_TR)] + blank
    none = np.zeros_like(truths[0])
    return {
        "images": np.stack(images, axis=-1),
        "seq": np.asarray(seq, dtype=float),
        "seqtiming": np.arange(len(seq)) * 1.5 / PER_TR,
        "truth": np.stack([none, none, *truths, none, none]),
        "fixation": fixation,
    }


def make(path: Path, **kw):
    source = open_source([path], **kw)
    return source, make_aperture(source, Options(Screen(fov_deg=20.0), tr=1.5))


def test_v5_struct_with_sequence_and_timing_found_by_themselves(stack: dict, tmp_path: Path) -> None:
    path = tmp_path / "vistadisp.mat"
    scipy.io.savemat(path, {"stimulus": {k: stack[k] for k in ("images", "seq", "seqtiming")}})
    source, result = make(path)
    assert source.variables == {
        "images": "stimulus.images",
        "sequence": "stimulus.seq",
        "timing": "stimulus.seqtiming",
    }
    got = measure(result, stack["truth"], stack["fixation"])
    assert got["volumes"] == len(stack["truth"])
    assert got["iou_median"] >= 0.97 and got["fixation_pixels"] == 0, got
    assert result.blank_volumes == [0, 1, got["volumes"] - 2, got["volumes"] - 1]
    assert result.width_deg == 20.0


def test_v73_colour_stack_with_a_frame_rate_gives_the_same_apertures(stack: dict, tmp_path: Path) -> None:
    v5 = tmp_path / "v5.mat"
    scipy.io.savemat(v5, {"stimulus": {k: stack[k] for k in ("images", "seq", "seqtiming")}})
    colour = np.repeat(stack["images"][:, :, None, :], 3, axis=2)  # rows × cols × 3 × N
    v73 = tmp_path / "hcp.mat"
    hdf5storage.savemat(str(v73), {"images": colour, "seq": stack["seq"][None, :]}, format="7.3")
    _, reference = make(v5)
    source, result = make(v73, images="images", sequence="seq", frame_rate=PER_TR / 1.5)
    assert source.variables["timing"] is None
    np.testing.assert_allclose(result.design, reference.design, atol=1e-6)
    got = measure(result, stack["truth"], stack["fixation"])
    assert got["iou_median"] >= 0.97 and got["fixation_pixels"] == 0, got


def test_several_stacks_need_to_be_named(stack: dict, tmp_path: Path) -> None:
    path = tmp_path / "two.mat"
    scipy.io.savemat(path, {"images": stack["images"], "masks": stack["images"] > 128, "seq": stack["seq"]})
    with pytest.raises(UsageError, match=r"several image stacks \(images, masks\); name one with --images"):
        open_source([path])
    with pytest.raises(UsageError, match="no numeric variable 'stim'"):
        open_source([path], images="stim")


def test_a_sequence_beyond_the_stack_is_refused(stack: dict, tmp_path: Path) -> None:
    path = tmp_path / "long.mat"
    scipy.io.savemat(path, {"images": stack["images"], "seq": stack["seq"] + 100})
    with pytest.raises(
        BadDataError, match=r"runs from 100 to 124 but the stack has 24 images \(1-based, 0 = blank\)"
    ):
        open_source([path])


def test_a_zero_based_sequence(stack: dict, tmp_path: Path) -> None:
    path = tmp_path / "zero.mat"
    images = stack["images"][..., :4]
    scipy.io.savemat(path, {"images": images, "seq": np.array([0, 1, 2, 3, 3, 2])})
    source = open_source([path], base=0)
    assert [f.key for f in source.frames()] == [0, 1, 2, 3, 3, 2]
    assert all(f.pixels is not None for f in source.frames())
