"""Issue 12, point 8: a high-resolution aperture is fitted at the resolution the model needs, and a
``--mem-gb`` below what a participant must hold is refused with the minimum."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import run_participant


@pytest.fixture(scope="module")
def fine_dataset(t1w_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The T1w dataset with its 40-pixel bars shown on a 320 × 320 screen (each pixel 8 × 8)."""
    root = tmp_path_factory.mktemp("fine") / "bids"
    shutil.copytree(t1w_dataset, root)
    path = root / "stimuli" / "bars.nii.gz"
    img = nib.load(path)
    coarse = np.asanyarray(img.dataobj)
    fine = np.repeat(np.repeat(coarse, 8, axis=0), 8, axis=1)
    nib.save(nib.Nifti1Image(fine, img.affine, img.header), path)
    return root


def test_a_fine_aperture_is_fitted_on_the_model_grid(fine_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_participant(fine_dataset, out, "--mem-gb", "1", "--refine", "none", chunk=None)
    assert proc.returncode == 0, proc.stderr
    sidecar = json.loads(next(out.rglob("*_model-gauss_desc-sigma_boldmap.json")).read_text())
    stimulus = sidecar["Stimulus"]
    assert stimulus["Pixels"] == [320, 320] and stimulus["FittedPixels"] == [101, 101]
    assert stimulus["FieldOfViewDeg"] == 20.0 and stimulus["FittedPixelDeg"] <= 0.2
    assert "area-averaged to 101 × 101" in proc.stdout


def test_a_budget_below_the_participants_need_is_refused(fine_dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = run_participant(fine_dataset, out, "--mem-gb", "0.001", chunk=None)
    assert proc.returncode == 64, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("prfmap: error: --mem-gb 0.001 is too small")
    minimum = float(line.rsplit("pass --mem-gb ", 1)[1].split()[0])
    assert 0.001 < minimum < 1
    assert not list(out.rglob("*_boldmap*"))
    proc = run_participant(
        fine_dataset, tmp_path / "enough", "--mem-gb", str(minimum), "--refine", "none", chunk=None
    )
    assert proc.returncode == 0, proc.stderr
