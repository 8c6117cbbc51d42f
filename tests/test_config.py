"""The run configuration: built once from the command line, frozen, written next to the run log."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from prfmap.cli.config import build_config
from prfmap.cli.parser import build_parser
from prfmap.cli.run import main
from prfmap.config import Config, FitConfig
from prfmap.engine import catalog
from prfmap.errors import NotBIDSError, UsageError


def bids_root(tmp_path: Path) -> Path:
    root = tmp_path / "bids"
    root.mkdir()
    (root / "dataset_description.json").write_text(json.dumps({"Name": "x", "BIDSVersion": "1.9.0"}))
    return root


def configure(*argv: str | Path) -> Config:
    return build_config(build_parser().parse_args([str(a) for a in argv]))


def test_defaults_are_filled_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERAS_BACKEND", "torch")
    monkeypatch.chdir(tmp_path)
    bids_root(tmp_path)
    config = configure("bids", "out", "participant")
    assert config.inputs.bids_dir == tmp_path / "bids" and config.outputs.output_dir == tmp_path / "out"
    assert config.inputs.derivatives == (("fmriprep", tmp_path / "bids" / "derivatives" / "fmriprep"),)
    assert config.inputs.dataset_links == {"raw": tmp_path / "bids", **dict(config.inputs.derivatives)}
    assert config.execution.backend == "torch"
    assert config.execution.mem_gb_auto and config.execution.mem_gb >= 1.0
    assert config.outputs.report and not config.outputs.save_predictions
    assert config.fit.engine_kwargs() == {
        "model": "gauss",
        "refine": "lm",
        "refine_r2_min": 0.1,
        "hrf": "participant",
        "noise": "ar1",
        "covariance": "laplace",
        "sigma_prior": "eccentricity",
        "delay_prior": "spread",
        "seed": 0,
    }
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.fit.model = "css"  # type: ignore[misc]


def test_options_reach_their_sections(tmp_path: Path) -> None:
    root = bids_root(tmp_path)
    flt = tmp_path / "filter.json"
    flt.write_text(json.dumps({"bold": {"acquisition": "mb4", "echo": None}}))
    config = configure(
        root,
        tmp_path / "out",
        "participant",
        "--participant-label",
        "sub-01",
        "02",
        "--run",
        "run-2",
        "--derivatives",
        f"smooth={tmp_path / 'smooth'}",
        "--bids-filter-file",
        flt,
        "--mem-gb",
        "3",
        "--confounds",
        "trans_*",
        "--model",
        "dog",
        "--random-seed",
        "7",
        "--no-report",
        "-w",
        "work",
        "--slice-time-ref",
        "start",
        "--covariance",
        "sandwich",
        "--sigma-prior",
        "none",
        "--delay-prior",
        "none",
    )
    assert config.inputs.participant_labels == ("01", "02") and config.inputs.runs == (2,)
    assert config.inputs.derivatives == (("smooth", tmp_path / "smooth"),)
    assert dict(config.inputs.bids_filter) == {"acquisition": "mb4", "echo": None}
    assert config.execution.mem_gb == 3.0 and not config.execution.mem_gb_auto
    assert config.execution.work_dir == Path("work").absolute()
    assert config.preprocessing.confounds == ("trans_*",)
    assert (config.fit.model, config.fit.random_seed, config.outputs.report) == ("dog", 7, False)
    assert config.fit.slice_time_ref == 0.0 and config.fit.engine_kwargs()["slice_time_ref"] == 0.0
    assert config.fit.engine_kwargs()["covariance"] == "sandwich"
    assert config.fit.engine_kwargs()["sigma_prior"] == "none"
    assert config.fit.engine_kwargs()["delay_prior"] == "none"
    assert FitConfig().delay_prior == catalog.DEFAULT_DELAY_PRIOR
    assert FitConfig().sigma_prior == catalog.DEFAULT_SIGMA_PRIOR  # the configuration's default is the CLI's
    assert FitConfig().covariance == catalog.DEFAULT_COVARIANCE  # the configuration's default is the engine's


@pytest.mark.parametrize(
    ("options", "hrf"),
    [
        ((), "participant"),
        (("--hrf", "canonical"), "canonical"),
        (("--hrf", "vertex"), "vertex"),
        (("--fit-hrf",), "vertex"),
    ],
)
def test_the_hrf_option_reaches_the_engine(tmp_path: Path, options: tuple[str, ...], hrf: str) -> None:
    config = configure(bids_root(tmp_path), tmp_path / "out", "participant", *options)
    assert config.fit.hrf == hrf and config.fit.engine_kwargs()["hrf"] == hrf
    assert config.to_dict()["fit"]["hrf"] == hrf
    assert FitConfig().hrf == catalog.DEFAULT_HRF  # the configuration's default is the engine's


def test_checks_before_anything_is_written(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(NotBIDSError, match="no dataset_description.json"):
        configure(tmp_path / "empty", tmp_path / "out", "participant")
    configure(tmp_path / "empty", tmp_path / "out", "group")  # the group level reads output_dir only
    root = bids_root(tmp_path)
    with pytest.raises(UsageError, match="is bids_dir"):
        configure(root, root, "participant")
    with pytest.raises(UsageError, match="inside the raw dataset"):
        configure(root, root / "sub-01" / ".." / "code", "participant")


def test_round_trip_through_json(tmp_path: Path) -> None:
    options = ("--task", "bars", "--dummy-scans", "3", "--derivatives", str(tmp_path / "fmriprep"))
    config = configure(bids_root(tmp_path), tmp_path / "out", "participant", *options)
    assert Config.from_dict(json.loads(json.dumps(config.to_dict()))) == config


def test_each_run_writes_its_configuration_next_to_its_log(tmp_path: Path, capsys) -> None:
    root = bids_root(tmp_path)  # no derivatives: the run stops (66) after opening its log
    out = tmp_path / "out"
    argv = [str(root), str(out), "participant", "--mem-gb", "2", "--high-pass-hz", "0.02"]
    assert main(argv) == 66
    assert "no fMRIPrep derivatives" in capsys.readouterr().err
    (log,) = sorted((out / "logs").glob("prfmap_*.log"))
    written = json.loads(log.with_name(f"{log.stem}_config.json").read_text())
    assert written["command"] == argv and written["prfmap"]
    assert Config.from_dict(written) == configure(*argv)
