"""Connective fields through the BIDS App (issue 34): ``prfmap-synth --cf-source V1 --rest`` data,
fitted with ``--model cf``, give back the CF centres and sizes the generator drew; pure-noise targets
predict nothing held out; resting-state runs are accepted by ``--model cf`` and refused by the pRF
models; a CF inherits the visual field position of its source's pRFs."""

from __future__ import annotations

import html
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import documented_warnings, run_prfmap, synthesise, write_freesurfer_label
from prfmap.io.geodesic import geodesic_distances
from prfmap.io.meshes import find_midthickness
from prfmap.io.validator import validate_dataset
from prfmap.synth import load_truth

HEMIS = {"L": slice(0, 10242), "R": slice(10242, 20484)}


def cf_maps(out: Path, labels: tuple[str, ...]) -> dict[str, np.ndarray]:
    """The model-cf maps of sub-01, hemispheres joined."""
    func = out / "sub-01" / "func"
    return {
        label: np.concatenate(
            [
                nib.load(next(func.glob(f"*hemi-{h}_*model-cf_desc-{label}_boldmap.func.gii")))
                .darrays[0]
                .data
                for h in HEMIS
            ]
        ).astype(np.float64)
        for label in labels
    }


@pytest.fixture(scope="module")
def rest(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("cf-rest")
    bids = synthesise(root / "bids", runs=2, cf_source="V1", rest=True, noise=0.25)
    out = root / "out"
    done = run_prfmap(bids, out, "participant", "--model", "cf", "--cf-source", "V1", "--roi", "V2", "V3")
    assert done.returncode == 0, done.stderr[-3000:]
    return bids, out


def test_connective_fields_are_recovered(rest):
    """Must show 4: centre within 2 mm and size within 25 % for >= 90 % of the targets with cvr2 >= 0.2."""
    bids, out = rest
    truth = load_truth(bids, "01")
    est = cf_maps(out, ("cfcenter", "cfsize", "cvr2"))
    meshes, _ = find_midthickness("01", "fsaverage5", None, None)
    near, sized, scored, targets = [], [], 0, 0
    for hemi, part in HEMIS.items():
        source = np.flatnonzero(truth["cfsource"][part] > 0)
        distances = geodesic_distances(*meshes[hemi], source)
        position = {v: i for i, v in enumerate(source)}
        centre, size = truth["truecfcenter"][part], truth["truecfsize"][part]
        has = centre >= 0
        good = has & (est["cvr2"][part] >= 0.2)
        targets += int(has.sum())
        scored += int(good.sum())
        near += [
            distances[position[int(a)], position[int(b)]] <= 2.0
            for a, b in zip(est["cfcenter"][part][good], centre[good], strict=True)
        ]
        sized += list(np.abs(est["cfsize"][part][good] / size[good] - 1) <= 0.25)
    near, sized = np.array(near), np.array(sized)
    assert scored >= 0.8 * targets
    assert np.mean(near & sized) >= 0.9, (np.mean(near), np.mean(sized))


def test_pure_noise_targets_predict_nothing_held_out(rest):
    bids, out = rest
    truth = load_truth(bids, "01")
    cvr2 = cf_maps(out, ("cvr2",))["cvr2"]
    null = (truth["cftarget"] > 0) & (truth["truecfcenter"] < 0)
    assert null.sum() > 50
    assert -0.1 < np.median(cvr2[null]) <= 0.0
    assert np.percentile(cvr2[null], 99) < 0.05


def test_rest_outputs_are_valid_bids_and_say_what_was_fitted(rest):
    """Their report too, written by the fit and again by --reports-only."""
    bids, out = rest
    sidecar = json.loads(
        next((out / "sub-01" / "func").glob("*hemi-L_*model-cf_desc-cfsize_boldmap.json")).read_text()
    )
    assert sidecar["Units"] == "mm" and sidecar["CFSettings"]["SourceArea"] == "V1"
    assert sidecar["CFSettings"]["CrossValidation"] == "leave one run out"
    assert sidecar["CFSettings"]["InheritedFrom"].startswith("none")
    assert not list(out.rglob("*model-cf_desc-x_*"))
    check_report(out, "task-rest", inherited=False)
    (out / "sub-01.html").unlink()
    done = run_prfmap(bids, out, "participant", "--reports-only")
    assert done.returncode == 0, done.stderr[-3000:]
    check_report(out, "task-rest", inherited=False)
    summary = (
        out / "sub-01" / "func" / "sub-01_task-rest_space-fsaverage5_model-cf_desc-areas_summary.tsv"
    ).read_text()
    assert summary.splitlines()[0].split("\t")[:4] == ["area", "units", "units_fitted", "units_shown"]
    assert [line.split("\t")[0] for line in summary.splitlines()[1:]] == ["V2", "V3"]
    result = validate_dataset(out)
    assert result.exit_code == 0, result.summary()
    assert {i.code for i in result.warnings} <= documented_warnings(), result.summary("warning")


def test_prf_models_refuse_rest_runs_in_one_line(rest, tmp_path):
    """Must show 5: the run is named and --model cf offered; nothing is written but the logs."""
    bids, _ = rest
    done = run_prfmap(bids, tmp_path / "out", "participant", "--task", "rest")
    assert done.returncode == 66
    (line,) = done.stderr.strip().splitlines()
    assert "pRF models need the stimulus apertures" in line and "--model cf" in line
    done = run_prfmap(bids, tmp_path / "out2", "participant")
    assert done.returncode == 66
    (line,) = done.stderr.strip().splitlines()
    assert "task(s) rest" in line and "--model cf" in line


def test_label_files_of_the_source_give_the_same_fields(rest, tmp_path):
    """The atlas's V1 drawn as a lab's own label files (one per hemisphere): the same CFs."""
    bids, out = rest
    truth = load_truth(bids, "01")
    labels = [
        write_freesurfer_label(
            tmp_path / f"{h.lower()}h.V1.label", np.flatnonzero(truth["cfsource"][part] > 0)
        )
        for h, part in HEMIS.items()
    ]
    again = tmp_path / "out"
    done = run_prfmap(
        bids, again, "participant", "--model", "cf", "--cf-source", *labels, "--roi", "V2", "V3"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    first, second = cf_maps(out, ("cfcenter", "cfsize")), cf_maps(again, ("cfcenter", "cfsize"))
    np.testing.assert_array_equal(first["cfcenter"], second["cfcenter"])
    np.testing.assert_allclose(first["cfsize"], second["cfsize"], rtol=1e-5)
    sidecar = json.loads(
        next((again / "sub-01" / "func").glob("*hemi-L_*model-cf_desc-cfsize_boldmap.json")).read_text()
    )
    assert sidecar["CFSettings"]["SourceArea"] == "lh.V1.label rh.V1.label"


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--model", "cf"), "--model cf needs --cf-source"),
        (("--cf-source", "V1"), "add --model cf"),
        (("--model", "cf", "gauss", "--cf-source", "V1"), "on their own"),
        (("--model", "cf", "--cf-source", "V1", "--atlas", "none"), "cannot go with --atlas none"),
        (("--model", "cf", "--cf-source", "V9"), "V9"),
    ],
)
def test_bad_cf_options_are_one_line(rest, tmp_path, args, words):
    bids, _ = rest
    done = run_prfmap(bids, tmp_path / "out", "participant", *args)
    assert done.returncode == 64, done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert words in line


