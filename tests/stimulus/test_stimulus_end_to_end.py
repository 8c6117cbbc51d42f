"""End to end (issue 20, Must show 2): time courses simulated from the true apertures are fitted once
with the true apertures and once with those prfmap-stimulus recovers from the rendered screenshots (PNG
files through the command line, read back as the BIDS App reads them); the maps agree within 0.1°."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from prfmap.cli.stimulus import main
from prfmap.engine import Stimulus, fit_prf, predict
from prfmap.io.aperture import load_aperture
from prfmap.stimulus import Screen
from prfmap.stimulus.geometry import Crop, resampler
from stimulus.conftest import SMALL
from stimulus_render import to_uint8

TR = 1.5
SCREEN_CM, DISTANCE_CM = (52.0, 29.25), 57.0


def true_design(truth: np.ndarray) -> tuple[np.ndarray, float]:
    """The rendered truth on its own 101-pixel grid over the whole circular field (not the tool's crop)."""
    radius = int(SMALL.radius)
    cx, cy = (int(v) for v in SMALL.centre_xy)
    crop = Crop(cx - radius, cy - radius, 2 * radius, 2 * radius, (float(cx), float(cy)), "given")
    width = Screen(SCREEN_CM, DISTANCE_CM).angle_deg(2 * radius, SMALL.cols)
    grid = resampler(crop, width, 101)
    return grid(np.stack([crop.cut(t) for t in truth])), grid.fov_out


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
    design, fov = true_design(truth)
    assert recovered.design.shape[0] == design.shape[0]

    rng = np.random.default_rng(0)
    n = 120
    ecc = np.sqrt(rng.uniform(0.04, 0.6, n)) * fov / 2
    angle = rng.uniform(-np.pi, np.pi, n)
    truth_params = {"x": ecc * np.cos(angle), "y": ecc * np.sin(angle), "sigma": rng.uniform(0.5, 2.5, n)}
    data = predict(truth_params, Stimulus(design, fov), TR)
    data = data / data.std(axis=1, keepdims=True) + 0.05 * rng.standard_normal(data.shape)

    with_truth = fit_prf(data, Stimulus(design, fov), TR).params
    with_recovered = fit_prf(data, Stimulus(recovered.design, recovered.fov_deg), TR).params
    centre = np.hypot(with_truth["x"] - with_recovered["x"], with_truth["y"] - with_recovered["y"])
    sigma = np.abs(with_truth["sigma"] - with_recovered["sigma"])
    assert np.isfinite(centre).all() and np.isfinite(sigma).all()
    assert np.median(centre) <= 0.1, np.median(centre)
    assert np.median(sigma) <= 0.1, np.median(sigma)
    # the true-aperture fit itself recovers the simulated pRFs (the comparison is not between two failures)
    assert np.median(np.hypot(with_truth["x"] - truth_params["x"], with_truth["y"] - truth_params["y"])) < 0.2
