"""The command line: names, choices, defaults, label prefixes and BIDS-Apps exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from helpers import REPO
from prfmap.cli.parser import build_parser
from prfmap.cli.run import main
from prfmap.io.spaces import parse_space

POSITIONAL = ["bids", "out", "participant"]


def parse(*extra: str):
    return build_parser().parse_args([*POSITIONAL, *extra])


def test_option_names_match_the_issue() -> None:
    parser = build_parser()
    flags = {s for a in parser._actions for s in a.option_strings}
    expected = {
        "--participant-label",
        "--session-label",
        "--task",
        "--run",
        "--space",
        "--derivatives",
        "--bids-filter-file",
        "--model",
        "--refine",
        "--backend",
        "--stimulus",
        "--stimulus-fov-deg",
        "--dummy-scans",
        "--high-pass-hz",
        "--confounds",
        "--work-dir",
        "--mem-gb",
        "--nprocs",
        "--device",
        "--random-seed",
        "--save-predictions",
        "--version",
    }
    assert expected <= flags
    positional = [a.dest for a in parser._actions if not a.option_strings]
    assert positional == ["bids_dir", "output_dir", "analysis_level"]


def test_choices() -> None:
    parser = build_parser()
    choices = {a.dest: a.choices for a in parser._actions if a.choices}
    assert list(choices["analysis_level"]) == ["participant", "group"]
    assert list(choices["model"]) == ["gauss", "css", "dog", "dn", "all", "cf"]
    assert list(choices["refine"]) == ["lm", "sgd", "none"]
    assert list(choices["hrf"]) == ["canonical", "participant", "vertex"]
    assert list(choices["backend"]) == ["jax", "torch", "tensorflow"]


def test_defaults() -> None:
    opts = parse()
    assert opts.bids_dir == Path("bids") and opts.output_dir == Path("out")
    assert opts.analysis_level == "participant"
    assert (opts.model, opts.refine, opts.backend) == (["gauss"], "lm", None)
    assert opts.high_pass_hz == 0.01
    assert opts.dummy_scans is None and opts.confounds is None
    assert opts.participant_label is None and opts.space is None
    assert opts.random_seed == 0 and opts.device == "auto"
    assert not opts.save_predictions and not opts.fit_hrf and opts.hrf == "participant"


def test_label_prefixes_are_stripped() -> None:
    opts = parse(
        "--participant-label",
        "sub-01",
        "02",
        "--session-label",
        "ses-pre",
        "post",
        "--task",
        "task-bars",
        "--run",
        "run-1",
        "2",
    )
    assert opts.participant_label == ["01", "02"]
    assert opts.session_label == ["pre", "post"]
    assert opts.task == ["bars"]
    assert opts.run == [1, 2]
    assert parse("--participant_label", "sub-03").participant_label == ["03"]


def test_derivatives_are_repeatable_name_path_pairs(tmp_path: Path) -> None:
    opts = parse("--derivatives", f"fmriprep={tmp_path}", "--derivatives", str(tmp_path / "smooth"))
    assert opts.derivatives == [("fmriprep", tmp_path), ("smooth", tmp_path / "smooth")]


@pytest.mark.parametrize(
    ("given", "parsed"),
    [
        ("fsaverage5", "fsaverage5"),
        ("fsaverage:den-10k", "fsaverage5"),
        ("fsaverage:den-41k", "fsaverage6"),
        ("fsLR:den-32k", "fsLR:den-32k"),
        ("fsLR", "fsLR"),
        ("T1w", "T1w"),
        ("fsnative", "fsnative"),
        ("MNI152NLin2009cAsym:res-2", "MNI152NLin2009cAsym:res-2"),
    ],
)
def test_spaces(given: str, parsed: str) -> None:
    assert parse("--space", given).space == parsed


def test_space_object() -> None:
    space = parse_space("fsLR:den-32k")
    assert (space.name, space.den, space.res) == ("fsLR", "32k", None)


@pytest.mark.parametrize(
    "argv",
    [
        ["--model", "gaussian"],
        ["--refine", "bfgs"],
        ["--hrf", "spm"],
        ["--backend", "numpy"],
        ["--space", "fsavrage5"],
        ["--space", "MNI152:foo"],
        ["--participant-label", "sub-0_1"],
        ["--dummy-scans", "-1"],
        ["--high-pass-hz", "fast"],
        ["--stimulus-fov-deg", "0"],
        ["--mem-gb", "-2"],
        ["--nprocs", "0"],
        ["--device", "tpu"],
        ["--derivatives", "=x"],
        ["--stimulus", "/nonexistent/aperture.nii.gz"],
        ["--bids-filter-file", "/nonexistent/filter.json"],
        ["--no-such-option"],
    ],
)
def test_usage_errors_exit_64_with_one_line(argv, capsys) -> None:
    assert main([*POSITIONAL, *argv]) == 64
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith("prfmap: error: ")
    assert argv[0] in err[0]


@pytest.mark.parametrize("value", ["1e6", "180.5", "0.05"])
def test_implausible_stimulus_fov_is_a_usage_error(value: str, capsys) -> None:
    """Issue 24, case 5: the full width must lie in 0.1-180 degrees."""
    assert main([*POSITIONAL, "--stimulus-fov-deg", value]) == 64
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "--stimulus-fov-deg" in line and "0.1-180" in line and repr(value) in line


@pytest.mark.parametrize("option", ["--stimulus", "--bids-filter-file"])
def test_a_folder_given_for_a_file_is_called_a_folder(option: str, tmp_path: Path, capsys) -> None:
    """Issue 24, case 19: a folder is not reported as missing."""
    assert main([*POSITIONAL, option, str(tmp_path)]) == 64
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert f"{tmp_path} is a folder, not a file" in line and "does not exist" not in line


def test_unknown_space_message_names_the_space(capsys) -> None:
    assert main([*POSITIONAL, "--space", "fsaverage7"]) == 64
    err = capsys.readouterr().err
    assert "unknown space 'fsaverage7'" in err and "--space" in err


def test_malformed_filter_file_is_a_usage_error(tmp_path: Path, capsys) -> None:
    bad = tmp_path / "filter.json"
    bad.write_text("{not json")
    assert main([*POSITIONAL, "--bids-filter-file", str(bad)]) == 64
    assert "not valid JSON" in capsys.readouterr().err
    good = tmp_path / "good.json"
    good.write_text(json.dumps({"bold": {"acquisition": "mb4"}}))
    assert parse("--bids-filter-file", str(good)).bids_filter_file == good


def test_unknown_analysis_level_exits_17(capsys) -> None:
    assert main(["bids", "out", "subject"]) == 17
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "analysis_level" in err[0] and "'subject'" in err[0]


def test_missing_positional_exits_64(capsys) -> None:
    assert main(["bids"]) == 64
    assert "required" in capsys.readouterr().err


def test_version_and_help(capsys) -> None:
    from prfmap import __version__

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"prfmap {__version__}"
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "bids_dir output_dir {participant,group}" in out.replace("\n", " ").replace("  ", " ")
    for group in ("Options for filtering BIDS queries", "Stimulus", "Model fitting", "Outputs"):
        assert group in out
    # the documentation is named, at the address the package metadata gives
    (docs,) = re.findall(r'^Documentation = "(.+)"$', (REPO / "pyproject.toml").read_text(), re.M)
    assert docs in out.replace("\n", "")


def test_not_bids_exits_16_and_writes_nothing(tmp_path: Path, capsys) -> None:
    (tmp_path / "bids").mkdir()
    out = tmp_path / "out"
    assert main([str(tmp_path / "bids"), str(out), "participant"]) == 16
    assert "dataset_description.json" in capsys.readouterr().err
    assert not out.exists()


def test_output_dir_equal_to_bids_dir_is_a_usage_error(tmp_path: Path, capsys) -> None:
    (tmp_path / "dataset_description.json").write_text('{"Name": "x", "BIDSVersion": "1.9.0"}')
    assert main([str(tmp_path), str(tmp_path), "participant"]) == 64
    assert "is bids_dir" in capsys.readouterr().err


@pytest.mark.slow
def test_known_templates_match_templateflow_api() -> None:
    from templateflow import api

    from prfmap.io.spaces import known_templates

    assert set(api.templates()) <= set(known_templates())


def test_group_level_without_participant_maps_exits_66(tmp_path: Path, capsys) -> None:
    out = tmp_path / "out"
    out.mkdir()
    assert main([str(tmp_path / "bids"), str(out), "group"]) == 66
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prfmap: error: ") and str(out) in err[0]


def _codes(text: str) -> set[int]:
    return {int(c) for c in re.findall(r"\b(\d{1,3})\b", text)}


def test_exit_codes_agree_in_the_docs_the_help_and_the_code(capsys) -> None:
    """Issue 24, case 20 (Must show 5): --help's epilog, the usage page's exit-code table and
    prfmap.errors.ExitCode (plus 130/143 for SIGINT/SIGTERM) list the same codes."""
    from prfmap.errors import ExitCode

    expected = {int(c) for c in ExitCode} | {130, 143}
    epilog = build_parser().epilog
    assert _codes(epilog.split("Exit codes:", 1)[1]) == expected, epilog
    usage = (REPO / "docs" / "usage.md").read_text()
    table = usage.split("| exit code | meaning |", 1)[1].split("\n\n", 1)[0]
    rows = [line.split("|")[1] for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert set().union(*map(_codes, rows)) == expected, rows


def test_help_says_where_the_work_files_go(capsys) -> None:
    """Issue 24, case 20: the work dir's default is output_dir/.prfmap-work/, not "a temporary
    folder, removed at the end"."""
    assert main(["--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "output_dir/.prfmap-work/" in text and "removed at the end" not in text
    for code in ("73", "75", "130", "143"):
        assert f" {code} " in text.split("Exit codes:", 1)[1]
