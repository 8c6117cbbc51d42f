"""--smooth-fwhm end to end: a volume and a CIFTI participant smoothed, recorded, and a kernel too narrow
for the mesh refused."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import only_logs, read_maps, synthesise
from prfmap.cli.run import main
from prfmap.synth import load_truth

FAST = ("--no-report", "--refine", "none", "--hrf", "canonical", "--no-cvr2", "--skip-bids-validation")


def _fit(bids: Path, out: Path, *options: str) -> dict[str, np.ndarray]:
    assert main([str(bids), str(out), "participant", "--work-dir", str(out) + "-work", *FAST, *options]) == 0
    return read_maps(bids, out, ("r2", "x"))


@pytest.mark.parametrize(
    ("space", "fwhm", "method"), [("T1w", "4", "in the volume"), ("fsLR", "4", "midthickness")]
)
def test_smoothing_is_applied_and_recorded(
    space: str, fwhm: str, method: str, tmp_path: Path, capsys
) -> None:
    bids = synthesise(tmp_path / "bids", space=space, small=True, noise=1.0)
    prf = load_truth(bids)["mask"]
    plain = _fit(bids, tmp_path / "plain")
    capsys.readouterr()
    smoothed = _fit(bids, tmp_path / "smoothed", "--smooth-fwhm", fwhm)
    assert capsys.readouterr().err == ""  # no library warning

    # averaging neighbours' independent noise raises the variance explained of the pRF units
    assert np.nanmedian(smoothed["r2"][prf]) > 1.2 * np.nanmedian(plain["r2"][prf])
    func = tmp_path / "smoothed" / "sub-01" / "func"
    sidecar = json.loads(next(func.glob("*_model-gauss*_boldmap.json")).read_text())
    assert sidecar["Preprocessing"]["SmoothingFWHM"] == float(fwhm)
    assert method in sidecar["Preprocessing"]["SmoothingMethod"]
    plain_sidecar = next((tmp_path / "plain" / "sub-01" / "func").glob("*_model-gauss*_boldmap.json"))
    assert "SmoothingFWHM" not in json.loads(plain_sidecar.read_text())["Preprocessing"]


def test_a_kernel_narrower_than_the_mesh_is_refused(small_synth: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    code = main([str(small_synth), str(out), "participant", *FAST, "--smooth-fwhm", "2"])
    assert code == 64
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prfmap: error: --smooth-fwhm 2 smooths nothing"), lines
    assert "use at least 3.1 mm" in lines[0]
    assert only_logs(out)


@pytest.mark.parametrize("fwhm", ["20.5", "1e6", "inf", "-1"])
def test_a_kernel_wider_than_any_visual_area_or_negative_is_a_usage_error(
    fwhm: str, tmp_path: Path, capsys
) -> None:
    """A hostile width used to run for hours (the surface smoothing's iterations grow as its square)."""
    out = tmp_path / "out"
    assert main([str(tmp_path / "bids"), str(out), "participant", "--smooth-fwhm", fwhm]) == 64
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("prfmap: error: argument --smooth-fwhm: ") and fwhm in line, line
    assert not out.exists()
