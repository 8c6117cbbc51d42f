"""Issue 24, cases 2 and 11 (Must show 3): a run without a usable unit is left out with a warning
(refused when no run is left), and volume runs whose brain masks differ are fitted on the voxels
inside every mask, with the log and the sidecar saying how many each run lost."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import only_logs
from prfmap.cli.run import main

FUNC = Path("derivatives") / "fmriprep" / "sub-01" / "func"
FAST = ("--no-report", "--skip-bids-validation", "--refine", "none", "--hrf", "canonical")


@pytest.fixture
def bids(two_runs: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(two_runs, tmp_path / "bids"))


def _bold(bids: Path, run: int) -> Path:
    return bids / FUNC / f"sub-01_task-prf_run-{run}_space-T1w_desc-preproc_bold.nii.gz"


def _mask(bids: Path, run: int) -> Path:
    return bids / FUNC / f"sub-01_task-prf_run-{run}_space-T1w_desc-brain_mask.nii.gz"


def _replace_bold(path: Path, value: float) -> None:
    img = nib.load(path)
    data = np.full(img.shape, value, dtype=np.float32)
    nib.save(nib.Nifti1Image(data, img.affine, img.header), path)


def _sidecar(out: Path) -> dict:
    (path,) = (out / "sub-01" / "func").glob("*_model-gauss_desc-x_boldmap.json")
    return json.loads(path.read_text())


def _x_map(out: Path) -> np.ndarray:
    (path,) = (out / "sub-01" / "func").glob("*_model-gauss_desc-x_boldmap.nii.gz")
    return np.asanyarray(nib.load(path).dataobj)


@pytest.mark.parametrize("value", [0.0, np.nan])
def test_an_unusable_run_is_left_out_and_the_other_fitted(bids: Path, tmp_path: Path, capsys, value) -> None:
    """Case 2: an all-zero or all-NaN run took every unit with it ("fitted 0 units", no warning)."""
    _replace_bold(_bold(bids, 1), value)
    out = tmp_path / "out"
    assert main([str(bids), str(out), "participant", *FAST]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "sub-01_task-prf_run-1: every vertex/voxel is constant" in captured.out
    assert "it is left out of the fit" in captured.out
    sidecar = _sidecar(out)
    assert sidecar["Runs"] == ["sub-01_task-prf_run-2"]
    assert list(sidecar["Preprocessing"]["RunsLeftOut"]) == ["sub-01_task-prf_run-1"]
    assert sidecar["VarianceExplained"]["cvr2"] == "not computed: it needs two or more runs"
    fitted = np.isfinite(_x_map(out))
    mask = np.asanyarray(nib.load(_mask(bids, 2)).dataobj) > 0
    assert fitted[mask].mean() > 0.5, "the good run's units were not fitted"


def test_no_usable_run_is_refused(bids: Path, tmp_path: Path, capsys) -> None:
    _replace_bold(_bold(bids, 1), 0.0)
    _replace_bold(_bold(bids, 2), np.nan)
    out = tmp_path / "out"
    assert main([str(bids), str(out), "participant", *FAST]) == 65
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prfmap: error: no run of task-prf_space-T1w_model-gauss")
    assert "has a usable unit" in lines[0] and _bold(bids, 2).name in lines[0]
    assert only_logs(out)


def test_runs_whose_masks_differ_are_fitted_on_their_common_voxels(
    bids: Path, tmp_path: Path, capsys
) -> None:
    """Case 11: masks differing by 1 % of the voxels were refused (65, "must share their vertices/voxels")."""
    path = _mask(bids, 2)
    img = nib.load(path)
    mask = np.asanyarray(img.dataobj) > 0
    inside = np.flatnonzero(mask)
    dropped = inside[::100][: max(1, inside.size // 100)]  # 1 % of the voxels, spread over the mask
    second = mask.copy()
    second.flat[dropped] = False
    nib.save(nib.Nifti1Image(second.astype(np.uint8), img.affine, img.header), path)

    out = tmp_path / "out"
    assert main([str(bids), str(out), "participant", *FAST]) == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert captured.err == ""
    n = inside.size
    assert (
        f"the runs' brain masks differ; fitting the {n - dropped.size} voxels inside all of them "
        f"(left out: {dropped.size} of {n} voxels of sub-01_task-prf_run-1, 0 of {n - dropped.size} "
        "voxels of sub-01_task-prf_run-2)"
    ) in captured.out
    sidecar = _sidecar(out)
    assert sidecar["Preprocessing"]["BrainMask"]["VoxelsLeftOut"] == {
        "sub-01_task-prf_run-1": int(dropped.size),
        "sub-01_task-prf_run-2": 0,
    }
    assert sidecar["Runs"] == ["sub-01_task-prf_run-1", "sub-01_task-prf_run-2"]
    assert not sidecar["VarianceExplained"]["cvr2"].startswith("not computed")
    fitted = np.isfinite(_x_map(out))
    assert not fitted.flat[dropped].any(), "a voxel outside a run's mask has an estimate"
    assert fitted[second].mean() > 0.5