def test_a_connective_field_inherits_its_sources_prfs(tmp_path):
    """Bar runs: after a Gaussian fit, each CF's position is the CF-weighted mean of its source's pRFs,
    close to the same mean of the generator's pRFs under the generator's CF."""
    bids = synthesise(tmp_path / "bids", runs=2, cf_source="V1", noise=0.25, small=True)
    out = tmp_path / "out"
    for args in (("--no-report", "--no-cvr2"), ("--model", "cf", "--cf-source", "V1", "--roi", "V2", "V3")):
        done = run_prfmap(bids, out, "participant", *args)
        assert done.returncode == 0, done.stderr[-3000:]
    truth = load_truth(bids, "01")
    est = cf_maps(out, ("x", "y", "cvr2"))
    meshes, _ = find_midthickness("01", "fsaverage5", None, None)
    errors = []
    for hemi, part in HEMIS.items():
        source = np.flatnonzero(truth["cfsource"][part] > 0)
        distances = geodesic_distances(*meshes[hemi], source)
        position = {v: i for i, v in enumerate(source)}
        centre, size = truth["truecfcenter"][part], truth["truecfsize"][part]
        x, y = truth["x"][part][source], truth["y"][part][source]
        prf = np.isfinite(x)
        good = (centre >= 0) & (est["cvr2"][part] >= 0.2) & np.isfinite(est["x"][part])
        for unit in np.flatnonzero(good):
            w = np.exp(-np.square(distances[position[int(centre[unit])]]) / (2 * size[unit] ** 2)) * prf
            expected = np.array([w @ np.nan_to_num(x), w @ np.nan_to_num(y)]) / w.sum()
            errors.append(np.hypot(*(expected - [est["x"][part][unit], est["y"][part][unit]])))
    assert len(errors) > 50
    assert np.median(errors) < 0.5
    sidecar = json.loads(
        next((out / "sub-01" / "func").glob("*hemi-L_*model-cf_desc-x_boldmap.json")).read_text()
    )
    assert sidecar["CFSettings"]["InheritedFrom"].startswith("the model-gauss fit")
    check_report(out, "task-prf", inherited=True)
    assert "task-prf · space-fsaverage5 · model-gauss" in html.unescape((out / "sub-01.html").read_text())


def check_report(out: Path, task: str, inherited: bool) -> None:
    """The participant page has the CF section, its figures and its table of target areas."""
    page = html.unescape((out / "sub-01.html").read_text())
    assert f"Connective fields: {task} space-fsaverage5 from V1" in page
    drawn = ("cvr2", "cfsize", "polarangle", "eccentricity") if inherited else ("cvr2", "cfsize")
    for label in drawn:
        figure = f"sub-01/figures/sub-01_{task}_space-fsaverage5_model-cf_cf-{label}.png"
        assert figure in page and (out / figure).is_file(), label
    assert ("cf-polarangle" in page) == inherited
    assert "<td>V2</td>" in page and "<td>V3</td>" in page
    assert "Haak KV" in page
