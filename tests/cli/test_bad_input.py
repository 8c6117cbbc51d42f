"""Bad input: each case exits with its BIDS-Apps code, one line naming the file or option, and
leaves nothing but logs in output_dir (issue 3, Must show 5)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd
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


@pytest.mark.parametrize("scaling", ["demeaned", "z-scored"])
def test_demeaned_or_z_scored_bold_is_refused(bids_copy: Path, tmp_path: Path, capsys, scaling: str) -> None:
    """Series without their mean cannot become percent signal change: one line naming the fix, not maps
    of nonsense (issue 36)."""
    for path in (bids_copy / FMRIPREP).glob("*_bold.func.gii"):
        img = nib.load(path)
        data = np.stack([d.data for d in img.darrays], axis=1).astype(np.float64)
        data -= data.mean(axis=1, keepdims=True)
        if scaling == "z-scored":
            data /= np.where(data.std(axis=1, keepdims=True) > 0, data.std(axis=1, keepdims=True), 1.0)
        for k, darray in enumerate(img.darrays):
            darray.data = data[:, k].astype(np.float32)
        nib.save(img, path)
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert "looks demeaned or z-scored" in line and "--bold-scale percent" in line
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


def test_high_pass_above_nyquist_is_a_usage_error(bids_copy: Path, tmp_path: Path, capsys) -> None:
    """Issue 24, case 8: a cut-off at or above 1/(2 TR) removed the whole signal (0 units fitted, exit 0)."""
    out = tmp_path / "out"
    assert run(bids_copy, out, "--high-pass-hz", "1e9", "--skip-bids-validation") == 64
    line = error_line(capsys)
    assert "--high-pass-hz 1e+09 is not below the Nyquist frequency of sub-01_task-prf_run-1" in line
    assert only_logs(out)


@pytest.mark.parametrize("cut_off", ["0", "0.001"])
def test_no_high_pass_or_one_without_cosines_is_fitted(
    bids_copy: Path, tmp_path: Path, capsys, cut_off: str
) -> None:
    """Issue 24, case 9: an empty DCT basis (no high-pass, or no cosine below the cut-off in a run
    this short) was exit 1, a TypeError in the checkpoint's digest."""
    out = tmp_path / "out"
    fast = ("--refine", "none", "--hrf", "canonical", "--no-cvr2", "--skip-bids-validation")
    assert run(bids_copy, out, "--high-pass-hz", cut_off, *fast) == 0, capsys.readouterr().err
    assert capsys.readouterr().err == ""
    (sidecar,) = (out / "sub-01" / "func").glob("*_hemi-L_*_model-gauss_desc-x_boldmap.json")
    assert json.loads(sidecar.read_text())["Preprocessing"]["HighPassHz"] == float(cut_off)


def test_missing_confound_column(bids_copy: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    assert run(bids_copy, out, "--confounds", "trans_x", "no_such_column") == 64
    line = error_line(capsys)
    assert "--confounds" in line and "no_such_column" in line
    assert only_logs(out)


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ("n/a", "is n/a in every row"),
        ("high", "holds text ('high' in row 1)"),
        ("inf", "holds an infinite value"),
    ],
)
def test_an_unusable_confound_column_is_bad_data(
    bids_copy: Path, tmp_path: Path, capsys, value: str, problem: str
) -> None:
    """Issue 24, case 7: the column became zeros (exit 0, numpy warnings on stderr)."""
    path = next((bids_copy / FMRIPREP).glob("*_run-2_desc-confounds_timeseries.tsv"))
    table = pd.read_csv(path, sep="\t", dtype=str)
    table["trans_y"] = value
    table.to_csv(path, sep="\t", index=False)
    out = tmp_path / "out"
    assert run(bids_copy, out, "--confounds", "trans_x", "trans_y", "--skip-bids-validation") == 65
    line = error_line(capsys)
    assert f"--confounds column 'trans_y' of {path.name} {problem}" in line
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

    monkeypatch.setattr(prfmap.participant.level, "fit_models", broken_fit)
    out = tmp_path / "out"
    assert run(bids_copy, out) == 1
    line = error_line(capsys)
    assert "unexpected RuntimeError: injected fault" in line and "traceback" in line
    logs = output_files(out)
    assert only_logs(out) and any(name.startswith("logs/sub-01_") for name in logs)
    for name in (n for n in logs if n.endswith(".log")):
        text = (out / name).read_text()
        assert "Traceback" in text and "injected fault" in text


# -- issue 24 -------------------------------------------------------------------------------------


def _set_aperture(bids: Path, transform) -> Path:
    path = bids / "stimuli" / "bars.nii.gz"
    img = nib.load(path)
    nib.save(nib.Nifti1Image(transform(np.asarray(img.dataobj, dtype=np.float32)), img.affine), path)
    return path


def test_an_all_ones_aperture_is_refused(bids_copy: Path, tmp_path: Path, capsys) -> None:
    """Case 5: no position can be estimated from an aperture that is the same everywhere."""
    _set_aperture(bids_copy, np.ones_like)
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert "bars.nii.gz" in line and "uniform across the screen" in line
    assert only_logs(out)


@pytest.mark.parametrize("fov", [1e6, "20"])
def test_an_implausible_or_quoted_field_of_view_is_refused(
    bids_copy: Path, tmp_path: Path, capsys, fov
) -> None:
    """Case 5 (1e6 degrees) and case 19 (the string "20" is not "not positive")."""
    sidecar = bids_copy / "stimuli" / "bars.json"
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, "FieldOfViewDeg": fov}))
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert "FieldOfViewDeg in bars.json" in line
    assert ("outside the plausible 0.1-180°" in line) if fov == 1e6 else ("the string '20'" in line)
    assert only_logs(out)


