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
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset
from prfmap.workflow import (
    FitPlan,
    checkpoint_dir,
    fit_group,
    how_to_resume,
    load_group,
    plan_fits,
    report_context,
    write_group,
)

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
        ("task-prf_space-T1w_model-css", 2), ("task-wedges_space-T1w_model-css", 1)
    ]  # fmt: skip


def test_load_group_drops_dummy_scans_and_averages_runs(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    calls = []
    loaded = load_group(plan, configure(bids, tmp_path / "out"), lambda *a: calls.append(a))
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


def test_load_group_checks_frames_against_volumes_once(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    config = configure(bids, tmp_path / "out", "--dummy-scans", "0")
    frames = nib.load(bids / "stimuli" / "bars.nii.gz").shape[-1]
    with pytest.raises(BadDataError) as info:
        load_group(plan, config, no_progress)
    message = str(info.value)
    assert f"bars.nii.gz has {frames} frames" in message
    assert f"has {frames + DUMMY} volumes after 0 dummy scans" in message and "_bold.nii.gz" in message


def test_load_group_needs_the_confounds_it_is_asked_for(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    config = configure(bids, tmp_path / "out", "--confounds", "trans_x")
    without = FitPlan(plan.key, tuple(dataclasses.replace(r, confounds=None) for r in plan.runs))
    with pytest.raises(MissingInputError, match="--confounds given but sub-01_task-prf_run-1 has no"):
        load_group(without, config, no_progress)


def test_fit_write_and_report_stages(bids: Path, plan: FitPlan, tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    config = configure(bids, out, "--refine", "none", "--work-dir", str(work), "--save-predictions")
    loaded = load_group(plan, config, no_progress)
    fitted = fit_group(loaded, config, no_progress)
    n_units = loaded.geometry.n_units
    assert fitted.result.params["sigma"].shape == fitted.result.r2.shape == (n_units,)
    assert fitted.result.predictions.shape == loaded.combined.data.shape
    assert set(fitted.timings) == {"load", "fit"} and fitted.loaded is loaded
    assert list(checkpoint_dir(config, "01").glob(f"{plan.name}/*/chunk-*.npz"))
    assert how_to_resume(config).endswith("with the same --work-dir to resume from the saved chunks")

    stage = tmp_path / "stage"
    files = write_group(fitted, config, stage)
    names = {p.name for p in files}
    stem = "sub-01_task-prf_space-T1w_model-gauss"
    assert {f"{stem}_desc-{p}_boldmap.nii.gz" for p in ("x", "sigma", "r2")} <= names
    assert "sub-01_task-prf_space-T1w_desc-gaussprediction_bold.nii.gz" in names
    assert all(p.is_relative_to(stage / "sub-01" / "func") for p in files)
    sidecar = json.loads((stage / "sub-01" / "func" / f"{stem}_desc-sigma_boldmap.json").read_text())
    assert sidecar["Preprocessing"]["DummyScans"] == [DUMMY, DUMMY]
    assert sidecar["RandomSeed"] == 0 and sidecar["Runs"] == [r.name for r in plan.runs]
    assert sidecar["Sources"][0].startswith("bids:fmriprep:sub-01/func/")

    published = [out / p.relative_to(stage) for p in files]
    context = report_context(fitted, published, 0.25, config)
    assert context.surface is None and context.timings["write"] == 0.25
    assert context.dummy_scans == DUMMY and context.runs == ["task-prf_run-1", "task-prf_run-2"]
    assert context.outputs[0].startswith("sub-01/func/")
    assert context.fmriprep_dir == config.inputs.fmriprep_dir
    np.testing.assert_array_equal(context.maps["r2"], fitted.result.r2)
