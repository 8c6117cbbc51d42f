"""End to end (issue 20, Must show 2): time courses simulated from the true apertures are fitted once
with the true apertures and once with those prfmap-stimulus recovers from the rendered screenshots (PNG
files through the command line, read back as the BIDS App reads them); the maps agree within 0.1°."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

from prfmap.cli.stimulus import main
from prfmap.io.aperture import load_aperture
from prfmap.stimulus import Screen
from stimulus.conftest import SMALL
from stimulus_render import compare_fits, field_design, to_uint8

TR = 1.5
SCREEN_CM, DISTANCE_CM = (52.0, 29.25), 57.0


def test_maps_fitted_with_the_recovered_apertures_match_those_with_the_true_ones(
    rendered, tmp_path: Path
) -> None:
    pictures, truth, _ = rendered("bars", "pinknoise", steps=10, blanks=3)
    shots = tmp_path / "shots"
    shots.mkdir()
    for i, picture in enumerate(pictures):
        Image.fromarray(to_uint8(picture)).save(shots / f"shot_{i:03d}.png", compress_level=1)
    out = tmp_path / "bars.nii.gz"
    code = main(
        [
            str(shots),
            "--output",
            str(out),
            "--screen-size-cm",
            *map(str, SCREEN_CM),
            "--screen-distance-cm",
            str(DISTANCE_CM),
            "--tr",
            str(TR),
            "--no-qc",
        ]
    )
    assert code == 0
    recovered = load_aperture(out, tr=TR, resample=True)
    assert recovered.design.shape[0] == len(truth)

    got = compare_fits(
        field_design(SMALL, truth, Screen(SCREEN_CM, DISTANCE_CM)),
        (recovered.design, recovered.fov_deg),
        tr=TR,
        n=120,
    )
    assert got["finite"], got
    assert got["centre"] <= 0.1 and got["sigma"] <= 0.1, got
    # the true-aperture fit itself recovers the simulated pRFs (the comparison is not between two failures)
    assert got["truth_error"] < 0.2, got
