"""The brainlife.io App (docker/brainlife/): ``main`` on a config.json runs prfmap end to end on a
synthetic dataset and leaves brainlife's output folders; config errors are one line, exit 64."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from nibabel.freesurfer.io import read_morph_data

from helpers import REPO, project_version
from prfmap.cli.parser import build_parser

APP = REPO / "docker" / "brainlife"
BIN = Path(sys.executable).parent
SPEC = importlib.util.spec_from_file_location("prfmap_brainlife", APP / "prfmap_brainlife.py")
brainlife = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(brainlife)


def run_main(task_dir: Path, config: dict) -> subprocess.CompletedProcess:
    """brainlife's way: ``main`` in the task folder next to config.json, with the local prfmap."""
    task_dir.mkdir(parents=True, exist_ok=True)
    (task_dir / "config.json").write_text(json.dumps(config))
    env = dict(
        os.environ,
        PRFMAP_PYTHON=sys.executable,
        KERAS_BACKEND="jax",
        PYTHONPATH=os.pathsep.join([str(REPO / "app"), os.environ.get("PYTHONPATH", "")]),
    )
    return subprocess.run(
        ["bash", str(APP / "main")], cwd=task_dir, env=env, capture_output=True, text=True, timeout=1200
    )


def synth(root: Path, space: str) -> Path:
    subprocess.run(
        [str(BIN / "prfmap-synth"), str(root), "--subjects", "1", "--runs", "1", "--space", space, "--small"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return root


def brainlife_config(bids: str, **settings) -> dict:
    """A config.json as brainlife writes it: settings, input paths, and the inputs' metadata."""
    return {
        "bids": bids,
        "_app": "prfmap",
        "_tid": 2,
        "_outputs": [],
        "_inputs": [{"id": "bids", "datatype": "neuro/bids", "meta": {"subject": "01"}}],
        **settings,
    }


def prfmap_map(output_dir: Path, param: str, hemi: str | None) -> np.ndarray:
    """The values of one prfmap map, found by its sidecar's Parameter (and hemisphere)."""
    for sidecar in sorted(output_dir.glob("sub-01/func/*_boldmap.json")):
        if json.loads(sidecar.read_text()).get("Parameter") != param:
            continue
        if hemi and f"_hemi-{hemi}_" not in sidecar.name:
            continue
        data = next(p for p in sidecar.parent.glob(sidecar.name[:-5] + ".*") if p.suffix != ".json")
        img = nib.load(data)
        return img.darrays[0].data if hemi else np.asarray(img.get_fdata())
    raise AssertionError(f"no {param} map")


def test_main_surface_end_to_end(tmp_path):
    synth(tmp_path / "bids", "fsaverage5")
    task = tmp_path / "task"
    result = run_main(
        task,
        brainlife_config(
            "../bids", space="fsaverage5", refine="none", confounds="", fit_hrf=False, dummy_scans=""
        ),
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    out = task / "prfmap"
    assert (out / "dataset_description.json").is_file()
    assert sorted((out / "sub-01" / "func").glob("*_boldmap.func.gii"))
    for hemi, prefix in (("L", "lh"), ("R", "rh")):
        angle = read_morph_data(str(task / "prf" / "prf_surfaces" / f"{prefix}.polarAngle"))
        assert angle.shape == (10242,)
        expected = brainlife.neuropythy_polar_angle(prfmap_map(out, "polarangle", hemi))
        np.testing.assert_array_equal(angle, expected)
        for name, param in (("eccentricity", "eccentricity"), ("rfWidth", "sigma"), ("r2", "r2")):
            values = read_morph_data(str(task / "prf" / "prf_surfaces" / f"{prefix}.{name}"))
            np.testing.assert_array_equal(values, prfmap_map(out, param, hemi))
    assert (task / "html" / "sub-01.html").is_file() and (task / "html" / "index.html").is_file()
    assert sorted((task / "html" / "sub-01" / "figures").glob("*.png"))
    product = json.loads((task / "product.json").read_text())
    assert product["brainlife"][0]["type"] == "success"
    assert {"space-fsaverage5", "model-gauss", "task-prf"} <= set(product["prf"]["tags"])
    assert not (task / "work").exists(), "the work folder should be removed"
    assert "--participant-label 01" in result.stdout, "the subject comes from _inputs meta"


def test_main_volume_end_to_end(tmp_path):
    synth(tmp_path / "bids", "T1w")
    task = tmp_path / "task"
    result = run_main(task, brainlife_config(str(tmp_path / "bids"), refine="none", no_report=True))
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sigma = nib.load(task / "prf" / "rfWidth.nii.gz")
    np.testing.assert_array_equal(np.asarray(sigma.get_fdata()), prfmap_map(task / "prfmap", "sigma", None))
    for name in ("polarAngle", "eccentricity", "r2"):
        assert (task / "prf" / f"{name}.nii.gz").is_file()
    assert not (task / "html").exists()


def test_config_errors_are_one_line_and_exit_64(tmp_path):
    result = run_main(tmp_path / "a", {"space": "fsaverage5"})
    assert result.returncode == 64
    assert result.stderr.strip() == (
        "prfmap-brainlife: error: config.json has no 'bids' input (a BIDS raw dataset folder)"
    )
    result = run_main(tmp_path / "b", brainlife_config("missing"))
    assert result.returncode == 64 and "'bids' input missing is not a folder" in result.stderr
    (tmp_path / "bids").mkdir()
    result = run_main(tmp_path / "c", brainlife_config("../bids", fit_hrf="yes"))
    assert result.returncode == 64 and "'fit_hrf' must be true or false" in result.stderr
    assert not (tmp_path / "c" / "prfmap").exists()


def test_prfmaps_exit_code_passes_through(tmp_path):
    """prfmap's own errors (here: not a BIDS dataset, exit 16) are main's exit code."""
    (tmp_path / "bids").mkdir()
    result = run_main(tmp_path / "task", brainlife_config("../bids"))
    assert result.returncode == 16, result.stderr
    assert "prfmap: error: " in result.stderr
    assert not (tmp_path / "task" / "product.json").exists()


def test_config_to_command_line(tmp_path):
    (tmp_path / "bids").mkdir()
    (tmp_path / "fmriprep").mkdir()
    config = brainlife_config(
        "bids",
        fmriprep="fmriprep",
        participant_label="",
        task="prf bar",
        confounds=["trans_x", "rot_z"],
        save_predictions=True,
        fit_hrf=False,
        high_pass_hz=0.02,
        dummy_scans="",
        model="css",
    )
    args = brainlife.prfmap_arguments(config, tmp_path)
    assert args == [
        str(tmp_path / "bids"),
        str(tmp_path / "prfmap"),
        "participant",
        "--derivatives",
        f"fmriprep={tmp_path / 'fmriprep'}",
        "--participant-label",
        "01",
        "--task",
        "prf",
        "bar",
        "--model",
        "css",
        "--high-pass-hz",
        "0.02",
        "--confounds",
        "trans_x",
        "rot_z",
        "--save-predictions",
        "--work-dir",
        str(tmp_path / "work"),
    ]
    ns = build_parser().parse_args(args)
    assert ns.participant_label == ["01"] and ns.derivatives == [("fmriprep", tmp_path / "fmriprep")]


@pytest.mark.parametrize(
    ("atan2_deg", "visual_deg"),
    [
        (0.0, 90.0),
        (90.0, 0.0),
        (-90.0, 180.0),
        (180.0, -90.0),
        (-179.0, -91.0),
        (45.0, 45.0),
        (-135.0, -135.0),
    ],
)
def test_polar_angle_in_neuropythys_convention(atan2_deg, visual_deg):
    assert float(brainlife.neuropythy_polar_angle(np.array([atan2_deg]))[0]) == pytest.approx(visual_deg)


def test_main_uses_this_versions_image():
    assert f"docker://prfmap/prfmap:{project_version()}-jax" in (APP / "main").read_text()
    sample = json.loads((APP / "config.json.sample").read_text())
    assert set(sample) - {"bids", "fmriprep", "_inputs"} <= set(brainlife.OPTIONS)
