"""The per-vertex comparison of models (prfmap.participant.comparison): the test of what a model adds
to the Gaussian on held-out runs, its error rate without a difference, identifiability, and the
``model-best`` maps of a participant fitted with several models."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from scipy.signal import lfilter

from prfmap.cli.config import build_config, fitted_models
from prfmap.cli.parser import build_parser
from prfmap.engine import FitResult
from prfmap.io.bids import find_runs
from prfmap.participant.comparison import (
    ALPHA,
    added_prediction_z,
    compare_models,
    compare_outcomes,
    free_parameters,
    model_code,
    z_limit,
)
from prfmap.participant.crossval import CrossValidation, Fold, null_variance
from prfmap.participant.fit import fit_models
from prfmap.participant.load import load_fit
from prfmap.participant.plan import plan_fits
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset

UNITS, FRAMES = 4000, 150


def _ar1(rng: np.random.Generator, shape: tuple[int, int], rho: float = 0.4) -> np.ndarray:
    return lfilter([1.0], [1.0, -rho], rng.normal(size=shape), axis=1)


def _validation(folds: list[tuple[np.ndarray, np.ndarray]]) -> CrossValidation:
    """A cross-validation of the given (held-out data, prediction) pairs, scored as cross_validate does."""
    cross = sum(np.sum(y * p, axis=1) for y, p in folds)
    yy = sum(np.sum(y * y, axis=1) for y, _ in folds)
    pp = sum(np.sum(p * p, axis=1) for _, p in folds)
    c = cross / np.sqrt(yy * pp)
    z = cross / np.sqrt(sum(null_variance(y, p) for y, p in folds))
    fold_list = [Fold(i, tuple(j for j in range(len(folds)) if j != i)) for i in range(len(folds))]
    return CrossValidation(np.sign(c) * c**2, c, z, fold_list, held_out=folds)


def _series(rng: np.random.Generator) -> np.ndarray:
    """Smooth, response-like series (AR(1) of ρ 0.9), one per unit."""
    return _ar1(rng, (UNITS, FRAMES), 0.9)


def test_the_added_prediction_z_is_standard_normal_when_the_model_adds_nothing():
    """Data = the Gaussian's prediction + autocorrelated noise; the other model's prediction differs by
    what it fitted to its training runs' noise: z ~ N(0, 1), and the limit is passed at the error rate."""
    rng = np.random.default_rng(0)
    gauss, other = [], []
    for _ in range(2):
        p_gauss = _series(rng)
        y = 0.5 * p_gauss + _ar1(rng, (UNITS, FRAMES))
        p_other = p_gauss + 0.3 * _series(rng)
        gauss.append((y, p_gauss))
        other.append((y, p_other))
    z = added_prediction_z(_validation(gauss), _validation(other))
    assert abs(np.mean(z)) < 0.1 and 0.85 < np.std(z) < 1.15, (np.mean(z), np.std(z))
    limit = z_limit(4)
    assert limit == pytest.approx(2.128, abs=1e-3)  # one-sided 0.05 / 3
    rate = np.mean(z > limit)
    assert rate < ALPHA / 3 + 3 * np.sqrt(ALPHA / 3 / UNITS), rate


def test_the_added_prediction_z_finds_what_the_gaussian_misses():
    """Data with a component the Gaussian's prediction lacks and the other model's holds: z passes."""
    rng = np.random.default_rng(1)
    gauss, other, unrelated = [], [], []
    for _ in range(2):
        p_gauss, extra = _series(rng), _series(rng)
        y = p_gauss + 0.5 * extra + 2.0 * _ar1(rng, (UNITS, FRAMES))
        gauss.append((y, p_gauss))
        other.append((y, p_gauss + 0.5 * extra))
        unrelated.append((y, p_gauss - 0.5 * extra))  # the opposite of what the data hold
    z = added_prediction_z(_validation(gauss), _validation(other))
    assert np.mean(z > z_limit(2)) > 0.95
    assert np.mean(added_prediction_z(_validation(gauss), _validation(unrelated)) > z_limit(2)) == 0
    # only some folds: the second fold alone
    z_one = added_prediction_z(_validation(gauss), _validation(other), folds=[1])
    assert np.median(z_one) < np.median(z) and np.mean(z_one > z_limit(2)) > 0.8


