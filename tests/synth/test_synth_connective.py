"""prfmap-synth's connective fields: the targets' signal against the definition, computed here
from the written files alone (truth maps, the source's noise-free data, geodesic distances), the
null targets, resting-state datasets (no events, no stimuli, valid BIDS) and the bad inputs."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

from helpers import documented_warnings
from prfmap.cli.synth import main
from prfmap.io.area_labels import template_labels
from prfmap.io.atlases import ATLASES
from prfmap.io.geodesic import geodesic_distances
from prfmap.io.meshes import find_midthickness
from prfmap.io.validator import validate_dataset
from prfmap.synth.config import SynthConfig
from prfmap.synth.dataset import load_truth
from prfmap.synth.writers import truth_description

N5 = 10242
CF_MAPS = ("truecfcenter", "truecfsize", "truecfgain", "truecfbaseline")


def _make(root, *extra: str) -> None:
    argv = [str(root), "--runs", "2", "--small", "--noise", "0", "--drift", "0", "--cf-source", "V1"]
    assert main([*argv, *extra]) == 0


@pytest.fixture(scope="module")
def datasets(tmp_path_factory):
    out = {}
    for kind, extra in (("rest", ("--rest",)), ("bars", ())):
        root = tmp_path_factory.mktemp(kind) / "bids"
        _make(root, *extra)
        out[kind] = root
    return out


def _gifti(path) -> np.ndarray:
    return np.stack([np.asarray(d.data) for d in nib.load(path).darrays], axis=-1).squeeze()


def _bold(root, task: str, run: int, hemi: str) -> np.ndarray:
    func = root / "derivatives" / "fmriprep" / "sub-01" / "func"
    return _gifti(func / f"sub-01_task-{task}_run-{run}_hemi-{hemi}_space-fsaverage5_bold.func.gii").astype(
        np.float64
    )


def _truth(root, task: str, hemi: str) -> dict[str, np.ndarray]:
    func = root / "derivatives" / "prfsynth" / "sub-01" / "func"
    stem = f"sub-01_task-{task}_hemi-{hemi}_space-fsaverage5"
    out = {label: _gifti(func / f"{stem}_model-cf_desc-{label}_boldmap.func.gii") for label in CF_MAPS}
    for desc in ("cfsource", "cftarget", "noise", "prf"):
        out[desc] = _gifti(func / f"{stem}_desc-{desc}_mask.func.gii") > 0.5
    return out


@pytest.mark.parametrize("kind", ["rest", "bars"])
def test_targets_are_the_gaussian_weighted_mean_of_the_source(datasets, kind):
    root = datasets[kind]
    task = "rest" if kind == "rest" else "prf"
    meshes, _ = find_midthickness("01", "fsaverage5", None, None)
    v1 = ATLASES["benson14"].codes_of(["V1"])[0]
    n_fields = 0
    for hemi in ("L", "R"):
        truth = _truth(root, task, hemi)
        source = np.flatnonzero(template_labels(ATLASES["benson14"], hemi)[:N5] == v1)
        np.testing.assert_array_equal(np.flatnonzero(truth["cfsource"]), source)
        distances = geodesic_distances(*meshes[hemi], source).astype(np.float64)
        position = {int(v): k for k, v in enumerate(source)}
        targets = np.flatnonzero(truth["truecfcenter"] >= 0)
        assert set(targets) <= set(np.flatnonzero(truth["cftarget"]))
        for run in (1, 2):
            data = _bold(root, task, run, hemi)[np.concatenate([source, targets])]
            psc = 100 * (data / data.mean(axis=1, keepdims=True) - 1)  # noise-free: the data's mean
            psc_source, psc_targets = psc[: len(source)], psc[len(source) :]
            for k, t in enumerate(targets):
                c = position[int(truth["truecfcenter"][t])]
                w = np.exp(-(distances[c] ** 2) / (2 * float(truth["truecfsize"][t]) ** 2))
                w /= w.sum()
                expected = truth["truecfbaseline"][t] + truth["truecfgain"][t] * (w @ psc_source)
                np.testing.assert_allclose(psc_targets[k], expected, atol=2e-4)
        n_fields += len(targets)
        assert psc_targets.std(axis=1).min() > 0.01  # the targets do carry a signal
    assert n_fields > 100


@pytest.mark.parametrize("kind", ["rest", "bars"])
def test_null_targets_are_noise_only_with_no_field_in_the_truth(datasets, kind):
    root = datasets[kind]
    task = "rest" if kind == "rest" else "prf"
    truth = load_truth(root)
    target, center = truth["cftarget"], truth["truecfcenter"]
    null = target & (center < 0)
    assert 0.1 < null.sum() / target.sum() < 0.3  # --cf-null-fraction 0.2
    assert np.isnan(truth["truecfsize"][null]).all() and np.isnan(truth["truecfgain"][null]).all()
    assert (center[~target] == -1).all() and np.isnan(truth["truecfsize"][~target]).all()
    field = center >= 0
    assert (truth["truecfsize"][field] >= 1.5).all() and (truth["truecfsize"][field] <= 6).all()
    np.testing.assert_array_equal(truth["truecfgain"][field], 1.0)
    np.testing.assert_array_equal(truth["truecfbaseline"][field], 0.0)
    assert truth["noise"][null].all() and not truth["noise"][field].any()
    assert not truth["mask"][target].any() and np.isnan(truth["x"][target]).all()
    data = np.concatenate([_bold(root, task, 1, h) for h in ("L", "R")])
    assert np.ptp(data[null], axis=1).max() == 0  # --noise 0 --drift 0: a flat line


def test_bar_targets_take_a_source_vertex_with_a_prf(datasets):
    truth = load_truth(datasets["bars"])
    field = np.flatnonzero(truth["truecfcenter"] >= 0)
    hemi_offset = np.where(field >= N5, N5, 0)
    centers = truth["truecfcenter"][field].astype(int) + hemi_offset
    assert truth["mask"][centers].all() and truth["cfsource"][centers].all()


def test_rest_writes_no_events_or_stimuli_and_passes_the_validator(datasets):
    root = datasets["rest"]
    assert not any(root.rglob("*_events.*")) and not (root / "stimuli").exists()
    assert sorted(p.name for p in (root / "sub-01" / "func").iterdir()) == [
        f"sub-01_task-rest_run-{r}_bold.{ext}" for r in (1, 2) for ext in ("json", "nii.gz")
    ]
    for dataset in (root, root / "derivatives" / "fmriprep", root / "derivatives" / "prfsynth"):
        result = validate_dataset(dataset)
        assert result.exit_code == 0, f"{dataset.name}: {result.summary()}"
        undocumented = {i.code for i in result.warnings} - documented_warnings()
        assert not undocumented, f"{dataset.name}: warnings not in docs/outputs.md: {undocumented}"
    truth = load_truth(root)
    assert not truth["mask"].any()  # at rest no vertex has a pRF
    outside = ~truth["cfsource"] & ~truth["cftarget"]
    data = np.concatenate([_bold(root, "rest", 1, h) for h in ("L", "R")])
    assert np.ptp(data[outside], axis=1).max() == 0


def test_rest_source_is_a_smooth_field_new_in_every_run(datasets):
    root = datasets["rest"]
    meshes, _ = find_midthickness("01", "fsaverage5", None, None)
    truth = _truth(root, "rest", "L")
    source = np.flatnonzero(truth["cfsource"])
    runs = []
    for run in (1, 2):
        data = _bold(root, "rest", run, "L")[source]
        runs.append(100 * (data / data.mean(axis=1, keepdims=True) - 1))
    sd = np.sqrt(np.mean(runs[0].var(axis=1)))
    assert 0.5 < sd < 0.7
    d = geodesic_distances(*meshes["L"], source)
    corr = np.corrcoef(runs[0])
    near, far = (d > 0) & (d < 2.5), np.isfinite(d) & (d > 10)
    assert corr[near].mean() > 0.5 and abs(corr[far].mean()) < 0.2
    across = np.mean([np.corrcoef(a, b)[0, 1] for a, b in zip(runs[0], runs[1], strict=True)])
    assert abs(across) < 0.1


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cf-source", "V9"], "invalid choice: 'V9'"),
        (["--cf-source", "V1", "--cf-targets", "V2", "MT"], "invalid choice: 'MT'"),
        (["--cf-source", "V1", "--space", "T1w"], "--cf-source needs --space fsaverage5"),
        (["--cf-source", "V1", "--space", "fsLR"], "--cf-source needs --space fsaverage5"),
        (["--cf-source", "V1", "--cf-targets", "V1"], "names the source V1"),
        (["--rest"], "--rest needs --cf-source"),
        (["--cf-source", "V1", "--cf-sizes", "6", "2"], "LOW exceeds HIGH"),
    ],
)
def test_bad_inputs_exit_with_one_line(tmp_path, capsys, argv, message):
    with pytest.raises(SystemExit) as exit_info:
        main([str(tmp_path / "out"), *argv])
    err = capsys.readouterr().err
    assert exit_info.value.code == 64 and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_config_checks_the_connective_settings():
    with pytest.raises(ValueError, match="fsaverage5"):
        SynthConfig(space="T1w", cf_source="V1")
    with pytest.raises(ValueError, match="not an area"):
        SynthConfig(cf_source="V1", cf_targets=("V2", "MT"))
    with pytest.raises(ValueError, match="rest needs cf_source"):
        SynthConfig(rest=True)
    assert SynthConfig(cf_source="V1", rest=True).task == "rest"


def test_datasets_without_connective_fields_say_nothing_of_them():
    description = truth_description(SynthConfig())
    assert "ConnectiveFields" not in description
    assert not [k for k in description["Settings"] if k.startswith("cf_") or k == "rest"]
    assert not [k for k in description["Units"] if k.startswith("truecf")]
    assert json.dumps(description) == json.dumps(truth_description(SynthConfig(cf_null_fraction=0.5)))
