"""Options fMRIPrep-style wrappers pass by habit: accepted, each with a log line, and the input
dataset validated as BIDS Apps do unless --skip-bids-validation."""

from __future__ import annotations

import json

import pytest

from helpers import only_logs, run_prfmap, synthesise
from prfmap.cli.parser import build_parser


@pytest.fixture(scope="module")
def bids(tmp_path_factory):
    return synthesise(tmp_path_factory.mktemp("flags") / "bids", subjects=1, runs=1, space="T1w", small=True)


@pytest.mark.parametrize("flag", ["--skip-bids-validation", "--skip_bids_validation"])
def test_both_spellings_of_skip_bids_validation(flag):
    assert build_parser().parse_args(["b", "o", "participant", flag]).skip_bids_validation


def test_habit_flags_are_accepted_and_logged(bids, tmp_path):
    """Participant 99 does not exist: prfmap stops at the query (18), after the checks and logs."""
    out = tmp_path / "out"
    done = run_prfmap(
        bids,
        out,
        "participant",
        "--participant-label",
        "99",
        "--fs-license-file",
        tmp_path / "no-license.txt",
        "--omp-nthreads",
        "1",
        "--n_cpus",
        "2",
        "--mem-mb",
        "3072",
        "--bids-database-dir",
        tmp_path / "bids_index",
    )
    assert done.returncode == 18, done.stderr
    assert "--fs-license-file" in done.stdout and "not used" in done.stdout
    assert "--omp-nthreads 1: OpenMP/BLAS pools limited to 1 thread(s) each" in done.stdout
    assert "bids_dir passes the BIDS validator" in done.stdout
    (config,) = (out / "logs").glob("*_config.json")
    execution = json.loads(config.read_text())["execution"]
    assert execution["omp_nthreads"] == 1 and execution["fs_license_file"].endswith("no-license.txt")
    assert execution["nprocs"] == 2 and execution["mem_gb"] == 3.0
    assert execution["bids_database_dir"] == str(tmp_path / "bids_index")
    # the pybids index is kept there, for the next call over the same dataset
    assert any(p.name.startswith("index-") for p in (tmp_path / "bids_index").iterdir())


@pytest.mark.parametrize("flag", ["--nprocs", "--nthreads", "--n_cpus", "--n-cpus"])
def test_fmriprep_spellings_of_nprocs(flag):
    assert build_parser().parse_args(["b", "o", "participant", flag, "3"]).nprocs == 3


@pytest.mark.parametrize("flag", ["--mem", "--mem_mb", "--mem-mb"])
def test_fmriprep_spellings_of_memory_in_mb(flag):
    assert build_parser().parse_args(["b", "o", "participant", flag, "2048"]).mem_mb == 2048


def test_memory_in_gb_and_mb_at_once_is_a_usage_error(bids, tmp_path):
    done = run_prfmap(bids, tmp_path / "out", "participant", "--mem-gb", "2", "--mem-mb", "2048")
    assert done.returncode == 64
    assert done.stderr.strip() == "prfmap: error: give --mem-gb 2 or --mem-mb 2048, not both"


@pytest.mark.parametrize("where", ["before", "after"])
def test_an_unknown_option_is_named_wherever_it_stands(where, capsys):
    from prfmap.cli.run import main

    options = ["--cpus", "4"]
    positionals = ["/nonexistent/bids", "/nonexistent/out", "participant"]
    assert main(options + positionals if where == "before" else positionals + options) == 64
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("prfmap: error: unrecognized arguments: --cpus"), line


def test_an_invalid_dataset_exits_16_unless_validation_is_skipped(bids, tmp_path):
    stray = bids / "sub-01" / "func" / "sub-01_task-other_bold.json"
    stray.write_text(json.dumps({"RepetitionTime": 1.5, "TaskName": "other"}))
    try:
        out = tmp_path / "out"
        done = run_prfmap(bids, out, "participant", "--participant-label", "99")
        assert done.returncode == 16
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith("prfmap: error: ") and "SIDECAR_WITHOUT_DATAFILE" in line
        assert "--skip-bids-validation" in line and only_logs(out)
        done = run_prfmap(bids, out, "participant", "--participant-label", "99", "--skip-bids-validation")
        assert done.returncode == 18, done.stderr
        assert "--skip-bids-validation: bids_dir is not validated" in done.stdout
    finally:
        stray.unlink()


def test_omp_threads_above_nprocs_is_a_usage_error(bids, tmp_path):
    done = run_prfmap(bids, tmp_path / "out", "participant", "--omp-nthreads", "4", "--nprocs", "2")
    assert done.returncode == 64
    assert done.stderr.startswith("prfmap: error: --omp-nthreads 4 exceeds --nprocs 2")