def _fit_of(model: str, n_units: int) -> FitResult:
    """A fit of all runs whose extras make it identifiable at every unit (for :func:`compare_models`)."""
    params = {"x": np.zeros(n_units)}
    params |= {"css": {"n": np.full(n_units, 0.4)}, "dn": {"amplitude_norm": np.ones(n_units)}}.get(model, {})
    return FitResult(model, params, np.zeros(n_units), np.zeros(n_units))


@pytest.mark.parametrize("dn_adds", [False, True])
def test_a_richer_model_takes_a_unit_from_a_simpler_winner_only_with_evidence(dn_adds: bool):
    """CSS predicts a component the Gaussian lacks. DN predicts it too, and either nothing more (its
    prediction differs by what it fitted to noise) or a second real component: DN wins only then."""
    rng = np.random.default_rng(2)
    folds = {m: [] for m in ("gauss", "css", "dn")}
    for _ in range(2):
        p_gauss, extra, second = _series(rng), _series(rng), _series(rng)
        y = p_gauss + 0.6 * extra + (0.6 * second if dn_adds else 0) + 1.5 * _ar1(rng, (UNITS, FRAMES))
        p_css = p_gauss + 0.6 * extra
        p_dn = p_css + (0.6 * second if dn_adds else 0.1 * _series(rng))
        for model, p in (("gauss", p_gauss), ("css", p_css), ("dn", p_dn)):
            folds[model].append((y, p))
    validations = {m: _validation(f) for m, f in folds.items()}
    results = {m: _fit_of(m, UNITS) for m in validations}
    comparison = compare_models(results, validations)
    won = {m: np.mean(comparison.winner == model_code(m)) for m in validations}
    assert comparison.models == ("gauss", "css", "dn") and [
        free_parameters(m) for m in comparison.models
    ] == [5, 6, 8]
    both_beat_gauss = np.mean(
        (comparison.z["css"] > comparison.z_limit) & (comparison.z["dn"] > comparison.z_limit)
    )
    assert both_beat_gauss > 0.8
    if dn_adds:
        assert won["dn"] > 0.8, won
    else:
        # DN's cvr2 tops CSS's at many units by chance; it wins only at the test's error rate
        assert np.mean(validations["dn"].cvr2 > validations["css"].cvr2) > 0.2
        assert won["css"] > 0.8 and won["dn"] <= ALPHA / 2 + 3 * np.sqrt(ALPHA / 2 / UNITS), won


def test_the_models_asked_for():
    assert fitted_models(["gauss"]) == ("gauss",)
    assert fitted_models(["css"]) == ("css",)  # one model: fitted alone, as before
    assert fitted_models(["dog", "css"]) == ("gauss", "css", "dog")  # the Gaussian joins a comparison
    assert fitted_models(["all"]) == ("gauss", "css", "dog", "dn")
    assert [model_code(m) for m in ("gauss", "css", "dog", "dn")] == [0, 1, 2, 3]


def _fit(bids: Path, out: Path, *options: str):
    work = out.with_name(f"{out.name}-work")
    config = build_config(
        build_parser().parse_args([str(bids), str(out), "participant", "--work-dir", str(work), *options])
    )
    (plan,) = plan_fits(find_runs(config.inputs, work_dir=work), config.fit.model)
    outcomes = fit_models(load_fit(plan, config, lambda *a: None), config, lambda *a: None)
    return config, outcomes