def _shorten_run(bids: Path, volumes: int) -> list[Path]:
    paths = sorted((bids / FMRIPREP).glob("*_run-1_hemi-*_bold.func.gii"))
    for path in paths:
        img = nib.load(path)
        nib.save(nib.GiftiImage(darrays=img.darrays[:volumes], meta=img.meta), path)
    return paths


def test_a_short_run_names_its_file(bids_copy: Path, tmp_path: Path, capsys) -> None:
    """Case 19: a 3-volume run beside a full one: the message names the short run's BOLD file and the
    aperture, not only "different lengths"."""
    short = _shorten_run(bids_copy, 3)
    (bids_copy / FMRIPREP / "sub-01_task-prf_run-1_desc-confounds_timeseries.tsv").unlink()
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert short[0].name in line and "bars.nii.gz" in line and "3 volumes" in line, line
    assert only_logs(out)


def test_confounds_of_another_length_name_the_run(bids_copy: Path, tmp_path: Path, capsys) -> None:
    """Case 19: the confounds message names the BOLD file as well as the table."""
    short = _shorten_run(bids_copy, 3)
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert "run-1_desc-confounds_timeseries.tsv" in line and short[0].name in line, line
    assert only_logs(out)


def test_stim_file_index_rows_are_named_as_such(bids_copy: Path, tmp_path: Path, capsys) -> None:
    """Case 19: 101 stim_file_index rows for a 148-volume run blame the events' rows, not an aperture
    "with 101 frames" (it has 148)."""
    frames = nib.load(bids_copy / "stimuli" / "bars.nii.gz").shape[-1]
    events = next((bids_copy / "sub-01" / "func").glob("*_run-1_events.tsv"))
    rows = [f"{i * 1.5}\t1.5\tbars.nii.gz\t{i}" for i in range(101)]
    events.write_text("onset\tduration\tstim_file\tstim_file_index\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out"
    assert run(bids_copy, out) == 65
    line = error_line(capsys)
    assert f"bars.nii.gz ({frames} frames) through the 101 stim_file_index rows of {events.name}" in line
    assert f"has {frames} volumes" in line
    assert only_logs(out)


@pytest.mark.parametrize(
    ("bold_filter", "code", "says"),
    [
        ({"extension": ".tsv"}, 64, "'extension' ['.tsv'] selects none of the BOLD formats prfmap reads"),
        ({"scope": "raw"}, 64, "'scope' is not a BIDS entity"),
        ({"extension": ".nii.gz"}, 18, "no preprocessed BOLD"),
    ],
)
def test_filter_files_with_query_keys(
    bids_copy: Path, tmp_path: Path, capsys, bold_filter, code: int, says: str
) -> None:
    """Case 19: a filter naming what prfmap's query sets (extension, suffix, scope) gets prfmap's
    message, never pybids' "got multiple values for keyword argument"."""
    path = tmp_path / "filter.json"
    path.write_text(json.dumps({"bold": bold_filter}))
    out = tmp_path / "out"
    assert run(bids_copy, out, "--bids-filter-file", str(path)) == code
    line = error_line(capsys)
    assert says in line and "multiple values" not in line, line
    assert only_logs(out)


def test_fmriprep_style_filter_with_suffix_and_extension_selects_the_runs(small_synth: Path) -> None:
    """Case 19: fMRIPrep's own filter files say "suffix": "bold"; prfmap accepts that, and an
    extension among the formats it reads narrows the query."""
    from prfmap.io.bids import find_inputs

    runs = find_inputs(
        small_synth, bids_filter={"bold": {"datatype": "func", "suffix": "bold", "extension": "func.gii"}}
    )
    assert [r.run for r in runs] == [1, 2] and all(r.kind == "gifti" for r in runs)


@pytest.mark.parametrize("inside", ["", "work"])
def test_work_dir_in_output_dir_is_refused(bids_copy: Path, tmp_path: Path, capsys, inside: str) -> None:
    """Case 20: -w equal to output_dir (or a visible folder in it) would leave bids_db/ and
    checkpoints/ in the derivatives, which the BIDS validator then rejects."""
    out = tmp_path / "out"
    assert run(bids_copy, out, "-w", str(out / inside)) == 64
    line = error_line(capsys)
    assert "--work-dir" in line and "output_dir" in line and ".prfmap-work" in line
    assert output_files(out) == []


def test_a_hidden_work_dir_in_output_dir_is_allowed(small_synth: Path, tmp_path: Path) -> None:
    from prfmap.cli.config import check_output_locations

    out = tmp_path / "out"
    check_output_locations(small_synth, out, out / ".work", [])
    check_output_locations(small_synth, out, tmp_path, [])  # output_dir inside the work dir is fine


def test_an_atlas_that_cannot_reach_the_space_is_one_line(bids_copy: Path, tmp_path: Path, capsys) -> None:
    """HCP-MMP1.0 is on fs_LR and does not reach fsaverage offline: refused by name, nothing written."""
    out = tmp_path / "out"
    assert run(bids_copy, out, "--atlas", "hcpmmp") == 66
    line = error_line(capsys)
    assert "--atlas hcpmmp is on fs_LR and space fsaverage5 on fsaverage" in line
    assert "choose --atlas benson14 or wang15" in line
    assert only_logs(out)
