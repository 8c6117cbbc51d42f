"""Issue 24, case 6: units with the no_signal status (bit 1, "NaN in every map") have no cvr2 either."""

from __future__ import annotations

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
    (status_path,) = (out / FUNC).glob("*_desc-status_boldmap.nii.gz")
    (cvr2_path,) = (out / FUNC).glob("*_desc-cvr2_boldmap.nii.gz")
    (x_path,) = (out / FUNC).glob("*_desc-x_boldmap.nii.gz")
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