@pytest.fixture(scope="module")
def gaussian_participants(tmp_path_factory):
    """Small Gaussian-only T1w participants with two runs, fitted with the Gaussian and CSS: a normal one,
    and one whose second run is pure noise."""
    root = tmp_path_factory.mktemp("compare")
    out = {}
    for name, noise_runs in (("normal", 0), ("noise", 1)):
        bids = make_synthetic_dataset(
            root / name / "bids", SynthConfig(space="T1w", small=True, runs=2, noise_runs=noise_runs, seed=5)
        )
        out[name] = (bids, *_fit(bids, root / name / "out", "--model", "gauss", "css"))
    return out


def test_gaussian_vertices_keep_the_gaussian(gaussian_participants):
    """A CSS model fitted to Gaussian pRFs gains nothing on held-out runs: the Gaussian keeps ≥ 95 %."""
    bids, _, outcomes = gaussian_participants["normal"]
    compared = compare_outcomes(outcomes)
    assert compared is not None and compared.comparison.models == ("gauss", "css")
    prf = load_truth(bids)["mask"]
    winner, cvr2 = compared.comparison.winner, compared.comparison.cvr2
    good = prf & (cvr2 >= 0.2)
    assert good.sum() > 50
    assert np.mean(winner[good] == model_code("gauss")) >= 0.95
    # the shared work: one HRF and noise model per fit and fold, the CSS seeded from the Gaussian
    gauss, css = (o.result.settings for o in outcomes)
    assert css.hrf_model == gauss.hrf_model and css.grid_points == 0


def test_a_pure_noise_held_out_run_is_predicted_by_no_model(gaussian_participants):
    """Holding out a run of pure noise: every model's cvr2 there is about 0, and a model other than the
    Gaussian wins no more vertices than the test's error rate allows."""
    bids, _, outcomes = gaussian_participants["noise"]
    truth = load_truth(bids)
    noise_fold = 1  # the second run carries no responses
    for outcome in outcomes:
        fold_cvr2 = outcome.cv.fold_cvr2([noise_fold])
        assert np.nanmedian(np.abs(fold_cvr2[truth["mask"]])) <= 0.02, outcome.result.model
    compared = compare_outcomes(outcomes)
    results = {o.result.model: o.result for o in outcomes}
    from prfmap.participant.comparison import compare_models

    on_noise = compare_models(results, {o.result.model: o.cv for o in outcomes}, folds=[noise_fold])
    fitted = np.isfinite(on_noise.winner)
    rate = np.mean(on_noise.winner[fitted] != model_code("gauss"))
    n = int(fitted.sum())
    assert rate <= ALPHA + 3 * np.sqrt(ALPHA * (1 - ALPHA) / n), (rate, n)
    assert compared is not None


def test_the_comparison_maps_are_written_with_their_levels(gaussian_participants, tmp_path):
    from prfmap.participant.outputs import write_comparison

    _, config, outcomes = gaussian_participants["normal"]
    compared = compare_outcomes(outcomes)
    files = {p.name: p for p in write_comparison(compared, config, tmp_path)}
    stem = "sub-01_task-prf_space-T1w_model-best"
    for label in ("winner", "cvr2", "deltacvr2"):
        assert f"{stem}_desc-{label}_boldmap.nii.gz" in files
    assert f"{stem}_stat-z_desc-deltacvr2_boldmap.nii.gz" in files
    sidecar = json.loads(files[f"{stem}_desc-winner_boldmap.json"].read_text())
    assert sidecar["Levels"] == {"0": "gauss", "1": "css"} and sidecar["ModelsCompared"] == ["gauss", "css"]
    assert sidecar["Comparison"]["Alpha"] == ALPHA and "held-out" in sidecar["Comparison"]["Definition"]
    delta = json.loads(files[f"{stem}_desc-deltacvr2_boldmap.json"].read_text())
    assert delta["Statistics"]["z"]["File"] == f"{stem}_stat-z_desc-deltacvr2_boldmap.nii.gz"
    winner = np.asarray(nib.load(files[f"{stem}_desc-winner_boldmap.nii.gz"]).dataobj)
    values = set(np.unique(winner[np.isfinite(winner)]).tolist())
    assert values <= {0.0, 1.0} and 0.0 in values
