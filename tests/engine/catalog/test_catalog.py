"""The model catalogue: one source for models, parameters, units and bounds; a new model or refiner is one
class and one registry entry (tests/toys.py)."""

import dataclasses
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from keras import ops

import toys
from conftest import TR, random_params
from prfmap.cli.parser import build_parser
from prfmap.derivatives import map_sidecar
from prfmap.engine import Stimulus, catalog, fit_prf, predict
from prfmap.engine.fit.stages import RefinePlan
from prfmap.engine.models import get_model, reported_parameters
from prfmap.engine.solvers.levenberg_marquardt import LevenbergMarquardt

APP = str(Path(__file__).resolve().parents[3] / "app")


@pytest.mark.parametrize("name", list(catalog.MODELS))
def test_every_model_reports_what_its_catalogue_entry_lists(name):
    assert reported_parameters(get_model(name)) == catalog.MODELS[name].parameters
    assert set(catalog.MODELS[name].fixed) <= set(get_model(name).names)


def test_the_catalogue_names_every_model_and_refiner():
    assert list(catalog.MODELS) == ["gauss", "css", "dog", "dn"]
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


def test_one_resolver_names_every_entrys_implementation():
    """Models, refiners and noise models name their classes as ``"module:Class"`` paths, resolved by
    ``catalog.import_path`` alone; a class given as itself is itself."""
    from prfmap.engine.models import implementation
    from prfmap.engine.models.gaussians import CSSModel
    from prfmap.engine.solvers import solver_class

    assert catalog.import_path("prfmap.engine.models.gaussians:CSSModel") is CSSModel
    assert catalog.import_path(CSSModel) is CSSModel
    assert implementation(catalog.MODELS["css"]) is CSSModel
    assert solver_class(catalog.REFINERS["lm"]) is LevenbergMarquardt
    for bad in ("prfmap.engine.models.gaussians", "prfmap.engine.models.gaussians:", ":CSSModel"):
        with pytest.raises(ValueError, match="module:Name"):
            catalog.import_path(bad)
    with pytest.raises(AttributeError):
        catalog.import_path("prfmap.engine.models.gaussians:NoSuchModel")


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
    """Whatever the internal values the refiners' projection allows (extremes included), the extras a
    model reports lie within the bounds, open ends (``n > 0``, a surround wider than the centre)
    strictly: the transforms bound some (``sigmoid``, ``scale``), the projection the others (``exp``)."""
    m = get_model(model)
    u = np.random.default_rng(1).normal(scale=8.0, size=(200, len(m.params)))
    u = np.concatenate([u, np.full((1, len(m.params)), -1e3), np.full((1, len(m.params)), 1e3)])
    box = m.bounds(stim.scales)
    u = np.clip(u, box.lower, box.upper)
    theta = np.asarray(ops.convert_to_numpy(m.natural(ops.convert_to_tensor(u, dtype="float32"))[0]))
    reported = m.report(theta, np.ones(len(u)))
    extras = set(reported) - {"x", "y", "sigma"}
    for key in extras:
        bound = catalog.PARAMETERS[key].bound
        low, high = bound.resolve({"sigma": reported["sigma"]})
        above = reported[key] >= low if bound.lower.inclusive else reported[key] > low
        closed = bound.upper is None or bound.upper.inclusive
        below = reported[key] <= high * (1 + 1e-6) if closed else reported[key] < high  # float32 exp
        assert np.all(above & below), key


@pytest.fixture
def toy_model():
    """The toy model and refiner registered in the catalogue (tests/toys.py), removed afterwards."""
    with toys.registered():
        yield get_model("toysat")


def test_a_fifth_model_needs_only_a_model_class_and_a_catalogue_entry(toy_model, stim, tmp_path):
    bids = tmp_path / "bids"
    bids.mkdir()
    (bids / "dataset_description.json").write_text(json.dumps({"Name": "x", "BIDSVersion": "1.9.0"}))
    argv = [str(bids), str(tmp_path / "out"), "participant", "--model", "toysat", "--noise-model", "toyarw"]
    opts = build_parser().parse_args(argv)
    assert opts.model == ["toysat"] and opts.noise_model == "toyarw"  # the registries are the choices

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


def test_a_sixth_model_written_against_the_contract_alone_is_fitted(toy_model, stim):
    """tests/toys.py's Student-t pRF: a PRFModel subclass with no Gaussian inside, its own kernel,
    Jacobian and ``scale``-transformed extra, named by its "module:Class" path: fitted end to end."""
    from prfmap.engine.models.gaussians import GaussModel

    model = get_model("toystudent")
    assert isinstance(model, toys.StudentModel) and not isinstance(model, GaussModel)
    assert catalog.MODELS["toystudent"].implementation == "toys:StudentModel"
    rng = np.random.default_rng(5)
    p = toys.student_params(30, rng)
    data = predict(p, stim, TR, "toystudent")
    gauss = predict({k: v for k, v in p.items() if k != "tail"}, stim, TR, "gauss")
    assert np.median(np.abs(data - gauss).max(axis=1) / np.abs(gauss).max(axis=1)) > 0.05  # not a Gaussian
    res = fit_prf(data, stim, TR, model="toystudent")
    assert res.settings.model == "toystudent" and res.settings.units_refined == 30
    assert np.median(np.hypot(res.params["x"] - p["x"], res.params["y"] - p["y"])) < 0.01
    assert np.median(np.abs(res.params["sigma"] - p["sigma"]) / p["sigma"]) < 0.02
    assert np.median(np.abs(res.params["tail"] - p["tail"]) / p["tail"]) < 0.05
    assert np.median(res.r2) > 0.99 and "tail" in res.maps()
    sidecar = map_sidecar("tail", "toystudent", res.settings, {})
    assert sidecar["ModelDescription"] == "heavy-tailed (Student-t) pRF (a test of prfmap)"
    assert sidecar["Bounds"] == "1 < tail <= 20"


