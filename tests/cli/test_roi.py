"""``--roi``: only the units of the chosen visual areas are fitted, the others are NaN in every map,
and what cannot be selected is one line."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import only_logs, write_freesurfer_label
from prfmap.cli.run import main
from prfmap.errors import BadDataError, MissingInputError, UsageError
from prfmap.io.geometry import GiftiGeometry, VolumeGeometry
from prfmap.participant.areas import roi_units


def write_gifti_label(path: Path, inside: np.ndarray) -> Path:
    array = nib.gifti.GiftiDataArray(
        inside.astype(np.int32), intent="NIFTI_INTENT_LABEL", datatype="NIFTI_TYPE_INT32"
    )
    nib.save(nib.gifti.GiftiImage(darrays=[array]), str(path))
    return path


def test_only_the_areas_units_are_fitted(small_synth: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    options = ["--no-report", "--no-cvr2", "--refine", "none", "--roi", "V1", "v2"]
    assert main([str(small_synth), str(out), "participant", *options]) == 0
    func, anat = out / "sub-01" / "func", out / "sub-01" / "anat"
    inside_total = 0
    for hemi in ("L", "R"):
        stem = f"sub-01_task-prf_hemi-{hemi}_space-fsaverage5_model-gauss"
        r2 = nib.load(func / f"{stem}_desc-r2_boldmap.func.gii").agg_data()
        status = nib.load(func / f"{stem}_desc-status_boldmap.func.gii").agg_data()
        areas = nib.load(
            anat / f"sub-01_hemi-{hemi}_space-fsaverage5_atlas-benson14_desc-area_dseg.label.gii"
        )
        inside = np.isin(areas.agg_data(), [1, 2])
        inside_total += int(inside.sum())
        assert inside.sum() > 100
        assert not np.isfinite(r2[~inside]).any(), "nothing outside V1 and V2 is fitted"
        assert np.all(status[~inside] == 1)
        assert np.isfinite(r2[inside]).mean() > 0.95, "their units are"
    sidecar = json.loads((func / f"{stem}_desc-r2_boldmap.json").read_text())
    assert sidecar["RegionOfInterest"]["Areas"] == ["V1", "v2"]
    assert sidecar["RegionOfInterest"]["Units"] == inside_total
    lines = (
        (func / "sub-01_task-prf_space-fsaverage5_model-gauss_desc-areas_summary.tsv")
        .read_text()
        .splitlines()
    )
    rows = {line.split("\t")[0]: line.split("\t") for line in lines[1:]}
    assert rows["V1"][1] == rows["V1"][2] and int(rows["V1"][2]) > 0  # units == units_fitted
    assert rows["V3"][2] == "0" and rows["V3"][4] == "n/a"  # outside the ROI: none fitted


@pytest.mark.parametrize(
    ("options", "code", "expected"),
    [
        (("--roi", "V9"), 64, "--roi V9: not an area of the benson14 atlas (V1, V2, V3, hV4"),
        (
            ("--roi", "V1", "--atlas", "none"),
            64,
            "--roi names visual areas of --atlas; it cannot go with --atlas none",
        ),
    ],
)
def test_what_cannot_be_selected_is_one_line(
    small_synth: Path, tmp_path: Path, capsys, options: tuple[str, ...], code: int, expected: str
) -> None:
    out = tmp_path / "out"
    assert main([str(small_synth), str(out), "participant", "--no-report", *options]) == code
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prfmap: error: ") and expected in lines[0], lines
    assert only_logs(out)


def test_a_volume_has_no_areas_to_select(tmp_path: Path) -> None:
    volume = VolumeGeometry(mask=np.ones((2, 2, 2), bool))
    with pytest.raises(
        UsageError, match=r"--roi V1 needs visual areas, and space T1w has none: No visual areas"
    ):
        roi_units(("V1",), None, "No visual areas: space T1w is a volume.", volume, "T1w")
    label = write_freesurfer_label(tmp_path / "lh.mine.label", np.arange(3))
    with pytest.raises(UsageError, match="label files are for surface spaces, and T1w is a volume"):
        roi_units((str(label),), None, "", volume, "T1w")
    assert roi_units((), None, "", volume, "T1w") is None


def test_label_files_select_their_vertices_without_an_atlas(tmp_path: Path) -> None:
    geometry = GiftiGeometry(hemis={"L": 50, "R": 40})
    left = write_freesurfer_label(tmp_path / "lh.drawn.label", np.array([0, 3, 7]))
    right = write_gifti_label(tmp_path / "sub-01_hemi-R_desc-drawn_dseg.label.gii", np.arange(40) >= 38)
    roi = roi_units((str(left), str(right)), None, "", geometry, "fsnative")
    np.testing.assert_array_equal(np.flatnonzero(roi.units), [0, 3, 7, 88, 89])
    assert roi.atlas is None and roi.areas == ("lh.drawn.label", "sub-01_hemi-R_desc-drawn_dseg.label.gii")
    assert "those of lh.drawn.label, sub-01_hemi-R_desc-drawn_dseg.label.gii (--roi)" in roi.describe()


@pytest.mark.parametrize(
    ("name", "vertices", "error", "match"),
    [
        (
            "lh.far.label",
            np.array([10, 60]),
            BadDataError,
            "names vertex 60, and hemisphere L of the fit has 50",
        ),
        ("mine.label", np.array([1]), UsageError, "name its hemisphere"),
        ("missing/lh.x.label", None, MissingInputError, "no such label file"),
    ],
)
def test_a_label_that_does_not_fit_is_one_line(tmp_path: Path, name, vertices, error, match) -> None:
    path = tmp_path / name
    if vertices is not None:
        write_freesurfer_label(path, vertices)
    with pytest.raises(error, match=match):
        roi_units((str(path),), None, "", GiftiGeometry(hemis={"L": 50, "R": 40}), "fsnative")
    wrong = write_gifti_label(tmp_path / "hemi-L_other.label.gii", np.ones(10, bool))
    with pytest.raises(BadDataError, match="has 10 vertices, hemisphere L of the fit 50"):
        roi_units((str(wrong),), None, "", GiftiGeometry(hemis={"L": 50, "R": 40}), "fsnative")
