"""Area-averaged resampling of apertures to the resolution the model needs."""

from __future__ import annotations

import json
import math
import tracemalloc

import nibabel as nib
import numpy as np
import pytest
from PIL import Image

from prfmap.engine import Stimulus
from prfmap.engine.fit.grid import polar_grid
from prfmap.io.aperture import load_aperture
from prfmap.io.resample import AreaResampler, fit_pixel_deg
from prfmap.synth import SynthConfig, bar_apertures, gaussian_overlap


def _pil_box(frame: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Pillow's BOX filter: every source pixel weighs the same in its target pixel."""
    image = Image.fromarray(frame.astype(np.float32), mode="F")
    return np.asarray(image.resize((cols, rows), Image.Resampling.BOX), dtype=np.float64)


def test_integer_factor_equals_pillow_box_filter():
    rng = np.random.default_rng(0)
    design = rng.random((3, 96, 64))
    resampler = AreaResampler((96, 64), (12, 8), 0.25, 2.0)
    out = resampler(design)
    assert out.shape == (3, 12, 8) and out.dtype == np.float32
    for frame, mine in zip(design, out, strict=True):
        np.testing.assert_allclose(mine, _pil_box(frame, 12, 8), atol=1e-6)


def test_any_factor_equals_block_means_on_a_common_fine_grid():
    """768 → 101 columns: each pixel split into 101 parts, each new pixel the mean of 768 parts."""
    rng = np.random.default_rng(1)
    rows, cols = 20, 24  # new pixel = 24/7 old pixels; 6 rows (20·7/24 = 5.83 → 6, zero beyond)
    design = (rng.random((2, rows, cols)) > 0.5).astype(float)
    resampler = AreaResampler((rows, cols), (6, 7), 1.0, cols / 7)
    fine = np.repeat(np.repeat(design, 7, axis=1), 7, axis=2)  # (2, 140, 168), pixel 1/7
    pad = (6 * 24 - rows * 7) // 2  # the new grid is 6 × 24/7 = 144/7 tall: 144 fine rows, centred
    fine = np.pad(fine, ((0, 0), (pad, 6 * 24 - rows * 7 - pad), (0, 0)))
    expected = fine.reshape(2, 6, 24, 7, 24).mean(axis=(2, 4))
    np.testing.assert_allclose(resampler(design), expected, atol=1e-6)


def test_the_rule_pixel_at_most_the_smallest_grid_sigma():
    """768 × 768 over 20°: 101 × 101 pixels of 0.198°, no larger than the grid's smallest σ (0.2°)."""
    fine = Stimulus(np.ones((1, 768, 768), np.float32), fov_deg=20.0)
    smallest_sigma = polar_grid(fine)["sigma"].min()
    assert fit_pixel_deg(768, 768, fine.pixel_size) == pytest.approx(smallest_sigma)
    resampler = AreaResampler.for_model(768, 768, 20.0)
    assert resampler.shape_out == (101, 101)
    assert resampler.pixel_out <= smallest_sigma
    coarse = Stimulus(np.ones((1, 101, 101), np.float32), fov_deg=resampler.fov_out)
    assert polar_grid(coarse)["sigma"].min() == pytest.approx(resampler.pixel_out)
    # the stimulated area is kept: both grids cover 768 old pixels' width
    assert 101 * resampler.pixel_out == pytest.approx(768 * 20.0 / 767)
    # apertures already as coarse as the rule allows are kept as they are
    for shape in ((100, 100), (40, 40), (60, 101)):
        assert AreaResampler.for_model(*shape, 20.0).identity
    wide = AreaResampler.for_model(384, 768, 40.0)  # radius 10° (rows): pixels ≤ 0.2°
    assert wide.pixel_out <= fit_pixel_deg(384, 768, 40.0 / 767) + 1e-12
    assert wide.shape_out == (math.ceil(384 / (768 / wide.shape_out[1])), wide.shape_out[1])


def test_resampled_bars_predict_the_same_responses():
    """The pRF responses on the resampled 768-px bars equal those on the 768-px bars within 2 % of
    the largest response at σ = 1 pixel and 0.5 % from 2 pixels on; a 100-px rendering of the same bars
    is at least 3× further off."""
    config = SynthConfig(n_pixels=768, n_steps=6, n_blank=1)
    design = bar_apertures(config)
    resampler = AreaResampler.for_model(768, 768, config.fov_deg)
    rng = np.random.default_rng(2)
    sigma = np.geomspace(resampler.pixel_out, 10, 24)
    ecc, angle = rng.uniform(0, 9, sigma.size), rng.uniform(-np.pi, np.pi, sigma.size)
    x, y = ecc * np.cos(angle), ecc * np.sin(angle)
    exact = gaussian_overlap(design, config.fov_deg, x, y, sigma)
    error = np.abs(gaussian_overlap(resampler(design), resampler.fov_out, x, y, sigma) - exact).max(1)
    rendered = bar_apertures(SynthConfig(n_pixels=101, n_steps=6, n_blank=1))
    error_101 = np.abs(gaussian_overlap(rendered, config.fov_deg, x, y, sigma) - exact).max(1)
    assert error.max() <= 0.02 * exact.max()
    assert error[sigma >= 2 * resampler.pixel_out].max() <= 0.005 * exact.max()
    assert error.max() * 3 <= error_101.max()


def test_load_aperture_resamples_block_by_block(tmp_path):
    """A 768 × 768 aperture is read a few frames at a time: the peak is the resampled copy and one
    block, not the float copies of the whole file."""
    design = bar_apertures(SynthConfig(n_pixels=768, n_steps=4, n_blank=1))[:30]
    path = tmp_path / "bars.nii.gz"
    nib.save(nib.Nifti1Image(np.moveaxis(design, 0, -1)[:, :, None, :].astype(np.uint8), np.eye(4)), path)
    (tmp_path / "bars.json").write_text(json.dumps({"FieldOfViewDeg": 20.0}))
    whole = design.size * 8  # one float64 copy of the file: 142 MB
    tracemalloc.start()
    try:
        ap = load_aperture(path, tr=1.5, resample=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert ap.design.shape == (30, 101, 101) and ap.resampled
    assert ap.source_shape == (768, 768) and ap.source_fov_deg == 20.0
    assert ap.fov_deg == pytest.approx(100 * 20.0 * 768 / 767 / 101)
    assert peak < 0.5 * whole, f"peak {peak / 2**20:.0f} MB"
    np.testing.assert_allclose(ap.design, AreaResampler.for_model(768, 768, 20.0)(design), atol=1e-6)
    kept = load_aperture(path, tr=1.5)
    assert kept.design.shape == (30, 768, 768) and not kept.resampled and kept.fov_deg == 20.0
