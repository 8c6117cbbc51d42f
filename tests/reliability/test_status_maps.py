"""Issue 24, cases 6 and 3: units with the no_signal status (bit 1, "NaN in every map") have no cvr2
either; a fit without cross-validation says so in every fitted unit's status (bit 256)."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np

from prfmap.cli.run import main

FUNC = Path("sub-01") / "func"


def test_units_without_signal_have_no_cvr2_with_vertex_hrfs(two_runs: Path, tmp_path: Path, capsys) -> None:
    """With --hrf vertex, 32 of the 33 status-1 units of this dataset had a finite cvr2."""
    out = tmp_path / "out"
    options = ("--no-report", "--skip-bids-validation", "--hrf", "vertex", "-w", str(tmp_path / "work"))
    assert main([str(two_runs), str(out), "participant", *options]) == 0, capsys.readouterr().err
    assert capsys.readouterr().err == ""
    (status_path,) = (out / FUNC).glob("*_model-gauss_desc-status_boldmap.nii.gz")
    (cvr2_path,) = (out / FUNC).glob("*_model-gauss_desc-cvr2_boldmap.nii.gz")
    (x_path,) = (out / FUNC).glob("*_model-gauss_desc-x_boldmap.nii.gz")
    (mask_path,) = (two_runs / "derivatives" / "fmriprep" / FUNC).glob("*_run-1_*_desc-brain_mask.nii.gz")
    inside = np.asanyarray(nib.load(mask_path).dataobj) > 0
    status = np.asanyarray(nib.load(status_path).dataobj)[inside].astype(np.int64)
    cvr2 = np.asanyarray(nib.load(cvr2_path).dataobj)[inside]
    x = np.asanyarray(nib.load(x_path).dataobj)[inside]
    no_signal = (status & 1) != 0
    assert no_signal.sum() >= 10, "the dataset should hold units without signal"
    assert np.isnan(x[no_signal]).all()
    assert np.isnan(cvr2[no_signal]).all(), f"{np.isfinite(cvr2[no_signal]).sum()} status-1 units have a cvr2"
    assert np.isfinite(cvr2[~no_signal]).mean() > 0.9
    assert not (status & 256).any(), "a cross-validated fit has units marked not_cross_validated"


def test_a_fit_without_cvr2_says_reproducibility_was_not_tested(
    two_runs: Path, tmp_path: Path, capsys
) -> None:
    """Case 3: with --no-cvr2, status 0 (documented as reproducible) covered noise."""
    out = tmp_path / "out"
    options = ("--no-report", "--skip-bids-validation", "--no-cvr2", "--refine", "none", "--hrf", "canonical")
    assert main([str(two_runs), str(out), "participant", *options]) == 0, capsys.readouterr().err
    (status_path,) = (out / FUNC).glob("*_model-gauss_desc-status_boldmap.nii.gz")
    (mask_path,) = (two_runs / "derivatives" / "fmriprep" / FUNC).glob("*_run-1_*_desc-brain_mask.nii.gz")
    inside = np.asanyarray(nib.load(mask_path).dataobj) > 0
    status = np.asanyarray(nib.load(status_path).dataobj)[inside].astype(np.int64)
    fitted = (status & 1) == 0
    assert fitted.sum() > 100
    assert ((status[fitted] & 256) != 0).all() and not (status[~fitted] & 256).any()
    sidecar = json.loads(status_path.with_name(status_path.name.replace(".nii.gz", ".json")).read_text())
    assert sidecar["Levels"]["256"].startswith("not_cross_validated: reproducibility was not tested")
