"""The participant level's stages one at a time, in process, on a small synthetic volume dataset."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from prfmap.cli.config import build_config
from prfmap.cli.parser import build_parser
from prfmap.config import Config
from prfmap.errors import BadDataError, MissingInputError
from prfmap.io.bids import find_runs
from prfmap.io.timing import SliceTimeReference
from prfmap.participant.fit import fit_loaded
from prfmap.participant.load import load_fit
from prfmap.participant.outputs import report_context, write_outcome
from prfmap.participant.plan import FitPlan, checkpoint_dir, how_to_resume, plan_fits
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset

DUMMY = 2


def no_progress(stage: str, done: int, total: int) -> None:
    """The stages' progress callback, silent."""


@pytest.fixture(scope="module")
def bids(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two runs of one participant in T1w (~800 voxels), two flagged dummy scans per run."""
    config = SynthConfig(space="T1w", small=True, runs=2, dummy_scans=DUMMY)
    return make_synthetic_dataset(tmp_path_factory.mktemp("workflow") / "bids", config)


def configure(bids: Path, out: Path, *options: str) -> Config:
    return build_config(build_parser().parse_args([str(bids), str(out), "participant", *options]))


@pytest.fixture(scope="module")
def plan(bids: Path, tmp_path_factory: pytest.TempPathFactory) -> FitPlan:
    tmp = tmp_path_factory.mktemp("plan")
    config = configure(bids, tmp / "out")
    (plan,) = plan_fits(find_runs(config.inputs, work_dir=tmp / "work"), config.fit.model)
    return plan


def test_plans_group_runs_by_task_and_space(plan: FitPlan) -> None:
    assert plan.name == "task-prf_space-T1w_model-gauss"
    assert [run.run for run in plan.runs] == [1, 2]
    runs = [*plan.runs, dataclasses.replace(plan.runs[0], task="wedges")]
    plans = plan_fits(runs, "css")
    assert [(p.name, len(p.runs)) for p in plans] == [
        ("task-prf_space-T1w_model-css", 2),
        ("task-wedges_space-T1w_model-css", 1),
    ]


def test_load_fit_drops_dummy_scans_and_averages_runs(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    calls = []
    loaded = load_fit(plan, configure(bids, tmp_path / "out"), lambda *a: calls.append(a))
    frames = nib.load(bids / "stimuli" / "bars.nii.gz").shape[-1]
    truth = load_truth(bids, "01")
    assert loaded.combined.data.shape == (truth["x"].size, frames) == (loaded.geometry.n_units, frames)
    assert loaded.combined.run_lengths == [frames]  # one stimulus: the two runs are averaged
    assert loaded.dummy_scans == (DUMMY, DUMMY) and loaded.tr == 1.5 and loaded.fov_deg == 20.0
    assert calls[0] == ("load runs", 0, 2) and calls[-1] == ("load runs", 2, 2)
    run = plan.runs[0]
    assert loaded.inputs[:4] == (str(run.bold), str(run.mask), str(run.events), str(run.confounds))
    assert len(loaded.inputs) == len(set(loaded.inputs))
    with pytest.raises(dataclasses.FrozenInstanceError):
        loaded.tr = 2.0  # type: ignore[misc]


def test_load_fit_checks_frames_against_volumes_once(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    config = configure(bids, tmp_path / "out", "--dummy-scans", "0")
    frames = nib.load(bids / "stimuli" / "bars.nii.gz").shape[-1]
    with pytest.raises(BadDataError) as info:
        load_fit(plan, config, no_progress)
    message = str(info.value)
    assert f"bars.nii.gz has {frames} frames" in message
    assert f"has {frames + DUMMY} volumes after 0 dummy scans" in message and "_bold.nii.gz" in message


def test_load_fit_needs_the_confounds_it_is_asked_for(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    config = configure(bids, tmp_path / "out", "--confounds", "trans_x")
    without = FitPlan(plan.key, tuple(dataclasses.replace(r, confounds=None) for r in plan.runs))
    with pytest.raises(MissingInputError, match="--confounds given but sub-01_task-prf_run-1 has no"):
        load_fit(without, config, no_progress)


def test_fit_write_and_report_stages(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    config = configure(bids, out, "--refine", "none", "--work-dir", str(work), "--save-predictions")
    loaded = load_fit(plan, config, no_progress)
    fitted = fit_loaded(loaded, config, no_progress)
    n_units = loaded.geometry.n_units
    assert fitted.result.params["sigma"].shape == fitted.result.r2.shape == (n_units,)
    assert fitted.result.predictions.shape == loaded.combined.data.shape
    assert set(fitted.timings) == {"load", "fit", "cross_validation"} and fitted.loaded is loaded
    assert list(checkpoint_dir(config, "01").glob(f"{plan.name}/*/chunk-*.npz"))
    assert how_to_resume(config).endswith("with the same --work-dir to resume from the saved chunks")

    stage = tmp_path / "stage"
    files = write_outcome(fitted, config, stage)
    names = {p.name for p in files}
    stem = "sub-01_task-prf_space-T1w_model-gauss"
    assert {f"{stem}_desc-{p}_boldmap.nii.gz" for p in ("x", "sigma", "r2")} <= names
    assert "sub-01_task-prf_space-T1w_desc-gaussprediction_bold.nii.gz" in names
    assert all(p.is_relative_to(stage / "sub-01" / "func") for p in files)
    sidecar = json.loads((stage / "sub-01" / "func" / f"{stem}_desc-sigma_boldmap.json").read_text())
    assert sidecar["Preprocessing"]["DummyScans"] == [DUMMY, DUMMY]
    assert sidecar["RandomSeed"] == 0 and sidecar["Runs"] == [r.name for r in plan.runs]
    assert sidecar["Sources"][0].startswith("bids:fmriprep:sub-01/func/")
    # the slice-time reference used is recorded in every sidecar and in the report's settings
    used = loaded.slice_time.fraction
    assert sidecar["FitSettings"]["slice_time_ref"] == pytest.approx(used)
    assert sidecar["SliceTimeReference"] == loaded.slice_time.describe(loaded.tr)

    published = [out / p.relative_to(stage) for p in files]
    context = report_context(fitted, published, 0.25, config)
    assert context.surface is None and context.timings["write"] == 0.25
    assert context.dummy_scans == DUMMY and context.runs == ["task-prf_run-1", "task-prf_run-2"]
    assert context.outputs[0].startswith("sub-01/func/")
    assert context.fmriprep_dir == config.inputs.fmriprep_dir
    np.testing.assert_array_equal(context.maps["r2"], fitted.result.r2)
    assert context.extra_settings["slice_time_reference"]["Fraction"] == pytest.approx(used)


def test_the_slice_time_reference_comes_from_the_sidecars(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    # prfmap-synth's default: sampled per slice, SliceTiming in the raw sidecars, not corrected
    raw = json.loads((bids / "sub-01/func/sub-01_task-prf_run-1_bold.json").read_text())
    slice_timing = raw["SliceTiming"]
    loaded = load_fit(plan, configure(bids, tmp_path / "a"), no_progress)
    assert loaded.slice_time.rule == "slice_timing_mean"
    assert loaded.slice_time.fraction == pytest.approx(np.mean(slice_timing) / 1.5)
    loaded = load_fit(plan, configure(bids, tmp_path / "b", "--slice-time-ref", "middle"), no_progress)
    assert (loaded.slice_time.rule, loaded.slice_time.fraction) == ("option", 0.5)
    # runs whose sidecars disagree are not averaged under one reference
    other = dataclasses.replace(plan.runs[1], slice_time=SliceTimeReference(0.0, "no_information"))
    mixed = FitPlan(plan.key, (plan.runs[0], other))
    with pytest.raises(BadDataError, match="imply different slice-time references .* --slice-time-ref"):
        load_fit(mixed, configure(bids, tmp_path / "c"), no_progress)
    assert (
        load_fit(
            mixed, configure(bids, tmp_path / "d", "--slice-time-ref", "0.2"), no_progress
        ).slice_time.fraction
        == 0.2
    )


@pytest.mark.parametrize(
    ("mode", "fraction", "rule"),
    [
        ("start", 0.0, "no_information"),
        ("middle", 0.5, "start_time"),
    ],
)
def test_each_sampling_gets_its_reference_without_options(
    tmp_path: Path, mode: str, fraction: float, rule: str
) -> None:
    """Data sampled at the TR start (SliceTimingCorrected false, no SliceTiming) and data with
    StartTime = TR/2: the selected reference, with no option given."""
    root = make_synthetic_dataset(
        tmp_path / "bids", SynthConfig(space="T1w", small=True, runs=1, slice_timing=mode)
    )
    config = configure(root, tmp_path / "out")
    (plan,) = plan_fits(find_runs(config.inputs, work_dir=tmp_path / "work"), "gauss")
    loaded = load_fit(plan, config, no_progress)
    assert (loaded.slice_time.fraction, loaded.slice_time.rule) == (fraction, rule)


def test_non_finite_frames_are_repaired_or_refused_never_dropped_silently(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = make_synthetic_dataset(tmp_path / "bids", SynthConfig(space="T1w", small=True, runs=1))
    bold = next((root / "derivatives/fmriprep/sub-01/func").glob("*_desc-preproc_bold.nii.gz"))
    img = nib.load(bold)
    data = np.asarray(img.dataobj, dtype=np.float32)
    mask = np.asarray(nib.load(next(bold.parent.glob("*_desc-brain_mask.nii.gz"))).dataobj) > 0
    voxels = np.argwhere(mask)[:3]
    data[tuple(voxels[0])][[10, 40]] = np.nan  # two frames: repaired
    data[tuple(voxels[1])][20] = np.inf  # one frame: repaired
    data[tuple(voxels[2])][::10] = np.nan  # 10 % of the frames: refused
    nib.save(nib.Nifti1Image(data, img.affine, img.header), bold)
    config = configure(root, tmp_path / "out")
    (plan,) = plan_fits(find_runs(config.inputs, work_dir=tmp_path / "work"), "gauss")
    with caplog.at_level("WARNING", logger="prfmap"):
        loaded = load_fit(plan, config, no_progress)
    expected = (
        "sub-01_task-prf_run-1: 2 unit(s) with non-finite frames repaired by linear "
        "interpolation (3 frame(s) in all, at most 2 in one unit); 1 unit(s) refused (NaN in "
        "every map): more than 5% of their frames non-finite or a gap over 4 s"
    )
    assert expected in caplog.text and loaded.warnings == (expected,)
    rows = np.isnan(loaded.combined.data).all(axis=1)
    assert rows[:3].tolist() == [False, False, True]


def test_participant_hrf_is_estimated_per_fit_and_fold_and_recorded(
    bids: Path, plan: FitPlan, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    config = configure(
        bids,
        tmp_path / "out",
        "--hrf",
        "participant",
        "--refine",
        "none",
        "--work-dir",
        str(tmp_path / "work"),
    )
    with caplog.at_level("INFO", logger="prfmap"):
        fitted = fit_loaded(load_fit(plan, config, no_progress), config, no_progress)
    # once for the fit of both runs, once per leave-one-run-out fold from its training run
    assert sum("participant HRF from" in r.getMessage() for r in caplog.records) == 3
    record = fitted.result.settings.hrf_model
    assert record["option"] == "participant" and record["units"] >= 20
    assert fitted.result.settings.hrf.startswith("participant-level two-gamma")
    files = write_outcome(fitted, config, tmp_path / "stage")
    sidecar = json.loads(next(p for p in files if p.name.endswith("desc-sigma_boldmap.json")).read_text())
    assert sidecar["HRF"]["Option"] == "participant" and sidecar["FitSettings"]["hrf_model"] == record
    assert sidecar["HRF"]["TimeToPeak"] == record["peak_s"]
    assert sidecar["HRF"]["PeakDelay"] == record["delay_s"]
    assert np.isfinite(fitted.cv.cvr2).any()
