"""find_inputs: pybids queries over raw BIDS + fMRIPrep derivatives, and its errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from prfmap.errors import (
    BadDataError,
    ExitCode,
    MissingInputError,
    NoFilesSelectedError,
    NotBIDSError,
    UsageError,
)
from prfmap.io.bids import find_inputs


def test_default_space_is_a_surface_with_both_hemispheres(dataset, tmp_path):
    runs = find_inputs(dataset.root, tmp_path / "out", work_dir=tmp_path / "work")
    assert [r.run for r in runs] == [1, 2]
    run = runs[0]
    assert (run.kind, run.space, run.den, run.subject, run.task) == ("gifti", "fsaverage5", None, "01", "prf")
    assert set(run.bold) == {"L", "R"}
    assert run.bold["L"].name == "sub-01_task-prf_run-1_hemi-L_space-fsaverage5_bold.func.gii"
    assert run.tr == 1.5  # inherited from the top-level task-prf_bold.json
    assert run.stim_file == dataset.root / "stimuli" / "bars.npy"
    assert run.events.name == "sub-01_task-prf_run-1_events.tsv"
    assert run.confounds.name == "sub-01_task-prf_run-1_desc-confounds_timeseries.tsv"
    assert run.entities["space"] == "fsaverage5" and run.entities["run"] == "1"
    assert "hemi" not in run.entities
    assert run.name == "sub-01_task-prf_run-1"
    assert (tmp_path / "work" / "bids_db").is_dir()
    assert runs[0].stimulus_key == runs[1].stimulus_key


@pytest.mark.parametrize(
    ("space", "kind", "suffix", "den"),
    [
        ("fsLR", "cifti", "space-fsLR_den-91k_bold.dtseries.nii", "91k"),
        ("fsLR:den-91k", "cifti", "space-fsLR_den-91k_bold.dtseries.nii", "91k"),
        ("T1w", "volume", "space-T1w_desc-preproc_bold.nii.gz", None),
        (
            "MNI152NLin2009cAsym:res-2",
            "volume",
            "space-MNI152NLin2009cAsym_res-2_desc-preproc_bold.nii.gz",
            None,
        ),
        ("fsaverage:den-10k", "gifti", None, None),
    ],
)
def test_spaces_select_the_right_files(dataset, space, kind, suffix, den):
    runs = find_inputs(dataset.root, runs=[2], space=space)
    assert len(runs) == 1
    run = runs[0]
    assert run.kind == kind and run.den == den
    if suffix:
        assert run.bold.name == f"sub-01_task-prf_run-2_{suffix}"
    if kind == "volume":
        assert run.mask.name.endswith("_desc-brain_mask.nii.gz")
        assert run.mask.name.startswith(run.bold.name.split("_desc-")[0])
        assert run.tr == 1.5


def test_tr_from_derivative_sidecar_wins(dataset):
    side = dataset.func() / "sub-01_task-prf_run-1_space-fsLR_den-91k_bold.json"
    side.write_text(json.dumps({"RepetitionTime": 2.0}))
    runs = find_inputs(dataset.root, space="fsLR")
    assert [r.tr for r in runs] == [2.0, 1.5]


def test_filters_and_labels_with_prefixes(make_dataset, tmp_path):
    ds = make_dataset(subjects=("01", "02"), runs=(1,))
    runs = find_inputs(ds.root, participant_labels=["sub-02"], space="fsaverage5")
    assert [r.subject for r in runs] == ["02"]
    runs = find_inputs(ds.root, tasks=["task-prf"], runs=["run-1"], space="T1w")
    assert [r.subject for r in runs] == ["01", "02"]
    flt = tmp_path / "filter.json"
    flt.write_text(json.dumps({"bold": {"subject": "01"}}))
    assert [r.subject for r in find_inputs(ds.root, bids_filter=flt)] == ["01"]


def test_derivatives_given_explicitly(dataset, tmp_path):
    moved = tmp_path / "elsewhere" / "fmriprep"
    shutil.move(str(dataset.fmriprep), moved)
    with pytest.raises(MissingInputError, match="derivatives/fmriprep"):
        find_inputs(dataset.root)
    runs = find_inputs(dataset.root, derivatives=[("fmriprep", moved)])
    assert runs[0].bold["L"].is_relative_to(moved)
    assert find_inputs(dataset.root, derivatives={"fmriprep": moved})[0].tr == 1.5


def test_stim_file_index_one_based(dataset):
    events = dataset.func(raw=True) / "sub-01_task-prf_run-1_events.tsv"
    rows = "".join(f"{1.5 * i}\t1.5\tbars.npy\t{i + 1}\n" for i in range(12))
    events.write_text("onset\tduration\tstim_file\tstim_file_index\n" + rows)
    run1, run2 = find_inputs(dataset.root)
    assert run1.stim_file_index == tuple(range(12))
    assert run2.stim_file_index is None
    assert run1.stimulus_key != run2.stimulus_key


def test_stimulus_override_needs_no_events(make_dataset):
    ds = make_dataset(events=False)
    with pytest.raises(MissingInputError, match="stim_file"):
        find_inputs(ds.root)
    override = ds.root / "stimuli" / "bars.npy"
    runs = find_inputs(ds.root, stimulus=override)
    assert all(r.stim_file == override for r in runs)


def test_not_bids(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotBIDSError, match="dataset_description.json") as info:
        find_inputs(tmp_path / "empty")
    assert info.value.exit_code == ExitCode.NOT_BIDS
    with pytest.raises(NotBIDSError, match="does not exist"):
        find_inputs(tmp_path / "missing")


def test_no_derivatives(dataset):
    ds = dataset
    shutil.rmtree(ds.fmriprep)
    with pytest.raises(MissingInputError, match="--derivatives") as info:
        find_inputs(ds.root)
    assert info.value.exit_code == ExitCode.MISSING_INPUT
    assert "\n" not in str(info.value)


def test_filters_select_nothing(dataset):
    with pytest.raises(NoFilesSelectedError, match="participants present: 01") as info:
        find_inputs(dataset.root, participant_labels=["07"])
    assert info.value.exit_code == ExitCode.NO_FILES_SELECTED
    with pytest.raises(NoFilesSelectedError, match="task"):
        find_inputs(dataset.root, tasks=["rest"])
    with pytest.raises(NoFilesSelectedError, match="spaces present"):
        find_inputs(dataset.root, space="fsnative")


def test_unknown_space(dataset):
    with pytest.raises(UsageError, match="unknown space 'fsavrage5'") as info:
        find_inputs(dataset.root, space="fsavrage5")
    assert info.value.exit_code == ExitCode.USAGE


def test_missing_stim_file(dataset):
    (dataset.root / "stimuli" / "bars.npy").unlink()
    with pytest.raises(MissingInputError, match="stim_file bars.npy named in") as info:
        find_inputs(dataset.root)
    assert "stimuli" in str(info.value) and "--stimulus" in str(info.value)


def test_missing_hemisphere_and_mask(dataset):
    (dataset.func() / "sub-01_task-prf_run-1_hemi-R_space-fsaverage5_bold.func.gii").unlink()
    with pytest.raises(MissingInputError, match="hemi-R"):
        find_inputs(dataset.root, space="fsaverage5")
    (dataset.func() / "sub-01_task-prf_run-2_space-T1w_desc-brain_mask.nii.gz").unlink()
    with pytest.raises(MissingInputError, match="brain mask"):
        find_inputs(dataset.root, space="T1w")


def test_missing_tr(dataset):
    ds = dataset
    (ds.root / "task-prf_bold.json").unlink()
    with pytest.raises(MissingInputError, match="RepetitionTime"):
        find_inputs(ds.root, space="fsaverage5")
    # volumes fall back on the NIfTI header's time step
    assert find_inputs(ds.root, space="T1w")[0].tr == 1.5


def test_two_stim_files_in_one_run(dataset):
    events = dataset.func(raw=True) / "sub-01_task-prf_run-1_events.tsv"
    events.write_text("onset\tduration\tstim_file\n0\t9\tbars.npy\n9\t9\tother.npy\n")
    with pytest.raises(BadDataError, match="2 different stim_files"):
        find_inputs(dataset.root)


def test_messages_are_one_line(dataset, tmp_path):
    for call in (
        lambda: find_inputs(tmp_path),
        lambda: find_inputs(dataset.root, participant_labels=["9"]),
        lambda: find_inputs(dataset.root, derivatives=[Path("/nonexistent")]),
    ):
        with pytest.raises(Exception) as info:
            call()
        assert "\n" not in str(info.value)


def test_fslr_32k_gifti_and_legacy_fsaverage_names(dataset):
    import nibabel as nib

    for path in list(dataset.func().glob("*space-fsaverage5_bold.func.gii")):
        for new in (
            path.name.replace("fsaverage5", "fsLR_den-32k"),
            path.name.replace("fsaverage5", "fsaverage_den-10k"),
        ):
            nib.save(nib.load(path), path.with_name(new))
        path.unlink()
    runs = find_inputs(dataset.root, space="fsLR:den-32k")
    assert [(r.kind, r.space, r.den) for r in runs] == [("gifti", "fsLR", "32k")] * 2
    assert runs[0].bold["R"].name == "sub-01_task-prf_run-1_hemi-R_space-fsLR_den-32k_bold.func.gii"
    # fMRIPrep's modern fsaverage:den-10k is the same space as the legacy fsaverage5
    runs = find_inputs(dataset.root, space="fsaverage5")
    assert runs[0].bold["L"].name.endswith("space-fsaverage_den-10k_bold.func.gii")
    # without --space, surfaces come first: fsaverage (10k) before fsLR
    assert find_inputs(dataset.root)[0].den == "10k"


def test_sessions(dataset):
    for base in (dataset.root, dataset.fmriprep):
        old = base / "sub-01" / "func"
        new = base / "sub-01" / "ses-a" / "func"
        new.mkdir(parents=True)
        for path in old.iterdir():
            path.rename(new / path.name.replace("sub-01_", "sub-01_ses-a_"))
        old.rmdir()
    runs = find_inputs(dataset.root, session_labels=["ses-a"], runs=[2])
    assert len(runs) == 1
    run = runs[0]
    assert run.session == "a" and run.name == "sub-01_ses-a_task-prf_run-2"
    assert run.events.name == "sub-01_ses-a_task-prf_run-2_events.tsv"
    assert run.confounds.name == "sub-01_ses-a_task-prf_run-2_desc-confounds_timeseries.tsv"
    with pytest.raises(NoFilesSelectedError):
        find_inputs(dataset.root, session_labels=["b"])
