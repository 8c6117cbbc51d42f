"""Bad input: each case exits with its BIDS-Apps code, one line naming the file or option, and
leaves nothing but logs in output_dir (issue 3, Must show 5)."""

from __future__ import annotations

import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import only_logs, output_files
from prfmap.cli.run import main

FMRIPREP = Path("derivatives") / "fmriprep" / "sub-01" / "func"


def run(bids: Path, out: Path, *options: str) -> int:
    return main([str(bids), str(out), "participant", "--no-report", *options])


def error_line(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("prfmap: error: ")
    return lines[0]


def test_no_derivatives_found(bids_copy: Path, tmp_path: Path, capsys) -> None:
    shutil.rmtree(bids_copy / "derivatives" / "fmriprep")
    out = tmp_path / "out"
    assert run(bids_copy, out) == 66
    line = error_line(capsys)
    assert "no fMRIPrep derivatives" in line and "--derivatives" in line
    assert only_logs(out)


def test_derivatives_option_pointing_nowhere(bids_copy: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert run(bids_copy, out, "--derivatives", f"fmriprep={tmp_path / 'nowhere'}") == 66
    assert "nowhere does not exist" in error_line(capsys)
    assert only_logs(out)


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (("--participant-label", "sub-99"), "participant(s) 99"),
        (("--task", "wedges"), "task=['wedges']"),
        (("--run", "7"), "run=[7]"),
        (("--space", "T1w"), "no preprocessed BOLD in space T1w"),
    ],
)
def test_filters_match_nothing(
    bids_copy: Path, tmp_path: Path, capsys, options: tuple[str, ...], expected: str
) -> None:
    out = tmp_path / "out"
    assert run(bids_copy, out, *options) == 18
    line = error_line(capsys)
    assert expected in line
    assert only_logs(out)


def test_stim_file_missing(bids_copy: Path, tmp_path: Path, capsys) -> None:
    """prfmap's own check (the BIDS validator, which also objects, is skipped here)."""
    (bids_copy / "stimuli" / "bars.nii.gz").unlink()
    out = tmp_path / "out"
    assert run(bids_copy, out, "--skip-bids-validation") == 66
    line = error_line(capsys)
    assert "stim_file bars.nii.gz" in line and "not found" in line and "--stimulus" in line
    assert only_logs(out)


def test_aperture_frames_differ_from_volumes(bids_copy: Path, tmp_path: Path, capsys) -> None:
    stim = nib.load(bids_copy / "stimuli" / "bars.nii.gz")
    frames = stim.shape[-1]
    out = tmp_path / "out"
    assert run(bids_copy, out, "--dummy-scans", "3") == 65
    line = error_line(capsys)
    assert f"has {frames} frames" in line
    assert f"has {frames - 3} volumes after 3 dummy scans" in line
    assert "bars.nii.gz" in line and "_bold.func.gii" in line
    assert only_logs(out)


def test_short_stimulus_override(bids_copy: Path, tmp_path: Path, capsys) -> None:
    stim = np.asarray(nib.load(bids_copy / "stimuli" / "bars.nii.gz").dataobj)
    short = tmp_path / "short.npy"
    np.save(short, np.moveaxis(stim[:, :, 0, :-5], -1, 0).astype(np.float32))
    out = tmp_path / "out"
    code = run(bids_copy, out, "--stimulus", str(short), "--stimulus-fov-deg", "20")
    assert code == 65
    line = error_line(capsys)
    assert f"short.npy has {stim.shape[-1] - 5} frames" in line
    assert f"has {stim.shape[-1]} volumes" in line
    assert only_logs(out)


def test_aperture_values_outside_unit_interval(bids_copy: Path, tmp_path: Path, capsys) -> None:
    path = bids_copy / "stimuli" / "bars.nii.gz"
    img = nib.load(path)
    scaled = np.asarray(img.dataobj, dtype=np.float32) * 255
    nib.save(nib.Nifti1Image(scaled, img.affine), path)
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert "bars.nii.gz has values in [0, 255]" in line and "[0, 1]" in line
    assert only_logs(out)


def test_corrupt_gifti(bids_copy: Path, tmp_path: Path, capsys) -> None:
    path = next((bids_copy / FMRIPREP).glob("*_run-2_hemi-R_*_bold.func.gii"))
    content = path.read_bytes()
    path.write_bytes(content[: len(content) // 2])
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert f"cannot read {path}" in line and "corrupt" in line
    assert only_logs(out)


def test_unknown_space(bids_copy: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert run(bids_copy, out, "--space", "fsaverage7") == 64
    line = error_line(capsys)
    assert "--space" in line and "unknown space 'fsaverage7'" in line
    assert output_files(out) == []


def test_missing_confound_column(bids_copy: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert run(bids_copy, out, "--confounds", "trans_x", "no_such_column") == 64
    line = error_line(capsys)
    assert "--confounds" in line and "no_such_column" in line
    assert only_logs(out)


def test_logs_record_the_error(bids_copy: Path, tmp_path: Path, capsys) -> None:
    (bids_copy / "stimuli" / "bars.nii.gz").unlink()
    out = tmp_path / "out"
    assert run(bids_copy, out, "--skip-bids-validation") == 66
    capsys.readouterr()
    logs = output_files(out)
    assert logs and all(name.startswith("logs/prfmap_") for name in logs)
    assert "stim_file bars.nii.gz" in (out / logs[0]).read_text()


def test_unexpected_failure_exits_1_with_the_traceback_in_the_log(
    bids_copy: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    import prfmap.participant.level

    def broken_fit(loaded, config, progress) -> None:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(prfmap.participant.level, "fit_loaded", broken_fit)
    out = tmp_path / "out"
    assert run(bids_copy, out) == 1
    line = error_line(capsys)
    assert "unexpected RuntimeError: injected fault" in line and "traceback" in line
    logs = output_files(out)
    assert only_logs(out) and any(name.startswith("logs/sub-01_") for name in logs)
    for name in (n for n in logs if n.endswith(".log")):
        text = (out / name).read_text()
        assert "Traceback" in text and "injected fault" in text
