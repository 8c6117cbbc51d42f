"""prfmap's outputs as the ecosystem reads them: the current BIDS validator passes on a
participant + group output with --save-predictions (surfaces, CIFTI and volumes), and plain pybids
(without prfmap's config) gives every map its own sidecar, while prfmap's config still queries by
parameter."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from bids import BIDSLayout
from bids.layout import Query

from helpers import documented_warnings, run_prfmap, synthesise
from prfmap.derivatives import PYBIDS_CONFIG
from prfmap.io.validator import validate_dataset

pytestmark = pytest.mark.slow
MAP_EXTENSIONS = (".func.gii", ".nii.gz", ".dscalar.nii")


@pytest.fixture(scope="module", params=["fsaverage5", "fsLR", "T1w"])
def outputs(request, tmp_path_factory) -> tuple[str, Path]:
    """Participant level (two participants, --save-predictions) then group level."""
    space = request.param
    root = tmp_path_factory.mktemp(f"eco-{space}")
    bids = synthesise(root / "bids", subjects=2, runs=1, space=space, small=True)
    out = root / "out"
    report = [] if space == "fsaverage5" else ["--no-report"]
    done = run_prfmap(
        bids,
        out,
        "participant",
        "--refine",
        "none",
        "--save-predictions",
        "-w",
        root / "work",
        *report,
        timeout=1800,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    if space != "T1w":
        done = run_prfmap(bids, out, "group", "--r2-threshold", "0.05", *report)
        assert done.returncode == 0, done.stderr[-3000:]
    return space, out


def test_outputs_pass_the_bids_validator(outputs):
    space, out = outputs
    assert sorted(out.rglob("*_desc-*prediction_bold.*")), "--save-predictions wrote series"
    if space != "T1w":
        assert (out / "group").is_dir()
    result = validate_dataset(out)
    assert result.exit_code == 0, result.summary()
    assert {i.code for i in result.warnings} <= documented_warnings(), result.summary("warning")


def test_sidecars_use_relative_links_and_bids_uris(outputs):
    _, out = outputs
    description = json.loads((out / "dataset_description.json").read_text())
    assert all(not v.startswith(("/", "file:")) for v in description["DatasetLinks"].values())
    sidecars = [p for p in out.rglob("*.json") if "logs" not in p.relative_to(out).parts]
    assert sidecars
    for sidecar in sidecars:  # logs/ keeps the run's configuration with its paths, as a log
        text = sidecar.read_text()
        assert "file://" not in text and str(out.parent) not in text, sidecar.name


def shared_sidecar(path: Path) -> Path:
    """The sidecar that describes a map: its own, or (a statistic's map, ``stat-<s>``, has none) its
    parameter's, the same name without the ``stat`` entity."""
    stem = path.name.split(".")[0]
    own = path.with_name(stem + ".json")
    return own if own.is_file() else path.with_name(re.sub(r"_stat-[a-zA-Z0-9]+", "", stem) + ".json")


def test_plain_pybids_gives_each_map_its_own_sidecar(outputs):
    """Every map, participant and group: pybids' metadata is the sidecar that describes the map (a
    statistic's map: its parameter's, which names it under ``Statistics``), never another map's."""
    _, out = outputs
    layout = BIDSLayout(out, validate=False, is_derivative=True)
    maps = [f for f in layout.get(suffix="boldmap") if f.path.endswith(MAP_EXTENSIONS)]
    assert any("_stat-se" in f.filename for f in maps)
    for bids_file in maps:
        path = Path(bids_file.path)
        sidecar = shared_sidecar(path)
        expected = json.loads(sidecar.read_text())
        metadata = layout.get_metadata(bids_file.path)
        for key in ("Parameter", "Units", "Statistic", "MapNames", "Statistics"):
            assert metadata.get(key) == expected.get(key), (path.name, key)
        stat = re.search(r"_stat-([a-zA-Z0-9]+)_", path.name)
        if stat and sidecar != path.with_name(path.name.split(".")[0] + ".json"):
            described = expected["Statistics"][stat.group(1)]
            assert path.name in (described.get("File"), *described.get("Files", ())), path.name


def test_prfmaps_pybids_config_queries_by_parameter(outputs):
    space, out = outputs
    layout = BIDSLayout(
        out, validate=False, is_derivative=True, config=["bids", "derivatives", PYBIDS_CONFIG]
    )
    if space == "fsLR":  # one dscalar holds every parameter
        (dscalar,) = layout.get(subject="01", suffix="boldmap", extension=".dscalar.nii", stat=Query.NONE)
        assert "sigma" in layout.get_metadata(dscalar.path)["MapNames"]
        (errors,) = layout.get(subject="01", suffix="boldmap", extension=".dscalar.nii", stat="se")
        assert "sigma" in layout.get_metadata(errors.path)["Statistics"]["se"]["MapNames"]
        return
    sigma = layout.get(
        subject="01", param="sigma", suffix="boldmap", extension=[".func.gii", ".nii.gz"], stat=Query.NONE
    )
    assert len(sigma) == (2 if space == "fsaverage5" else 1)
    assert all(layout.get_metadata(f.path)["Parameter"] == "sigma" for f in sigma)
