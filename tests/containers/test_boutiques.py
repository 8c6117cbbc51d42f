"""boutiques.json (Boutiques' BIDS-App template, both levels) and boutiques-group.json (the group
level on a File): valid, in step with prfmap's parser, and their command lines parse."""

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


def bosh(*args: str, cwd: Path | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([BOSH, *args], capture_output=True, text=True, timeout=timeout, cwd=cwd)


GROUP_DESCRIPTOR = REPO / "boutiques-group.json"


@pytest.fixture(scope="module")
def group_descriptor() -> dict:
    return json.loads(GROUP_DESCRIPTOR.read_text())


def test_bosh_validate():
    result = bosh("validate", str(REPO / "boutiques.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    result = bosh("validate", str(GROUP_DESCRIPTOR))
    assert result.returncode == 0, result.stdout + result.stderr


def test_bosh_validate_as_a_bids_app():
    """CBRAIN treats descriptors that pass ``bosh validate --bids`` as BIDS Apps."""
    result = bosh("validate", "--bids", str(REPO / "boutiques.json"))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "BIDS validation OK" in result.stdout + result.stderr


def test_bosh_validate_fails_on_a_broken_descriptor(tmp_path, descriptor):
    broken = dict(descriptor, **{"command-line": "prfmap [BIDS_DIR] [ANALYSIS_LEVEL]"})
    path = tmp_path / "broken.json"
    path.write_text(json.dumps(broken))
    assert bosh("validate", str(path)).returncode != 0


def test_version_and_images(descriptor, version):
    assert descriptor["schema-version"] == "0.5"
    assert descriptor["tool-version"] == version
    image = descriptor["container-image"]
    assert image["type"] == "docker"
    assert image["image"] == f"prfmap/prfmap:{version}-jax"
    assert image["entrypoint"] is True
    # GPUs are the launcher's choice (bosh exec launch --container-opts=--gpus=all): options that
    # ask for a GPU in the descriptor fail on every host without the NVIDIA runtime.
    assert not any("gpu" in opt or opt == "--nv" for opt in image.get("container-opts", []))
    assert "--container-opts=--gpus=all" in descriptor["description"]


def test_positionals_and_value_keys(descriptor):
    keys = [i["value-key"] for i in descriptor["inputs"]]
    shared = sorted({k for k in keys if keys.count(k) > 1})
    assert shared == ["[OUTPUT_DIR]"], "only the BIDS-App template's output folder may share a value key"
    sharing = [i for i in descriptor["inputs"] if i["value-key"] == "[OUTPUT_DIR]"]
    # bosh substitutes the first input of a shared key and drops the other: the one that reaches
    # prfmap, the output folder by name, comes first
    assert [(i["id"], i["type"]) for i in sharing] == [
        ("output_dir", "String"),
        ("participant_outputs_dir", "File"),
    ]
    by_key = {i["value-key"]: i for i in descriptor["inputs"]}
    assert [a.dest for a in positionals()] == ["bids_dir", "output_dir", "analysis_level"]
    assert by_key["[BIDS_DIR]"]["type"] == "File" and by_key["[BIDS_DIR]"]["optional"] is False
    level = positionals()[2]
    assert by_key["[ANALYSIS_LEVEL]"]["value-choices"] == list(level.choices)
    assert descriptor["command-line"].startswith(
        "mkdir -p [OUTPUT_DIR]; prfmap [BIDS_DIR] [OUTPUT_DIR] [ANALYSIS_LEVEL] "
        "[PARTICIPANT_LABEL] [SESSION_LABEL] "
    )
    assert [o["path-template"] for o in descriptor["output-files"]] == ["[OUTPUT_DIR]"]


def test_a_second_input_of_the_shared_key_is_dropped_by_bosh(tmp_path, descriptor):
    """Why boutiques.json disables the template's File input: bosh drops it from the command. If a
    bosh release substitutes it, this fails, and the File input can serve the group level again."""
    (tmp_path / "out").mkdir()
    invocation = {
        "bids_dir": str(tmp_path),
        "participant_outputs_dir": str(tmp_path / "out"),
        "analysis_level": "group",
    }
    path = tmp_path / "invocation.json"
    path.write_text(json.dumps(invocation))
    result = bosh("exec", "simulate", str(REPO / "boutiques.json"), "-i", str(path))
    assert f"mkdir -p; prfmap {tmp_path} group" in result.stdout
    level = inputs_by_id(descriptor)["analysis_level"]
    assert all("participant_outputs_dir" in level["value-disables"][v] for v in level["value-choices"])


def test_levels_require_their_output_folder(descriptor):
    level = inputs_by_id(descriptor)["analysis_level"]
    assert level["value-requires"] == {"participant": ["output_dir"], "group": ["output_dir"]}
    assert level["value-disables"]["participant"] == ["participant_outputs_dir"]
    group = group_inputs(descriptor)
    assert {"participant_label", "r2_threshold", "no_report", "verbose_count", "output_dir"} <= group
    assert not {"model", "space", "high_pass_hz", "work_dir", "participant_outputs_dir"} & group


def test_group_descriptor_is_the_group_level_of_boutiques_json(descriptor, group_descriptor):
    """boutiques-group.json: the group inputs of boutiques.json, with the output folder as a File."""
    ids = {i["id"] for i in group_descriptor["inputs"]}
    assert ids == group_inputs(descriptor) - {"output_dir", "analysis_level"} | {"participant_outputs_dir"}
    by_id = inputs_by_id(group_descriptor)
    folder = by_id["participant_outputs_dir"]
    assert (folder["type"], folder["value-key"], folder["optional"]) == (
        "File",
        "[PARTICIPANT_OUTPUTS_DIR]",
        False,
    )
    shared = {k: v for k, v in inputs_by_id(descriptor).items() if k in ids - {"participant_outputs_dir"}}
    assert {k: by_id[k] for k in shared} == shared, "an input drifted from boutiques.json's"
    assert group_descriptor["command-line"].startswith("prfmap [BIDS_DIR] [PARTICIPANT_OUTPUTS_DIR] group ")
    assert group_descriptor["tool-version"] == descriptor["tool-version"]
    assert group_descriptor["container-image"] == descriptor["container-image"]
    for item in group_descriptor["inputs"]:
        assert item["value-key"] in group_descriptor["command-line"]
    assert bosh("validate", "--bids", str(GROUP_DESCRIPTOR)).returncode != 0  # not a BIDS-App template


def test_no_default_values(descriptor):
    """bosh adds every default-value to every invocation, so a default would reach the group
    command; prfmap's parser holds the defaults and the descriptions say them."""
    assert [i["id"] for i in descriptor["inputs"] if "default-value" in i] == []


def test_every_option_is_described_and_nothing_else(descriptor):
    positional = ("[BIDS_DIR]", "[OUTPUT_DIR]", "[ANALYSIS_LEVEL]")
    described = {i["id"] for i in descriptor["inputs"] if i["value-key"] not in positional}
    parsed = {a.dest for a in options()}
    assert described == parsed, (
        f"missing from boutiques.json: {sorted(parsed - described)}; "
        f"no longer in the parser: {sorted(described - parsed)}"
    )
    command_line = descriptor["command-line"]
    for item in descriptor["inputs"]:
        assert item["value-key"] in command_line


def test_verbosity_is_countable(descriptor):
    item = inputs_by_id(descriptor)["verbose_count"]
    assert "command-line-flag" not in item and item["type"] == "String"
    parser = parser_module.build_parser()
    counts = [
        parser.parse_args(["b", "o", "participant", flag]).verbose_count for flag in item["value-choices"]
    ]
    assert counts == [1, 2, 3]


@pytest.mark.parametrize("action", options(), ids=lambda a: a.dest)
def test_option_in_step_with_parser(descriptor, probe_file, action):
    item = inputs_by_id(descriptor)[action.dest]
    if isinstance(action, argparse._CountAction):
        assert set(item["value-choices"]) == {"-v", "-vv", "-vvv"}
        assert {"-v", "--verbose"} <= set(action.option_strings)
        return
    assert item["command-line-flag"] in action.option_strings
    assert item["optional"] is True
    kind, integer = boutiques_type(action, probe_file)
    assert item["type"] == kind
    assert bool(item.get("integer", False)) == integer
    assert bool(item.get("list", False)) == (action.nargs in ("+", "*"))
    if action.nargs == "+":
        assert item.get("min-list-entries") == 1
    assert item.get("value-choices") == (list(action.choices) if action.choices else None)
    if not isinstance(action, FLAG_ACTIONS) and action.default is not None:
        default = action.default
        if isinstance(default, (list, tuple)):
            default = " ".join(str(value) for value in default)
        assert f"(default: {default})" in item["description"]
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


def group_inputs(descriptor) -> set[str]:
    """The inputs a group invocation may set: all but those ``analysis_level: group`` disables."""
    disabled = set(inputs_by_id(descriptor)["analysis_level"]["value-disables"]["group"])
    return {i["id"] for i in descriptor["inputs"]} - disabled


def simulate(
    invocation: dict | Path, tmp_path: Path, descriptor: Path = REPO / "boutiques.json"
) -> list[str]:
    """The words of the prfmap command ``bosh exec simulate`` prints for ``invocation``; a
    ``mkdir -p`` before it (the BIDS-App template) must create prfmap's output folder."""
    if isinstance(invocation, dict):
        path = tmp_path / f"invocation-{invocation.get('analysis_level', 'group')}.json"
        path.write_text(json.dumps(invocation))
    else:
        path = invocation
    result = bosh("exec", "simulate", str(descriptor), "-i", str(path))
    assert result.returncode == 0, result.stdout + result.stderr
    lines = [x for x in result.stdout.splitlines() if x.startswith(("prfmap ", "mkdir -p "))]
    assert len(lines) == 1, result.stdout
    made, _, command = lines[0].rpartition("; ")
    words = shlex.split(command)
    if made:
        assert shlex.split(made) == ["mkdir", "-p", words[2]], lines[0]
    return words


def parse(words: list[str]) -> argparse.Namespace:
    """prfmap's own parser on a simulated command (a usage error exits, failing the test)."""
    assert words[0] == "prfmap"
    return parser_module.build_parser().parse_args(words[1:])


def assert_parsed_as(ns: argparse.Namespace, expected: dict) -> None:
    for key, value in expected.items():
        got = getattr(ns, key)
        if isinstance(value, float):
            assert math.isclose(got, value), key
        else:
            assert got == value, key


def _participant_invocation(tmp_path: Path) -> dict:
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
        "bids_database_dir": str(tmp_path / "bids_index"),
        "skip_bids_validation": True,
        "fs_license_file": str(tmp_path / "license.txt"),
        "stimulus": str(tmp_path / "aperture.npy"),
        "stimulus_fov_deg": 20.5,
        "dummy_scans": 4,
        "high_pass_hz": 0.02,
        "bold_scale": "percent",
        "smooth_fwhm": 4.0,
        "confounds": ["trans_x", "rot_z"],
        "model": ["css", "dog"],
        "refine": "sgd",
        "refine_r2_min": 0.2,
        "hrf": "participant",
        "noise_model": "ar2",
        "covariance": "sandwich",
        "sigma_prior": "none",
        "delay_prior": "none",
        "fit_hrf": True,
        "slice_time_ref": 0.25,
        "random_seed": 7,
        "backend": "torch",
        "device": "gpu:1",
        "nprocs": 2,
        "omp_nthreads": 1,
        "mem_gb": 3.5,
        "mem_mb": 2048,
        "work_dir": str(tmp_path / "work"),
        "save_predictions": True,
        "r2_threshold": 0.25,
        "threshold_on": "cvr2",
        "atlas": "wang15",
        "roi": ["V1", "V2"],
        "cf_source": ["V1"],
        "no_cvr2": True,
        "no_report": True,
        "reports_only": False,
        "verbose_count": "-vv",
    }


def test_simulated_participant_command_parses(tmp_path, descriptor):
    invocation = _participant_invocation(tmp_path)
    described = {i["id"] for i in descriptor["inputs"]} - {"participant_outputs_dir"}
    assert set(invocation) == described, "the example should set every participant input"
    ns = parse(simulate(invocation, tmp_path))
    expected = dict(invocation)
    paths = ("bids_dir", "output_dir", "bids_filter_file", "bids_database_dir", "stimulus", "work_dir")
    for key in (*paths, "fs_license_file"):
        expected[key] = Path(invocation[key])
    expected["derivatives"] = [("fmriprep", tmp_path / "fmriprep")]
    expected["verbose_count"] = 2
    assert_parsed_as(ns, expected)


@pytest.mark.parametrize("folder", ["output_dir", "participant_outputs_dir"])
def test_simulated_group_command_is_the_group_options_only(tmp_path, folder):
    """A minimal group invocation of either descriptor: the output folder is there, no participant
    default leaks in."""
    (tmp_path / "bids").mkdir()
    (tmp_path / "out").mkdir()
    invocation = {"bids_dir": str(tmp_path / "bids"), folder: str(tmp_path / "out"), "verbose_count": "-vv"}
    if folder == "output_dir":
        words = simulate(invocation | {"analysis_level": "group"}, tmp_path)
    else:
        words = simulate(invocation, tmp_path, GROUP_DESCRIPTOR)
    assert words == ["prfmap", str(tmp_path / "bids"), str(tmp_path / "out"), "group", "-vv"]
    ns = parse(words)
    assert ns.output_dir == tmp_path / "out" and ns.verbose_count == 2
    defaults = vars(parse(["prfmap", "b", "o", "group"]))
    assert {k: v for k, v in vars(ns).items() if k not in ("bids_dir", "output_dir", "verbose_count")} == {
        k: v for k, v in defaults.items() if k not in ("bids_dir", "output_dir", "verbose_count")
    }


@pytest.mark.parametrize("folder", ["output_dir", "participant_outputs_dir"])
def test_simulated_group_command_with_every_group_input(tmp_path, descriptor, group_descriptor, folder):
    (tmp_path / "bids").mkdir()
    (tmp_path / "out").mkdir()
    invocation = {
        "bids_dir": str(tmp_path / "bids"),
        folder: str(tmp_path / "out"),
        "participant_label": ["01", "sub-02"],
        "r2_threshold": 0.3,
        "threshold_on": "cvr2",
        "no_report": True,
        "verbose_count": "-vvv",
    }
    if folder == "output_dir":
        invocation["analysis_level"] = "group"
        assert set(invocation) == group_inputs(descriptor), "the example should set every group input"
        words = simulate(invocation, tmp_path)
    else:
        assert set(invocation) == {i["id"] for i in group_descriptor["inputs"]}
        words = simulate(invocation, tmp_path, GROUP_DESCRIPTOR)
    assert_parsed_as(
        parse(words),
        {
            "bids_dir": tmp_path / "bids",
            "output_dir": tmp_path / "out",
            "analysis_level": "group",
            "participant_label": ["01", "02"],
            "r2_threshold": 0.3,
            "threshold_on": "cvr2",
            "no_report": True,
            "verbose_count": 3,
        },
    )


@pytest.mark.parametrize(
    ("name", "descriptor_path"),
    [
        ("boutiques-invocation.json", REPO / "boutiques.json"),
        ("boutiques-invocation-group.json", REPO / "boutiques.json"),
        ("boutiques-group-invocation.json", GROUP_DESCRIPTOR),
    ],
)
def test_shipped_example_invocations_parse(name, descriptor_path, tmp_path):
    example = REPO / "docker" / name
    invocation = json.loads(example.read_text())
    ns = parse(simulate(example, tmp_path, descriptor_path))
    assert ns.analysis_level == invocation.get("analysis_level", "group")
    assert ns.bids_dir == Path(invocation["bids_dir"])
    assert ns.output_dir == Path(invocation.get("output_dir") or invocation["participant_outputs_dir"])
    assert ns.participant_label == invocation.get("participant_label")
