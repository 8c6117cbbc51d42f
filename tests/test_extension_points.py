"""A fifth model, a third refiner and a second noise model, each one class plus one registry entry
(tests/toys.py), added at run time: fitted (the noise model estimated once per fit and fold and
prewhitened with) by a participant run, written, cross-validated, cited in the report, and accepted
by the command line and by a ``bosh exec simulate`` of the descriptor generated from the catalogue."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import toys
from helpers import REPO
from prfmap.cli.descriptor import descriptor_choices
from prfmap.cli.parser import build_parser
from prfmap.cli.run import main
from prfmap.synth import SynthConfig, make_synthetic_dataset

BOSH = str(Path(sys.executable).parent / "bosh")


@pytest.fixture(scope="module")
def toy_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A two-run participant (``--small`` T1w data, ~800 voxels) fitted with the toy model, refiner and
    noise model."""
    root = tmp_path_factory.mktemp("toys")
    bids = make_synthetic_dataset(root / "bids", SynthConfig(small=True, runs=2, space="T1w"))
    out = root / "out"
    with toys.registered():
        code = main(
            [
                str(bids),
                str(out),
                "participant",
                "--model",
                "toysat",
                "--refine",
                "toygd",
                "--noise-model",
                "toyarw",
                "--hrf",
                "canonical",
                "--skip-bids-validation",
                "-w",
                str(root / "work"),
            ]
        )
    assert code == 0
    return out


def test_the_toys_are_fitted_written_and_cross_validated(toy_run: Path) -> None:
    func = toy_run / "sub-01" / "func"
    stem = "sub-01_task-prf_space-T1w_model-toysat"

    def read(label: str) -> np.ndarray:
        return np.asarray(nib.load(func / f"{stem}_desc-{label}_boldmap.nii.gz").dataobj, dtype=np.float64)

    saturation, cvr2, r2 = read("saturation"), read("cvr2"), read("r2")
    good = np.isfinite(r2) & (r2 > 0.3)
    assert good.sum() > 50 and np.all(saturation[good] > 0)
    assert np.isfinite(cvr2[good]).all() and np.median(cvr2[good]) > 0.2
    sidecar = json.loads((func / f"{stem}_desc-saturation_boldmap.json").read_text())
    assert sidecar["ModelDescription"] == "saturating Gaussian pRF (a test of prfmap)"
    assert sidecar["Units"] == "1" and sidecar["Bounds"] == "0 <= saturation"
    settings = sidecar["FitSettings"]
    assert settings["refine"] == "toygd" and settings["iterations"] > 0 and settings["units_refined"] > 50
    noise = settings["noise_model"]  # estimated by the toy's class, from the participant's quiet units
    assert noise["option"] == "toyarw" and noise["description"].startswith("AR(1) plus white noise")
    phi, white_fraction = noise["coefficients"]
    assert 0.0 < phi <= 0.95 and 0.0 <= white_fraction < 1.0 and noise["units"] > 50  # the toy's range


def test_the_report_cites_the_toys(toy_run: Path) -> None:
    page = (toy_run / "sub-01.html").read_text()
    assert toys.MODEL_REFERENCE in page and toys.REFINER_REFERENCE in page
    assert "gradient steps scaled by the Gauss-Newton diagonal" in page
    assert "AR(1) plus white noise pooled over" in page  # the methods' account of the standard errors


def test_the_command_line_and_the_descriptor_accept_the_toys(tmp_path: Path) -> None:
    bids = tmp_path / "bids"
    bids.mkdir()
    shipped = json.loads((REPO / "boutiques.json").read_text())
    assert descriptor_choices(shipped) == shipped, "boutiques.json: run python -m prfmap.cli.descriptor"
    with toys.registered():
        parsed = build_parser().parse_args(
            [
                str(bids),
                "out",
                "participant",
                "--model",
                "toysat",
                "--refine",
                "toygd",
                "--noise-model",
                "toyarw",
            ]
        )
        descriptor = descriptor_choices(shipped)
    assert (parsed.model, parsed.refine, parsed.noise_model) == (["toysat"], "toygd", "toyarw")
    inputs = {i["id"]: i for i in descriptor["inputs"]}
    # "all": the toys too; "cf" (connective fields) is not a pRF model of the catalogue
    assert inputs["model"]["value-choices"][-4:] == ["toysat", "toystudent", "all", "cf"]
    assert inputs["refine"]["value-choices"][-1] == "toygd"
    assert inputs["noise_model"]["value-choices"][-1] == "toyarw"
    (tmp_path / "descriptor.json").write_text(json.dumps(descriptor))
    invocation = {
        "bids_dir": str(bids),
        "output_dir": str(tmp_path / "out"),
        "analysis_level": "participant",
        "model": ["toysat"],
        "refine": "toygd",
    }
    (tmp_path / "invocation.json").write_text(json.dumps(invocation))
    result = subprocess.run(
        [
            BOSH,
            "exec",
            "simulate",
            str(tmp_path / "descriptor.json"),
            "-i",
            str(tmp_path / "invocation.json"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    command = next(x for x in result.stdout.splitlines() if x.startswith(("prfmap ", "mkdir -p ")))
    words = shlex.split(command.rpartition("; ")[2])  # after the BIDS-App template's mkdir -p
    assert words[words.index("--model") + 1] == "toysat" and words[words.index("--refine") + 1] == "toygd"
    (shipped_path := tmp_path / "shipped.json").write_text(json.dumps(shipped))
    refused = subprocess.run(
        [BOSH, "exec", "simulate", str(shipped_path), "-i", str(tmp_path / "invocation.json")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert refused.returncode != 0, "the shipped descriptor lists only the built-in models"
