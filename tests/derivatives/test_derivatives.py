"""Derivative names, sidecars, dataset_description and atomic, race-safe writing."""

from __future__ import annotations

import dataclasses
import json
import multiprocessing
from pathlib import Path

import pytest

from helpers import fit_settings
from prfmap.derivatives import (
    OutputKey,
    dataset_description,
    map_sidecar,
    write_dataset_files,
)
from prfmap.engine import catalog
from prfmap.io.atomic import write_if_absent, write_json_atomic


def key(**kw) -> OutputKey:
    base = dict(subject="01", session=None, task="bar", space="fsaverage5", den=None, res=None, model="gauss")
    return OutputKey(**{**base, **kw})


def test_gifti_map_name_follows_design() -> None:
    stem = key().stem(hemi="L", param="sigma")
    assert stem == "sub-01_task-bar_hemi-L_space-fsaverage5_model-gauss_desc-sigma"


def test_session_density_and_folder() -> None:
    k = key(session="pre", space="fsLR", den="32k", model="css")
    assert k.stem(hemi="R", param="n") == (
        "sub-01_ses-pre_task-bar_hemi-R_space-fsLR_den-32k_model-css_desc-n"
    )
    assert k.func_dir(Path("/out")) == Path("/out/sub-01/ses-pre/func")
    assert key().func_dir(Path("/out")) == Path("/out/sub-01/func")


def test_cifti_and_volume_and_series_names() -> None:
    assert key(space="fsLR", den="91k").stem() == "sub-01_task-bar_space-fsLR_den-91k_model-gauss"
    assert key(space="MNI152NLin2009cAsym", res="2").stem(param="r2") == (
        "sub-01_task-bar_space-MNI152NLin2009cAsym_res-2_model-gauss_desc-r2"
    )
    assert key().stem(hemi="L", desc="gaussprediction") == (
        "sub-01_task-bar_hemi-L_space-fsaverage5_desc-gaussprediction"
    ), "no model entity on bold series: BIDS has none there"


def test_param_labels_drop_underscores() -> None:
    assert catalog.PARAMETERS["sigma_surround"].label == "sigmasurround"
    assert catalog.PARAMETERS["baseline_norm"].label == "baselinenorm"


def test_map_sidecar_content() -> None:
    settings = fit_settings(hrf="spm canonical")
    side = map_sidecar("polarangle", "gauss", settings, {"Device": "cpu", "Timings": {"fit": 1.0}})
    assert side["Parameter"] == "polarangle" and side["Units"] == "deg"
    assert "counter-clockwise" in side["PolarAngleConvention"]
    assert "x to the right, y up" in side["VisualFieldCoordinates"]
    assert side["HRF"] == {"Description": "spm canonical"} and side["FitSettings"]["refine"] == "lm"
    assert side["Device"] == "cpu" and side["Timings"] == {"fit": 1.0}
    json.dumps(side)
    cifti = map_sidecar(None, "dog", settings, {"MapNames": ["x", "sigmasurround"]})
    assert set(cifti["Parameters"]) == {"x", "sigmasurround"}
    assert "MapNames" not in cifti
    record = {"option": "participant", "delay_s": 7.1, "dispersion": 1.0, "peak_s": 6.1, "units": 200}
    hrf = map_sidecar("x", "gauss", dataclasses.replace(settings, hrf_model=record), {})["HRF"]
    assert hrf == {
        "Description": "spm canonical",
        "Option": "participant",
        "PeakDelay": 7.1,
        "PeakDispersion": 1.0,
        "TimeToPeak": 6.1,
        "EstimatedFromUnits": 200,
    }


def test_sidecars_state_bounds_and_the_status_bits() -> None:
    settings = fit_settings(bounds={"sigma": [0.2, 20.0]})
    sigma = map_sidecar("sigma", "gauss", settings, {})
    assert sigma["Bounds"] == "1 × pixel <= sigma <= 1 × fov"
    assert sigma["FitSettings"]["bounds"]["sigma"] == [0.2, 20.0]
    assert "desc-status" in sigma["FitStatus"] and "NaN" in sigma["FitStatus"]
    assert "Bounds" not in map_sidecar("baseline", "gauss", settings, {})  # unbounded
    status = map_sidecar("status", "gauss", settings, {})
    assert set(status["Levels"]) == {str(bit) for bit in catalog.STATUS_FLAGS}
    assert status["Levels"]["1"].startswith("no_signal: ") and status["Units"] == "1"
    assert catalog.DOUBTFUL_BITS == 4 + 8 + 16 + 64 + 512


def test_dataset_description_container(monkeypatch) -> None:
    monkeypatch.setenv("PRFMAP_CONTAINER", "docker")
    monkeypatch.setenv("PRFMAP_CONTAINER_IMAGE", "prfmap:0.1.0-jax")
    desc = dataset_description([{"URL": "file:///data"}])
    assert desc["DatasetType"] == "derivative"
    gen = desc["GeneratedBy"][0]
    assert gen["Name"] == "prfmap" and gen["Version"]
    assert gen["Container"] == {"Type": "docker", "URI": "prfmap:0.1.0-jax"}
    assert desc["SourceDatasets"] == [{"URL": "file:///data"}]


def test_write_json_is_atomic_and_leaves_no_temporaries(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "a.json"
    write_json_atomic(path, {"n": np.int64(3), "f": np.float32(0.5), "p": tmp_path})
    assert json.loads(path.read_text()) == {"n": 3, "f": 0.5, "p": str(tmp_path)}

    class Boom:
        def __str__(self) -> str:
            raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        write_json_atomic(path, {"bad": Boom()})
    assert json.loads(path.read_text())["n"] == 3
    assert [p.name for p in tmp_path.iterdir()] == ["a.json"]


def _race(args: tuple[str, int]) -> bool:
    folder, i = args
    return write_if_absent(Path(folder) / "dataset_description.json", f'{{"writer": {i}}}\n')


def test_write_if_absent_has_one_winner_across_processes(tmp_path: Path) -> None:
    with multiprocessing.get_context("spawn").Pool(4) as pool:
        created = pool.map(_race, [(str(tmp_path), i) for i in range(16)])
    assert sum(created) == 1
    content = json.loads((tmp_path / "dataset_description.json").read_text())
    assert content["writer"] == created.index(True)
    assert [p.name for p in tmp_path.iterdir()] == ["dataset_description.json"]


def test_dataset_files(tmp_path: Path) -> None:
    write_dataset_files(tmp_path, None)
    assert "*_boldmap.*" in (tmp_path / ".bidsignore").read_text().splitlines()
    first = (tmp_path / "dataset_description.json").read_text()
    write_dataset_files(tmp_path, [{"URL": "file:///other"}])
    assert (tmp_path / "dataset_description.json").read_text() == first


def test_bids_uri_prefers_the_most_specific_dataset(tmp_path: Path) -> None:
    from prfmap.derivatives import bids_uri

    links = {"raw": tmp_path, "fmriprep": tmp_path / "derivatives" / "fmriprep"}
    bold = tmp_path / "derivatives" / "fmriprep" / "sub-01" / "func" / "a_bold.func.gii"
    assert bids_uri(bold, links) == "bids:fmriprep:sub-01/func/a_bold.func.gii"
    assert bids_uri(tmp_path / "stimuli" / "bars.nii.gz", links) == "bids:raw:stimuli/bars.nii.gz"
    assert bids_uri("/elsewhere/x.npy", links) == "/elsewhere/x.npy"