def test_a_model_must_report_what_its_entry_lists(toy_model):
    catalog.MODELS["wrong"] = dataclasses.replace(
        toys.TOY_MODEL, name="wrong", parameters=("x", "y", "sigma", "amplitude", "baseline")
    )
    try:
        with pytest.raises(ValueError, match="reports"):
            get_model("wrong")
    finally:
        catalog.MODELS.pop("wrong")
    with pytest.raises(ValueError, match="unknown model 'nomodel'"):
        get_model("nomodel")
    with pytest.raises(ValueError, match="implementation"):
        catalog.register_model(
            catalog.ModelSpec("noclass", "d", "c", ("x", "y", "sigma", "amplitude", "baseline"))
        )
    with pytest.raises(ValueError, match="already exists"):
        catalog.register_model(toys.TOY_MODEL)


def test_a_third_refiner_is_dispatched_through_its_entry(toy_model, stim):
    rng = np.random.default_rng(4)
    p = random_params("gauss", 24, rng)
    data = predict(p, stim, TR, "gauss")
    res = fit_prf(data, stim, TR, model="gauss", refine="toygd")
    assert res.settings.refine == "toygd" and res.settings.max_iter == toys.TOY_REFINER.max_iter
    assert res.settings.iterations > 0 and res.settings.units_refined == 24
    grid = fit_prf(data, stim, TR, model="gauss", refine="none")
    assert np.median(res.loss) < np.median(grid.loss)  # it refines: lower cost than the grid's


def test_tol_zero_means_zero() -> None:
    problem = SimpleNamespace(model=get_model("gauss"), dtype="float32")
    lm = catalog.get_refiner("lm")
    assert RefinePlan(lm, 1.0, tol=0.0).solver(problem).tol == 0.0  # not "0 means the default"
    assert RefinePlan(lm, 1.0).solver(problem).tol == lm.tol
    assert RefinePlan(lm, 1.0, max_iter=0).budget == 0 and RefinePlan(lm, 1.0).budget == lm.max_iter
    sgd = RefinePlan(catalog.get_refiner("sgd"), 1.0, options={"learning_rate": 0.2})
    assert sgd.solver(problem).learning_rate == 0.2
    with pytest.raises(
        ValueError, match="refiner 'sgd' has no option 'unknown' \\(its options: learning_rate\\)"
    ):
        RefinePlan(catalog.get_refiner("sgd"), 1.0, options={"learning_rate": 0.2, "unknown": 1})
    with pytest.raises(
        ValueError, match="refiner 'lm' has no option 'learning_rate' \\(its options: none\\)"
    ):
        RefinePlan(lm, 1.0, options={"learning_rate": 0.2})
    # a solver is its own compile key: equal fields, equal keys; any field changed, another key
    assert LevenbergMarquardt(problem.model, "float32", 1e-4) == RefinePlan(lm, 1.0).solver(problem)
    assert hash(LevenbergMarquardt(problem.model, "float32", 1e-4, damping_up=4.0)) != hash(
        RefinePlan(lm, 1.0).solver(problem)
    )


def test_stimulus_scales(stim):
    small = Stimulus(np.ones((3, 5, 5), dtype=np.float32), 8.0)
    assert small.scales == {"radius": pytest.approx(np.hypot(4, 4)), "fov": 8.0, "pixel": 2.0}


def test_a_limit_is_stated_in_words_from_its_value() -> None:
    """The report and the status sidecar say the engine's limits from the numbers the engine applies."""
    assert [catalog.share_of(f) for f in (0.2, 0.1, 0.25, 1.0, 0.3)] == [
        "a fifth of ",
        "a tenth of ",
        "a quarter of ",
        "",
        "0.3 of ",
    ]
    text = catalog.STATUS_FLAGS[catalog.STATUS_BITS["uncertain"]][1]
    assert f"exceeds {catalog.share_of(catalog.CENTRE_SE_LIMIT)}the stimulated radius" in text


def test_polar_angle_and_eccentricity_have_one_definition() -> None:
    """The participant's maps, their standard errors' record, the report and the group level all use
    catalog.visual_field_polar: (-180, 180] degrees from the right horizontal meridian."""
    x = np.array([1.0, 0.0, -1.0, -1.0, 3.0])
    y = np.array([0.0, 2.0, 0.0, -0.0, -4.0])
    polar, eccentricity = catalog.visual_field_polar(x, y)
    np.testing.assert_allclose(polar, [0.0, 90.0, 180.0, 180.0, np.degrees(np.arctan2(-4, 3))])
    np.testing.assert_allclose(eccentricity, [1.0, 2.0, 1.0, 1.0, 5.0])
