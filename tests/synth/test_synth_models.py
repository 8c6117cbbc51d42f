"""prfmap-synth --prf-models: pRF units drawn from the gauss, css and dog models, and their ground truth."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from prfmap.cli.synth import build_parser, main
from prfmap.io.bids import find_inputs
from prfmap.io.bold import load_bold
from prfmap.synth.config import PRF_MODELS, SynthConfig
from prfmap.synth.dataset import load_truth, make_synthetic_dataset
from prfmap.synth.model import unit_kernels
from prfmap.synth.response import bar_apertures, prf_overlap

ALL = ("gauss", "css", "dog")
LEVELS = {"0": "gauss", "1": "css", "2": "dog"}
EXTRAS = ("truemodel", "n", "sigmasurround", "amplitudesurround")


def digest(root: Path) -> dict[str, str]:
    """sha256 of every file under ``root``, by relative path."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    """Noise- and drift-free datasets of the three models whose second run is pure noise, per space."""
    out = {}
    for space in ("fsaverage5", "fsLR", "T1w"):
        root = tmp_path_factory.mktemp(space) / "bids"
        config = SynthConfig(
            space=space, small=True, runs=2, noise_runs=1, noise=0.0, drift=0.0, seed=1, prf_models=ALL
        )
        make_synthetic_dataset(root, config)
        out[space] = root
    return out


def test_the_default_is_the_gaussian_dataset_byte_for_byte(tmp_path, capsys):
    assert main([str(tmp_path / "default"), "--small", "--space", "T1w"]) == 0
    assert main([str(tmp_path / "gauss"), "--small", "--space", "T1w", "--prf-models", "gauss"]) == 0
    default = digest(tmp_path / "default")
    assert default == digest(tmp_path / "gauss")
    assert not any("truemodel" in name or "sigmasurround" in name for name in default)
    settings = json.loads((tmp_path / "default/derivatives/prfsynth/truth.json").read_text())
    assert "prf_models" not in settings["Settings"] and "PrfModels" not in settings
    assert set(load_truth(tmp_path / "default")).isdisjoint(EXTRAS)


def test_models_leave_the_gaussian_parameters_hrfs_and_noise_as_they_were(tmp_path):
    base = SynthConfig(space="T1w", small=True, runs=1, seed=2)
    make_synthetic_dataset(tmp_path / "gauss", base)
    make_synthetic_dataset(tmp_path / "mixed", SynthConfig(**{**vars(base), "prf_models": ("dog", "css")}))
    gauss, mixed = load_truth(tmp_path / "gauss"), load_truth(tmp_path / "mixed")
    for key in ("x", "y", "sigma", "hrfdelay", "hrfdispersion", "sampletime", "mask", "noise"):
        np.testing.assert_array_equal(gauss[key], mixed[key], err_msg=key)
    assert set(np.unique(mixed["truemodel"][mixed["mask"]])) == {1.0, 2.0}  # no gauss listed: none drawn
    # the same noise and drifts: the units without a pRF carry the very same BOLD
    bold_gauss, _ = load_bold(find_inputs(tmp_path / "gauss")[0])
    bold_mixed, _ = load_bold(find_inputs(tmp_path / "mixed")[0])
    np.testing.assert_array_equal(bold_gauss[~gauss["mask"]], bold_mixed[~gauss["mask"]])


@pytest.mark.parametrize("space", ["fsaverage5", "fsLR", "T1w"])
def test_truth_maps_shares_and_parameter_ranges(mixed, space):
    root = mixed[space]
    truth = load_truth(root)
    m = truth["mask"]
    code = truth["truemodel"]
    assert np.isnan(code[~m]).all() and set(np.unique(code[m])) == {0.0, 1.0, 2.0}
    k = int(m.sum())
    shares = np.bincount(code[m].astype(int), minlength=3) / k
    assert np.all(np.abs(shares - 1 / 3) < 4 * np.sqrt(2 / 9 / k)), shares  # uniform within 4 sd
    css, dog = m & (code == 1), m & (code == 2)
    assert (
        np.isnan(truth["n"][~css]).all() and (0.2 <= truth["n"][css]).all() and (truth["n"][css] <= 0.5).all()
    )
    scale = truth["sigmasurround"][dog] / truth["sigma"][dog]
    assert (
        np.isnan(truth["sigmasurround"][~dog]).all()
        and (scale >= 2 - 1e-5).all()
        and (scale <= 4 + 1e-5).all()
    )
    ratio = truth["amplitudesurround"][dog] / truth["amplitude"][dog]
    assert np.isnan(truth["amplitudesurround"][~dog]).all()
    assert (ratio >= 0.1 - 1e-5).all() and (ratio <= 0.3 + 1e-5).all()
    described = json.loads((root / "derivatives/prfsynth/truth.json").read_text())
    assert described["PrfModels"] == list(ALL) and described["Levels"] == LEVELS
    assert described["Settings"]["css_exponent"] == [0.2, 0.5]
    assert described["PrfModelParameters"]["dog"]["sigmasurround"]["ScaleRange"] == [2.0, 4.0]
    assert described["PrfModelParameters"]["dog"]["surroundratio"]["Range"] == [0.1, 0.3]
    func = root / "derivatives/prfsynth/sub-01/func"
    if space == "fsLR":
        (dscalar,) = func.glob("*_model-gauss_boldmap.dscalar.nii")
        names = list(nib.load(dscalar).header.get_axis(0).name)
        assert set(EXTRAS) <= set(names)
        sidecars = [dscalar.with_name(dscalar.name.replace(".dscalar.nii", ".json"))]
    else:
        ext = ".func.gii" if space == "fsaverage5" else ".nii.gz"
        for label in EXTRAS:
            assert len(list(func.glob(f"*_model-gauss_desc-{label}_boldmap{ext}"))) == (
                2 if space == "fsaverage5" else 1
            )
        sidecars = sorted(func.glob("*_model-gauss_desc-truemodel_boldmap.json"))
        assert len(sidecars) == (2 if space == "fsaverage5" else 1)
    for sidecar in sidecars:
        assert json.loads(sidecar.read_text())["Levels"] == LEVELS


def gaussian_cover(design: np.ndarray, fov: float, x: float, y: float, sigma: float) -> np.ndarray:
    """Written afresh: the aperture-covered part of a unit-integral Gaussian, per frame."""
    n = design.shape[1]
    step = fov / (n - 1)
    cols = -fov / 2 + step * np.arange(n)
    rows = fov / 2 - step * np.arange(n)  # row 0 = top of the screen
    weight = np.exp(-((cols[None, :] - x) ** 2 + (rows[:, None] - y) ** 2) / (2 * sigma**2))
    weight *= step**2 / (2 * np.pi * sigma**2)
    return np.einsum("frc,rc->f", design.astype(np.float64), weight)


@pytest.mark.parametrize("space", ["fsLR", "T1w"])
def test_forward_model_follows_the_definitions_and_the_noise_run_carries_none(mixed, space):
    root = mixed[space]
    truth = load_truth(root)
    runs = find_inputs(root, space=space)
    first, _ = load_bold(runs[0])
    noise_run, _ = load_bold(runs[1])
    signal = noise_run[:, 0] > 0
    assert np.ptp(noise_run, axis=1).max() == 0  # --noise-runs 1: no response, no noise, no drift
    np.testing.assert_array_equal(np.ptp(first[~truth["mask"]], axis=1), 0)
    response = 100 * (first[signal] / noise_run[signal, :1] - 1)
    truth = {k: v[signal] for k, v in truth.items()}
    stim = np.asarray(nib.load(root / "stimuli/bars.nii.gz").dataobj)[:, :, 0, :]
    design = np.moveaxis(stim, -1, 0).astype(np.float64)
    checked = []
    for code, model in enumerate(PRF_MODELS):
        for unit in np.flatnonzero(truth["mask"] & (truth["truemodel"] == code))[:4]:
            x, y, sigma = (float(truth[k][unit]) for k in ("x", "y", "sigma"))
            g = gaussian_cover(design, 20.0, x, y, sigma)
            if model == "css":
                g = g ** float(truth["n"][unit])
            elif model == "dog":
                ratio = truth["amplitudesurround"][unit] / truth["amplitude"][unit]
                g = g - ratio * gaussian_cover(design, 20.0, x, y, float(truth["sigmasurround"][unit]))
            amplitude = truth["amplitude"][unit] / (1 + truth["baseline"][unit] / 100)
            kernel = unit_kernels(
                1.5,
                np.array([truth["sampletime"][unit]]),
                np.array([truth["hrfdelay"][unit]]),
                np.array([truth["hrfdispersion"][unit]]),
            )[0]
            expected = amplitude * np.convolve(g, kernel)[: len(g)]
            np.testing.assert_allclose(response[unit], expected, atol=2e-3 * np.abs(expected).max())
            checked.append(model)
    assert sorted(set(checked)) == sorted(PRF_MODELS)


def test_overlap_matches_the_engines_css_and_dog_models():
    from keras import ops

    from prfmap.engine.models import get_model
    from prfmap.engine.models.transforms import EPS
    from prfmap.engine.stimulus import Stimulus, StimulusTensors

    design = bar_apertures(SynthConfig(small=True))
    stim = Stimulus(design, fov_deg=20.0)
    pixels, px, py = stim.stimulated
    tensors = StimulusTensors(
        *(ops.convert_to_tensor(np.asarray(a, np.float64)) for a in (pixels.T, px, py)), stim.pixel_size**2
    )
    x, y, sigma = np.array([1.0, -3.0, 4.0]), np.array([2.0, 0.5, -5.0]), np.array([0.8, 1.5, 2.2])
    n, scale, ratio = np.array([0.3, 0.45, 0.25]), np.array([2.5, 3.5, 2.1]), np.array([0.15, 0.28, 0.11])
    params = {
        "x": x,
        "y": y,
        "sigma": sigma,
        "n": n,
        "sigma_surround": sigma * scale,
        "surround_ratio": ratio,
    }
    for code, model, theta in ((1, "css", (x, y, sigma, n)), (2, "dog", (x, y, sigma, scale, ratio))):
        engine = np.asarray(
            get_model(model).neural(ops.convert_to_tensor(np.stack(theta, 1)), tensors, False)
        )
        mine = prf_overlap(design, 20.0, {**params, "model": np.full(3, code)})
        # the engine floors the Gaussian's overlap at EPS before the power n: EPS ** n where it is ~0
        np.testing.assert_allclose(mine, engine[0], atol=EPS ** n.min() + 1e-9)


def test_config_validates_and_orders_the_models():
    assert SynthConfig(prf_models=("dog", "gauss", "dog")).prf_models == ("gauss", "dog")
    assert SynthConfig(prf_models="css").prf_models == ("css",)
    assert not SynthConfig().beyond_gauss and SynthConfig(prf_models=("css",)).beyond_gauss
    for bad in (
        {"prf_models": ("foo",)},
        {"prf_models": ()},
        {"css_exponent": (0.0, 0.5)},
        {"css_exponent": (0.5, 0.2)},
        {"dog_surround_scale": (1.0, 3.0)},
        {"dog_surround_ratio": (0.1, 1.0)},
        {"dog_surround_ratio": (0.1,)},
    ):
        with pytest.raises(ValueError):
            SynthConfig(**bad)


def test_cli_models_option(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main([str(out), "--small", "--space", "T1w", "--runs", "1", "--prf-models", "css", "gauss"]) == 0
    described = json.loads((out / "derivatives/prfsynth/truth.json").read_text())
    assert described["PrfModels"] == ["gauss", "css"] and "dog" not in described["PrfModelParameters"]
    truth = load_truth(out)
    assert np.isnan(truth["sigmasurround"]).all() and np.isfinite(truth["n"]).any()
    capsys.readouterr()
    for argv, match in (
        ([str(tmp_path / "x"), "--prf-models", "foo"], "invalid choice: 'foo'"),
        ([str(tmp_path / "x"), "--prf-models"], "expected at least one argument"),
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 64  # prfmap's usage code, as for every other bad option
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1
    helptext = build_parser().format_help()
    assert "--prf-models MODEL [MODEL ...]" in helptext and "{gauss,css,dog}" not in helptext
