"""boutiques.json: BIDS-valid, in step with prfmap's parser, and its command lines parse."""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from helpers import REPO

parser_module = pytest.importorskip("prfmap.cli.parser")
BOSH = str(Path(sys.executable).parent / "bosh")
SKIPPED = {"help", "version"}
FLAG_ACTIONS = (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._CountAction)


def options():
    parser = parser_module.build_parser()
    return [a for a in parser._actions if a.option_strings and a.dest not in SKIPPED]


def positionals():
    return [a for a in parser_module.build_parser()._actions if not a.option_strings]


def accepts(kind, text: str) -> bool:
    try:
        kind(text)
    except (argparse.ArgumentTypeError, ValueError, TypeError):
        return False
    return True


def boutiques_type(action: argparse.Action, probe_file: Path) -> tuple[str, bool]:
    """(Boutiques type, integer) that the argparse action calls for, found by probing."""
    if isinstance(action, FLAG_ACTIONS):
        return "Flag", False
    if action.choices:
        return "String", False
    kind = action.type or str
    if accepts(kind, str(probe_file)):
        value = kind(str(probe_file))
        if isinstance(value, Path):
            return "File", False
        if isinstance(value, tuple) and any(isinstance(v, Path) for v in value):
            return "String", False
    for text in ("3", "0.5"):
        if accepts(kind, text):
            value = kind(text)
            if isinstance(value, bool) or not isinstance(value, int | float):
                return "String", False
            return "Number", isinstance(value, int)
    return "String", False


@pytest.fixture(scope="module")
def probe_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("probe") / "filter.json"
    path.write_text("{}")
    return path


def inputs_by_id(descriptor) -> dict[str, dict]:
    return {i["id"]: i for i in descriptor["inputs"]}


