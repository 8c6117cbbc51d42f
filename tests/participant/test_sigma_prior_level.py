"""``--sigma-prior eccentricity`` at the participant level (issue 37): one prior per fit, whatever the
chunking, recorded in the sidecars; ``none`` gives the maximum-likelihood σ."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import read_maps, synthesise
from prfmap.cli.run import main
from prfmap.engine import catalog


def participant(bids: Path, out: Path, *options: str) -> dict:
    assert (
        main(
            [str(bids), str(out), "participant", "--no-report", "--no-cvr2", "-w", str(out) + "-w", *options]
        )
        == 0
    )
    sidecar = next((out / "sub-01" / "func").glob("*hemi-L*_desc-x_boldmap.json"))
    return json.loads(sidecar.read_text())["FitSettings"]


@pytest.fixture(scope="module")
def bids(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return synthesise(tmp_path_factory.mktemp("prior") / "bids", subjects=1, runs=2, space="fsaverage5")


def test_the_prior_and_the_maps_do_not_depend_on_the_chunking(bids, tmp_path, monkeypatch):
    whole = participant(bids, tmp_path / "whole")
    status = catalog.status_codes(read_maps(bids, tmp_path / "whole", ["status"])["status"])
    assert ((status & catalog.STATUS_BITS["size_at_floor"]) > 0).sum() <= 2  # the prior keeps σ off it
    monkeypatch.setenv("PRFMAP_CHUNK_UNITS", "2048")
    chunked = participant(bids, tmp_path / "chunked")
    assert chunked["chunks"] > whole.get("chunks", 1)
    assert whole["sigma_prior"] == chunked["sigma_prior"] and whole["sigma_prior"]["units"] >= 30
    first = read_maps(bids, tmp_path / "whole", ["sigma", "x"])
    second = read_maps(bids, tmp_path / "chunked", ["sigma", "x"])
    for key in ("sigma", "x"):
        np.testing.assert_array_equal(first[key], second[key], err_msg=key)


def test_none_gives_the_maximum_likelihood_sigma_and_no_record(bids, tmp_path):
    settings = participant(bids, tmp_path / "none", "--sigma-prior", "none")
    assert settings["sigma_prior"] is None
    status = catalog.status_codes(read_maps(bids, tmp_path / "none", ["status"])["status"])
    assert ((status & catalog.STATUS_BITS["size_at_floor"]) > 0).sum() > 5  # σ on its floor, an upper limit
