"""Slice-time references from BIDS metadata (prfmap.io.timing) and from the datasets the query reads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from prfmap.errors import BadDataError
from prfmap.io.bids import find_inputs
from prfmap.io.timing import RULES, parse_slice_time_ref, slice_time_reference
from prfmap.synth import SynthConfig, make_synthetic_dataset

TR = 2.0
SLICES = [0.0, 1.0, 0.25, 1.25, 0.5, 1.5, 0.75, 1.75]  # interleaved, mean 0.875 s


@pytest.mark.parametrize(
    ("metadata", "fraction", "rule"),
    [
        ({"SliceTimingCorrected": True, "StartTime": 0.9}, 0.45, "start_time"),
        ({"StartTime": 0.0, "SliceTiming": SLICES}, 0.0, "start_time"),  # StartTime wins
        ({"SliceTimingCorrected": True, "SliceTiming": SLICES}, (0 + 1.75) / 2 / TR, "corrected_middle"),
        ({"SliceTimingCorrected": True}, 0.5, "corrected_middle"),
        ({"SliceTimingCorrected": False, "SliceTiming": SLICES}, 0.875 / TR, "slice_timing_mean"),
        ({"SliceTiming": SLICES}, 0.875 / TR, "slice_timing_mean"),
        ({"SliceTimingCorrected": False}, 0.0, "no_information"),
        ({}, 0.0, "no_information"),
    ],
)
def test_each_case_has_its_rule(metadata, fraction, rule):
    ref = slice_time_reference(metadata, TR)
    assert ref.rule == rule and ref.fraction == pytest.approx(fraction)
    described = ref.describe(TR)
    assert described == {
        "Fraction": pytest.approx(fraction),
        "Seconds": pytest.approx(fraction * TR),
        "Rule": RULES[rule],
    }


@pytest.mark.parametrize(
    ("metadata", "match"),
    [
        ({"StartTime": 2.5}, "StartTime 2.5 s of run-1 lies outside its TR"),
        ({"StartTime": "soon"}, "StartTime of run-1 is not a number"),
        ({"SliceTiming": [0.0, 2.0]}, "SliceTiming of run-1 spans 0-2 s, outside its TR"),
        ({"SliceTiming": [0.0, float("nan")]}, "not a finite number"),
        ({"SliceTiming": 0.5}, "must be a list of seconds"),
    ],
)
def test_impossible_metadata_is_refused(metadata, match):
    with pytest.raises(BadDataError, match=match):
        slice_time_reference(metadata, TR, "run-1")


def test_option_values_are_fractions_of_the_tr_or_names():
    assert parse_slice_time_ref("start") == 0.0 and parse_slice_time_ref("MIDDLE") == 0.5
    assert parse_slice_time_ref("0.25") == 0.25 and parse_slice_time_ref("1") == 1.0
    for bad in ("-0.1", "1.5", "end", "nan"):
        with pytest.raises(ValueError, match="fraction of the TR|must lie in"):
            parse_slice_time_ref(bad)


def _dataset(root: Path, mode: str) -> Path:
    return make_synthetic_dataset(root, SynthConfig(space="T1w", small=True, runs=1, slice_timing=mode))


@pytest.mark.parametrize(
    ("mode", "rule"),
    [
        ("uncorrected", "slice_timing_mean"),
        ("corrected", "start_time"),
        ("start", "no_information"),
        ("middle", "start_time"),
    ],
)
def test_the_query_reads_each_runs_reference(tmp_path, mode, rule):
    root = _dataset(tmp_path / "bids", mode)
    (run,) = find_inputs(root)
    raw = json.loads((root / "sub-01/func/sub-01_task-prf_run-1_bold.json").read_text())
    prep = json.loads(
        next((root / "derivatives/fmriprep/sub-01/func").glob("*_desc-preproc_bold.json")).read_text()
    )
    expected = {
        "uncorrected": np.mean(raw.get("SliceTiming", [0])) / run.tr,
        "corrected": prep.get("StartTime", 0) / run.tr,
        "start": 0.0,
        "middle": 0.5,
    }[mode]
    assert run.slice_time.rule == rule
    assert run.slice_time.fraction == pytest.approx(expected)


def test_derivative_sidecar_first_raw_sidecars_by_inheritance(tmp_path):
    root = _dataset(tmp_path / "bids", "start")
    # SliceTiming given once for the task at the top of the raw dataset (BIDS inheritance)
    (root / "task-prf_bold.json").write_text(json.dumps({"SliceTiming": SLICES[:4]}))
    (run,) = find_inputs(root, work_dir=tmp_path / "w1")
    assert run.slice_time.rule == "slice_timing_mean"
    assert run.slice_time.fraction == pytest.approx(np.mean(SLICES[:4]) / run.tr)
    # the run's own raw sidecar overrides the task-level one
    sidecar = root / "sub-01/func/sub-01_task-prf_run-1_bold.json"
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "SliceTiming": [0.0, 0.3]}))
    (run,) = find_inputs(root, work_dir=tmp_path / "w2")
    assert run.slice_time.fraction == pytest.approx(0.15 / run.tr)
    # fMRIPrep's sidecar (StartTime of corrected data) comes before the raw sidecars
    prep = next((root / "derivatives/fmriprep/sub-01/func").glob("*_desc-preproc_bold.json"))
    prep.write_text(
        json.dumps({**json.loads(prep.read_text()), "SliceTimingCorrected": True, "StartTime": 0.6})
    )
    (run,) = find_inputs(root, work_dir=tmp_path / "w3")
    assert run.slice_time.rule == "start_time" and run.slice_time.fraction == pytest.approx(0.4)