def test_bosh_validate_bids():
    result = subprocess.run([BOSH, "validate", "--bids", str(REPO / "boutiques.json")],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BIDS validation OK" in result.stdout + result.stderr


def test_bosh_validate_fails_on_a_broken_descriptor(tmp_path, descriptor):
    broken = dict(descriptor, **{"command-line": "prfmap [BIDS_DIR] [OUTPUT_DIR]"})
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    result = subprocess.run([BOSH, "validate", "--bids", str(path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode != 0


def test_version_and_images(descriptor, version):
    assert descriptor["schema-version"] == "0.5"
    assert descriptor["tool-version"] == version
    image = descriptor["container-image"]
    assert image["type"] == "docker"
    assert image["image"] == f"prfmap/prfmap:{version}-jax"
    assert "--gpus=all" in image["container-opts"]
    assert image["entrypoint"] is True


def test_positionals_match(descriptor):
    by_key: dict[str, list[dict]] = {}
    for item in descriptor["inputs"]:
        by_key.setdefault(item["value-key"], []).append(item)
    names = [a.dest for a in positionals()]
    assert names == ["bids_dir", "output_dir", "analysis_level"]
    assert [i["type"] for i in by_key["[BIDS_DIR]"]] == ["File"]
    assert by_key["[BIDS_DIR]"][0]["optional"] is False
    assert sorted(i["type"] for i in by_key["[OUTPUT_DIR]"]) == ["File", "String"]
    level = positionals()[2]
    assert by_key["[ANALYSIS_LEVEL]"][0]["value-choices"] == list(level.choices)
    assert descriptor["command-line"].startswith(
        "mkdir -p [OUTPUT_DIR]; prfmap [BIDS_DIR] [OUTPUT_DIR] [ANALYSIS_LEVEL] ")


def test_every_option_is_described_and_nothing_else(descriptor):
    described = {i["id"] for i in descriptor["inputs"]
                 if i["value-key"] not in ("[BIDS_DIR]", "[OUTPUT_DIR]", "[ANALYSIS_LEVEL]")}
    parsed = {a.dest for a in options()}
    assert described == parsed, (
        f"missing from boutiques.json: {sorted(parsed - described)}; "
        f"no longer in the parser: {sorted(described - parsed)}"
    )
    command_line = descriptor["command-line"]
    for item in descriptor["inputs"]:
        assert item["value-key"] in command_line


@pytest.mark.parametrize("action", options(), ids=lambda a: a.dest)
def test_option_in_step_with_parser(descriptor, probe_file, action):
    item = inputs_by_id(descriptor)[action.dest]
    assert item["command-line-flag"] in action.option_strings
    assert item["optional"] is True
    kind, integer = boutiques_type(action, probe_file)
    assert item["type"] == kind
    assert bool(item.get("integer", False)) == integer
    assert bool(item.get("list", False)) == (action.nargs in ("+", "*"))
    if action.nargs == "+":
        assert item.get("min-list-entries") == 1
    assert item.get("value-choices") == (list(action.choices) if action.choices else None)
    if isinstance(action, FLAG_ACTIONS) or action.default is None:
        assert "default-value" not in item
    else:
        assert item.get("default-value") == action.default
    if kind == "Number":
        _check_bounds(item, action.type, integer)


def _text(value: float, integer: bool) -> str:
    return str(int(value)) if integer else repr(float(value))


def _check_bounds(item: dict, kind, integer: bool) -> None:
    step = 1 if integer else 0.25
    low, high = item.get("minimum"), item.get("maximum")
    exclusive = item.get("exclusive-minimum", False)
    if low is None:
        assert accepts(kind, _text(-1, integer)), "the parser rejects -1: set a minimum"
    else:
        assert accepts(kind, _text(low, integer)) != exclusive, f"minimum {low}"
        assert not accepts(kind, _text(low - step, integer)), f"below minimum {low}"
        assert accepts(kind, _text(low + step, integer))
    if high is None:
        assert accepts(kind, _text(1e6, integer)), "the parser rejects 1e6: set a maximum"
    else:
        assert accepts(kind, _text(high, integer)) != item.get("exclusive-maximum", False)
        assert not accepts(kind, _text(high + step, integer)), f"above maximum {high}"


def _example_invocation(tmp_path: Path) -> dict:
    bids = tmp_path / "bids"
    fmriprep = tmp_path / "fmriprep"
    for folder in (bids, fmriprep, tmp_path / "work"):
        folder.mkdir()
    (tmp_path / "filter.json").write_text(json.dumps({"bold": {"acquisition": "mb4"}}))
    np.save(tmp_path / "aperture.npy", np.zeros((3, 4, 4), np.float32))
    return {
        "bids_dir": str(bids),
        "output_dir": str(tmp_path / "out"),
        "analysis_level": "participant",
        "participant_label": ["01", "02"],
        "session_label": ["pre"],
        "task": ["prf", "bar"],
        "run": [1, 2],
        "space": "fsLR:den-32k",
        "derivatives": [f"fmriprep={fmriprep}"],
        "bids_filter_file": str(tmp_path / "filter.json"),
        "stimulus": str(tmp_path / "aperture.npy"),
        "stimulus_fov_deg": 20.5,
        "dummy_scans": 4,
        "high_pass_hz": 0.02,
        "confounds": ["trans_x", "rot_z"],
        "model": "css",
        "refine": "sgd",
        "refine_r2_min": 0.2,
        "fit_hrf": True,
        "random_seed": 7,
        "backend": "torch",
        "device": "gpu:1",
        "nprocs": 2,
        "mem_gb": 3.5,
        "work_dir": str(tmp_path / "work"),
        "save_predictions": True,
        "r2_threshold": 0.25,
        "no_report": True,
        "verbose_count": True,
    }


def test_simulated_command_line_parses_with_prfmaps_parser(tmp_path, descriptor):
    invocation = _example_invocation(tmp_path)
    described = {i["id"] for i in descriptor["inputs"]} - {"participant_outputs_dir"}
    assert set(invocation) == described, "the example should set every input"
    path = tmp_path / "invocation.json"
    path.write_text(json.dumps(invocation))
    result = subprocess.run(
        [BOSH, "exec", "simulate", str(REPO / "boutiques.json"), "-i", str(path)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("mkdir -p "))
    mkdir, _, command = line.partition("; ")
    assert shlex.split(mkdir) == ["mkdir", "-p", invocation["output_dir"]]
    words = shlex.split(command)
    assert words[0] == "prfmap"
    ns = parser_module.build_parser().parse_args(words[1:])

    expected = dict(invocation)
    for key in ("bids_dir", "output_dir", "bids_filter_file", "stimulus", "work_dir"):
        expected[key] = Path(invocation[key])
    expected["derivatives"] = [("fmriprep", tmp_path / "fmriprep")]
    expected["verbose_count"] = 1
    for key, value in expected.items():
        got = getattr(ns, key)
        if isinstance(value, float):
            assert math.isclose(got, value), key
        else:
            assert got == value, key


def test_shipped_example_invocation_parses():
    example = REPO / "docker" / "boutiques-invocation.json"
    result = subprocess.run(
        [BOSH, "exec", "simulate", str(REPO / "boutiques.json"), "-i", str(example)],
        capture_output=True, text=True, timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    line = next(x for x in result.stdout.splitlines() if x.startswith("mkdir -p "))
    words = shlex.split(line.partition("; ")[2])
    ns = parser_module.build_parser().parse_args(words[1:])
    invocation = json.loads(example.read_text())
    assert ns.participant_label == invocation["participant_label"]
    assert ns.space == invocation["space"] and ns.device == "gpu"
    assert ns.work_dir == Path(invocation["work_dir"])
