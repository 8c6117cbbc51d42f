"""The model catalogue: one source for models, parameters, units and bounds; a new model touches only
``models.py`` and ``catalog.py``."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import TR, random_params
from keras import ops

from prfmap.cli.parser import build_parser
from prfmap.derivatives import map_sidecar
from prfmap.engine import Stimulus, catalog, fit_prf, predict
from prfmap.engine.models import MODELS, GaussModel, Param, get_model, register_model, reported_parameters

APP = str(Path(__file__).resolve().parents[2] / "app")


@pytest.mark.parametrize("name", list(catalog.MODELS))
def test_every_model_reports_what_its_catalogue_entry_lists(name):
    assert reported_parameters(get_model(name)) == catalog.MODELS[name].parameters
    assert set(catalog.MODELS[name].fixed) <= set(get_model(name).names)


def test_the_catalogue_and_the_models_name_the_same_models():
    assert list(catalog.MODELS) == list(MODELS) == ["gauss", "css", "dog", "dn"]
    assert list(catalog.REFINERS) == ["lm", "sgd", "none"]


def test_labels_are_unique_bids_labels_and_units_one_spelling():
    labels = [p.label for p in catalog.PARAMETERS.values()]
    assert len(set(labels)) == len(labels)
    assert catalog.PARAMETERS["polar_angle"].label == "polarangle"
    assert {p.units for p in catalog.PARAMETERS.values()} <= set(catalog.UNITS)
    assert catalog.PARAMETERS["amplitude"].units == "%"
    with pytest.raises(ValueError, match="units"):
        catalog.Parameter("gain", "percent signal change", "a gain")
    with pytest.raises(ValueError, match="alphanumeric"):
        catalog.ModelSpec("my-model", "d", "c", ("x",))


def test_fit_maps_carry_catalogue_labels(stim):
    p = random_params("dog", 4, np.random.default_rng(0))
    res = fit_prf(predict(p, stim, TR, "dog"), stim, TR, model="dog", refine="none")
    expected = catalog.MODELS["dog"].parameters + catalog.DERIVED + ("status",)
    assert set(res.maps()) == {catalog.PARAMETERS[k].label for k in expected}


def test_catalogue_is_read_without_keras():
    code = (
        f"import sys; sys.path.insert(0, {APP!r}); import prfmap.engine.catalog, prfmap.cli.parser;"
        "print(any(m in sys.modules for m in ('keras', 'jax', 'torch', 'tensorflow')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_bounds_resolve_against_the_stimulus_and_other_parameters(stim):
    scales = stim.scales
    assert set(scales) == set(catalog.STIMULUS_SCALES)
    assert scales["radius"] == pytest.approx(10.0, abs=stim.pixel_size)
    bounds = catalog.model_bounds("dog")
    low, high = bounds["eccentricity"].resolve(scales)
    assert (low, high) == (0.0, catalog.CENTRE_RADII * scales["radius"])
    assert bounds["sigma"].resolve(scales) == (scales["pixel"], scales["fov"])
    sigma = np.array([0.5, 2.0])
    low, high = bounds["sigma_surround"].resolve({"sigma": sigma})
    np.testing.assert_array_equal(low, sigma * catalog.SURROUND_SCALE[0])
    np.testing.assert_array_equal(high, sigma * catalog.SURROUND_SCALE[1])
    assert bounds["sigma_surround"].references() == ("sigma", "sigma")
    assert catalog.PARAMETERS["n"].bound.describe("n") == "0 < n <= 1"
    assert catalog.PARAMETERS["baseline"].bound.describe() == "unbounded"
    assert bounds["amplitude_surround"].resolve() == (0.0, np.inf)
    with pytest.raises(KeyError, match="radius"):
        bounds["x"].resolve({})


@pytest.mark.parametrize("model", ["css", "dog", "dn"])
def test_model_transforms_keep_extras_inside_their_catalogue_bounds(model, stim):
    """Whatever the internal values (extremes included), the extras a model reports lie within the bounds,
    open ends (``n > 0``, a surround wider than the centre) strictly."""
    m = get_model(model)
    u = np.random.default_rng(1).normal(scale=8.0, size=(200, len(m.params)))
    u = np.concatenate([u, np.full((1, len(m.params)), -1e3), np.full((1, len(m.params)), 1e3)])
    theta = np.asarray(ops.convert_to_numpy(m.natural(ops.convert_to_tensor(u, dtype="float32"))[0]))
    reported = m.report(theta, np.ones(len(u)))
    extras = set(reported) - {"x", "y", "sigma"}
    for key in extras:
        bound = catalog.PARAMETERS[key].bound
        low, high = bound.resolve({"sigma": reported["sigma"]})
        above = reported[key] >= low if bound.lower.inclusive else reported[key] > low
        closed = bound.upper is None or bound.upper.inclusive
        below = reported[key] <= high if closed else reported[key] < high
        assert np.all(above & below), key


class SaturatingModel(GaussModel):
    """A toy fifth model: the Gaussian response saturates, ``s / (1 + k·s)`` with ``k`` > 0."""

    name = "toysat"
    params = GaussModel.params + (Param("saturation", "exp", 0.5),)

    def neural(self, theta, stim, jacobian):
        s = super().neural(theta, stim, jacobian)
        denom = 1.0 + theta[:, 3][:, None] * s[0]
        out = s[0] / denom
        if not jacobian:
            return out[None]
        d_s = 1.0 / (denom * denom)
        return ops.concatenate([out[None], s[1:] * d_s[None], (-s[0] * s[0] * d_s)[None]], axis=0)

    def report(self, theta, amplitude):
        return {**super().report(theta, amplitude), "saturation": theta[:, 3]}


@pytest.fixture
def toy_model():
    """Register the toy model in the catalogue and the models, and remove it afterwards."""
    param = catalog.register_parameter(
        catalog.Parameter(
            "saturation", "1", "saturation constant of the toy model", catalog.Bound(catalog.Limit(0.0))
        )
    )
    catalog.register_model(
        catalog.ModelSpec(
            "toysat",
            "saturating Gaussian pRF",
            "a test of prfmap",
            ("x", "y", "sigma", "saturation", "amplitude", "baseline"),
        )
    )
    model = register_model(SaturatingModel())
    yield model
    for table, key in ((MODELS, "toysat"), (catalog.MODELS, "toysat"), (catalog.PARAMETERS, param.key)):
        table.pop(key)


def test_a_fifth_model_needs_only_a_model_class_and_a_catalogue_entry(toy_model, stim, tmp_path):
    bids = tmp_path / "bids"
    bids.mkdir()
    (bids / "dataset_description.json").write_text(json.dumps({"Name": "x", "BIDSVersion": "1.9.0"}))
    opts = build_parser().parse_args([str(bids), str(tmp_path / "out"), "participant", "--model", "toysat"])
    assert opts.model == "toysat"

    rng = np.random.default_rng(3)
    p = random_params("gauss", 40, rng) | {"saturation": rng.uniform(0.5, 2.0, 40)}
    res = fit_prf(predict(p, stim, TR, "toysat"), stim, TR, model="toysat")
    assert np.median(np.hypot(res.params["x"] - p["x"], res.params["y"] - p["y"])) < 0.01
    assert np.median(np.abs(res.params["saturation"] - p["saturation"]) / p["saturation"]) < 0.01
    assert "saturation" in res.maps()

    sidecar = map_sidecar("saturation", "toysat", res.settings, {})
    assert sidecar["ModelDescription"] == "saturating Gaussian pRF (a test of prfmap)"
    assert (sidecar["Units"], sidecar["Description"]) == ("1", "saturation constant of the toy model")
    combined = map_sidecar(None, "toysat", res.settings, {"MapNames": list(res.maps())})
    assert combined["Parameters"]["saturation"]["Units"] == "1"
    assert set(combined["Parameters"]) == set(res.maps())


def test_a_model_must_report_what_its_entry_lists(toy_model):
    MODELS.pop("toysat")
    catalog.MODELS["toysat"] = catalog.ModelSpec(
        "toysat", "d", "c", ("x", "y", "sigma", "amplitude", "baseline")
    )
    with pytest.raises(ValueError, match="reports"):
        register_model(SaturatingModel())
    MODELS["toysat"] = toy_model
    with pytest.raises(ValueError, match="unknown model 'nomodel'"):
        register_model(type("NoEntry", (GaussModel,), {"name": "nomodel"})())


def test_stimulus_scales(stim):
    small = Stimulus(np.ones((3, 5, 5), dtype=np.float32), 8.0)
    assert small.scales == {"radius": pytest.approx(np.hypot(4, 4)), "fov": 8.0, "pixel": 2.0}
