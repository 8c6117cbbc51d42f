"""Cross-validated r² (prfmap.participant.crossval): folds, the definition, cvr2 on synthetic data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import pearsonr, spearmanr

from prfmap.cli.config import build_config
from prfmap.cli.parser import build_parser
from prfmap.derivatives import OutputKey
from prfmap.engine import FitResult, catalog
from prfmap.errors import BadDataError
from prfmap.group import combine, run_group, statistic_metadata
from prfmap.io.bids import find_runs
from prfmap.io.geometry import GiftiGeometry
from prfmap.participant.crossval import Fold, RunSet, cross_validate, leave_one_run_out, reproducible
from prfmap.participant.fit import fit_loaded, mark_not_reproducible
from prfmap.participant.load import load_fit
from prfmap.participant.outputs import write_outcome
from prfmap.participant.plan import plan_fits
from prfmap.participant.preprocess import PreprocessedRun, dct_basis
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset

N, FRAMES, TR = 60, 120, 1.5


def test_folds_leave_each_run_out():
    assert leave_one_run_out(1) == [] and leave_one_run_out(0) == []
    assert leave_one_run_out(3) == [Fold(0, (1, 2)), Fold(1, (0, 2)), Fold(2, (0, 1))]


def _runs(rng: np.random.Generator, signal: np.ndarray, n_runs: int) -> list[PreprocessedRun]:
    nuisance = dct_basis(FRAMES, TR, 0.01)
    q = np.column_stack([np.ones(FRAMES), nuisance])
    q, _ = np.linalg.qr(q)
    out = []
    for _ in range(n_runs):
        y = signal + rng.normal(0, 1.0, signal.shape)
        out.append(PreprocessedRun((y - (y @ q) @ q.T).astype(np.float32), nuisance))
    return out


def test_cvr2_is_the_signed_squared_correlation_over_all_held_out_runs():
    rng = np.random.default_rng(0)
    t = np.arange(FRAMES)
    signal = np.tile(2 * np.sin(2 * np.pi * t / 20), (N, 1))
    runs = _runs(rng, signal, 3)
    runs[2].data[5] = np.nan  # unit 5 has no data in run 3: that fold is left out for it
    shape = {"prediction": signal.copy()}
    shape["prediction"][20:40] *= -1  # anti-predicted units
    shape["prediction"][40:] = rng.normal(0, 2, (N - 40, FRAMES))  # unrelated predictions
    drift = np.outer(np.ones(N), np.linspace(-3, 3, FRAMES))  # removed with the held-out nuisance

    def fit(training, stim, fold):
        assert training.data.shape == (N, FRAMES) and len(fold.training) == 2
        return FitResult("gauss", {}, np.zeros(N), np.zeros(N))

    def predict(result, stim):
        return 0.5 * shape["prediction"] + drift  # gain 0.5: cvr2 fits one gain

    cv = cross_validate(
        RunSet(runs, ["a"] * 3, {"a": np.zeros((FRAMES, 2, 2))}, fov_deg=10.0), fit=fit, predict=predict
    )
    assert [f.held_out for f in cv.folds] == [0, 1, 2] and len(cv.seconds) == 3
    # the same number computed by hand from the projected runs
    q, _ = np.linalg.qr(np.column_stack([np.ones(FRAMES), runs[0].nuisance]))
    p = 0.5 * shape["prediction"] + drift
    p = p - (p @ q) @ q.T
    expected = []
    for unit in range(N):
        folds = [r.data[unit].astype(np.float64) for r in runs if np.isfinite(r.data[unit]).all()]
        cross = sum(y @ p[unit] for y in folds)
        c = cross / np.sqrt(sum(y @ y for y in folds) * len(folds) * (p[unit] @ p[unit]))
        expected.append(np.sign(c) * c**2)
    np.testing.assert_allclose(cv.cvr2, expected, rtol=1e-6)
    snr = np.var(signal[0]) / (np.var(signal[0]) + 1.0)
    assert np.all(np.abs(cv.cvr2[:20] - snr) < 0.1)  # predicted: the share of signal variance
    assert np.all(cv.cvr2[20:40] < -snr + 0.1)  # anti-predicted: negative
    assert np.all(np.abs(cv.cvr2[40:]) < 0.05)  # unrelated: about zero
    # without a gain the half-size prediction is penalised: strict <= cvr2 where predicted
    assert np.all(cv.strict_cvr2[:20] < cv.cvr2[:20])


def test_models_cross_validated_on_the_same_runs_share_the_held_out_data():
    """Several models' cross-validations of the same runs project each held-out run and compute its
    autocovariance once, and score exactly as each would alone (a prediction missing in one model's
    fold included)."""
    rng = np.random.default_rng(3)
    t = np.arange(FRAMES)
    signal = np.tile(np.sin(2 * np.pi * t / 20), (N, 1))
    runs = _runs(rng, signal, 3)
    runs[1].data[7] = np.nan
    designs = {"a": np.zeros((FRAMES, 2, 2))}

    def fit(training, stim, fold):
        return FitResult("gauss", {}, np.zeros(N), np.zeros(N))

    predictions = [signal + rng.normal(0, 0.5, signal.shape) for _ in range(2)]
    predictions[1][3] = np.nan
    shared: dict = {}
    for prediction in predictions:
        kwargs = {"fit": fit, "predict": lambda result, stim, p=prediction: p}
        run_set = RunSet(runs, ["a"] * 3, designs, fov_deg=10.0)
        alone = cross_validate(run_set, keep_held_out=True, **kwargs)
        together = cross_validate(run_set, keep_held_out=True, held_out_data=shared, **kwargs)
        np.testing.assert_array_equal(together.fold_sums, alone.fold_sums)
        for (y_t, p_t), (y_a, p_a) in zip(together.held_out, alone.held_out, strict=True):
            np.testing.assert_array_equal(y_t, y_a)
            np.testing.assert_array_equal(p_t, p_a)
    assert sorted(shared) == [0, 1, 2]
    assert np.isnan(alone.cvr2[3]) and np.isfinite(alone.cvr2[7]) and np.all(shared[1].y[7] == 0)


@pytest.mark.parametrize("frames", [7, 120, 190, 331])
def test_the_autocovariance_is_the_sum_of_lagged_products(frames):
    from prfmap.participant.crossval import autocovariance

    x = np.random.default_rng(frames).normal(size=(5, frames))
    lags = max(frames // 4, 1)
    expected = np.stack([np.sum(x[:, : frames - k] * x[:, k:], axis=1) for k in range(lags)], axis=1)
    np.testing.assert_allclose(autocovariance(x), expected, atol=1e-10 * frames)


def _ar1(rng: np.random.Generator, shape: tuple[int, int], rho: float) -> np.ndarray:
    out = rng.normal(0, 1, shape)
    for t in range(1, shape[1]):
        out[:, t] += rho * out[:, t - 1]
    return out


def test_the_held_out_z_is_standard_normal_without_a_prf_despite_autocorrelation():
    rng = np.random.default_rng(2)
    n = 2000
    t = np.arange(FRAMES)
    smooth = np.convolve(np.ones(6) / 6, np.sin(2 * np.pi * t / 24), mode="same")
    runs = [
        PreprocessedRun(_ar1(rng, (n, FRAMES), 0.6).astype(np.float32), dct_basis(FRAMES, TR, 0.01))
        for _ in range(2)
    ]
    prediction = np.tile(smooth, (n, 1)) + 0.3 * _ar1(rng, (n, FRAMES), 0.9)

    def fit(training, stim, fold):
        return FitResult("gauss", {}, np.zeros(n), np.zeros(n))

    cv = cross_validate(
        RunSet(runs, ["a"] * 2, {"a": np.zeros((FRAMES, 2, 2))}, fov_deg=10.0),
        fit=fit,
        predict=lambda result, stim: prediction,
    )
    # both series autocorrelated: the naive c·sqrt(N) would spread far wider than N(0, 1)
    assert 0.85 < np.std(cv.z) < 1.2 and abs(np.mean(cv.z)) < 0.1
    assert np.std(np.sign(cv.cvr2) * np.sqrt(np.abs(cv.cvr2)) * np.sqrt(2 * FRAMES)) > 1.5
    assert np.mean(reproducible(cv.z)) < 0.01
    response = np.tile(np.sin(2 * np.pi * t / 8), (n, 1))  # a response a run repeats (bar passes)
    signal_runs = _runs(rng, response, 3)
    cv = cross_validate(
        RunSet(signal_runs, ["a"] * 3, {"a": np.zeros((FRAMES, 2, 2))}, fov_deg=10.0),
        fit=fit,
        predict=lambda result, stim: response,
    )
    assert np.all(reproducible(cv.z)) and np.median(cv.cvr2) < 0.4


def test_reproducible_is_a_bonferroni_limit_and_marks_the_status():
    z = np.array([4.6, 4.4, 2.0, np.nan] + [0.0] * 19996)  # limit for 19,999 finite z: 4.56
    assert reproducible(z)[:4].tolist() == [True, False, False, False]
    status = np.zeros(z.size)
    status[1] = catalog.STATUS_BITS["size_at_floor"]
    status[3] = catalog.STATUS_BITS["no_signal"]
    marked = mark_not_reproducible(status, z).astype(int)
    bit = catalog.STATUS_BITS["not_reproducible"]
    assert marked[:4].tolist() == [0, bit + catalog.STATUS_BITS["size_at_floor"], bit, 1]


def test_runs_with_other_apertures_are_predicted_from_a_fit_of_the_others():
    rng = np.random.default_rng(2)
    runs = _runs(rng, np.zeros((N, FRAMES)), 3)
    designs = {"bars": np.zeros((FRAMES, 2, 2)), "wedges": np.ones((FRAMES, 2, 2)) * 0.5}
    seen = []

    def fit(training, stim, fold):
        seen.append((fold.held_out, list(stim.run_lengths), training.data.shape[1]))
        return FitResult("gauss", {}, np.zeros(N), np.zeros(N))

    def predict(result, stim):
        seen.append(float(stim.design.mean()))  # the held-out run's own aperture
        return rng.normal(0, 1, (N, stim.n_frames))

    cross_validate(RunSet(runs, ["bars", "bars", "wedges"], designs, fov_deg=10.0), fit=fit, predict=predict)
    # holding out a bars run: the other bars run and the wedges run, concatenated
    assert seen[0] == (0, [FRAMES, FRAMES], 2 * FRAMES) and seen[1] == 0.0
    assert seen[2] == (1, [FRAMES, FRAMES], 2 * FRAMES) and seen[3] == 0.0
    # holding out the wedges run: the two bars runs, averaged
    assert seen[4] == (2, [FRAMES], FRAMES) and seen[5] == 0.5


def test_units_a_fold_fit_took_from_the_gaussian_score_as_the_gaussians():
    """A compared model's fold fit that took the Gaussian's fit over at some units (below
    --refine-r2-min) predicts only its other units; the others get the Gaussian's scores and held-out
    series, exactly what predicting the same time courses again would give."""
    rng = np.random.default_rng(5)
    t = np.arange(FRAMES)
    runs = _runs(rng, np.tile(np.sin(2 * np.pi * t / 20), (N, 1)), 3)
    gauss_p = rng.normal(0, 1, (N, FRAMES)) + np.sin(2 * np.pi * t / 20)
    model_p = rng.normal(0, 1, (N, FRAMES)) + np.sin(2 * np.pi * t / 20)
    taken = np.zeros(N, dtype=bool)
    taken[::3] = True
    asked = []

    def fit_gauss(training, stim, fold):
        return FitResult("gauss", {}, np.zeros(N), np.zeros(N))

    def fit_model(training, stim, fold):
        return FitResult("css", {}, np.zeros(N), np.zeros(N), flags={catalog.TOOK_GAUSSIAN: taken})

    def predict_model(result, stim, rows=None):
        asked.append(rows)
        out = np.full((N, FRAMES), np.nan)
        out[rows] = model_p[rows]
        return out

    common = {"keep_held_out": True, "held_out_data": {}}
    run_set = RunSet(runs, ["a"] * 3, {"a": np.zeros((FRAMES, 2, 2))}, fov_deg=10.0)
    gauss = cross_validate(run_set, fit=fit_gauss, predict=lambda result, stim: gauss_p, **common)
    model = cross_validate(run_set, fit=fit_model, predict=predict_model, gaussian=gauss, **common)
    both = np.where(taken[:, None], gauss_p, model_p)
    again = cross_validate(run_set, fit=fit_gauss, predict=lambda result, stim: both, **common)
    assert len(asked) == 3 and all(np.array_equal(rows, np.flatnonzero(~taken)) for rows in asked)
    for name in ("cvr2", "strict_cvr2", "z"):
        np.testing.assert_allclose(getattr(model, name), getattr(again, name), rtol=1e-9)
    np.testing.assert_array_equal(model.cvr2[taken], gauss.cvr2[taken])
    for (y, p), (y_again, p_again) in zip(model.held_out, again.held_out, strict=True):
        np.testing.assert_array_equal(y, y_again)
        np.testing.assert_allclose(p, p_again, rtol=1e-6)


def test_fewer_than_two_runs_have_no_folds():
    rng = np.random.default_rng(1)
    runs = _runs(rng, np.zeros((N, FRAMES)), 1)
    run_set = RunSet(runs, ["a"], {"a": np.zeros((FRAMES, 2, 2))}, fov_deg=10.0)
    cv = cross_validate(run_set, fit=None, predict=None)  # type: ignore[arg-type]
    assert cv.folds == [] and np.isnan(cv.cvr2).all()


def _fit_participant(root: Path, out: Path, *options: str):
    work = out.with_name(f"{out.name}-work")  # outside output_dir, which refuses a --work-dir in it
    config = build_config(
        build_parser().parse_args([str(root), str(out), "participant", "--work-dir", str(work), *options])
    )
    (plan,) = plan_fits(find_runs(config.inputs, work_dir=work), config.fit.model)
    fitted = fit_loaded(load_fit(plan, config, lambda *a: None), config, lambda *a: None)
    return config, fitted


@pytest.fixture(scope="module")
def participants(tmp_path_factory):
    """Two small T1w participants with two runs: a normal one, and one whose second run is noise."""
    root = tmp_path_factory.mktemp("cv")
    out = {}
    for name, noise_runs in (("normal", 0), ("noise", 1)):
        bids = make_synthetic_dataset(
            root / name / "bids", SynthConfig(space="T1w", small=True, runs=2, noise_runs=noise_runs, seed=4)
        )
        out[name] = (bids, *_fit_participant(bids, root / name / "out"))
    return out


def test_cvr2_tracks_r2_and_stays_below_it_on_normal_data(participants):
    bids, _, fitted = participants["normal"]
    truth = load_truth(bids)
    prf = truth["mask"]
    cvr2, r2 = fitted.cv.cvr2, fitted.result.r2
    ok = np.isfinite(cvr2) & np.isfinite(r2)
    assert np.median(cvr2[prf]) > 0.2
    assert np.mean(cvr2[prf & ok] <= r2[prf & ok] + 0.02) > 0.9
    assert spearmanr(cvr2[prf & ok], r2[prf & ok]).statistic > 0.8  # tracks it
    assert pearsonr(cvr2[ok], r2[ok]).statistic > 0.9
    assert abs(np.median(cvr2[truth["noise"] & ok])) < 0.05  # no pRF: nothing to predict


def test_cvr2_is_zero_when_the_second_run_is_noise(participants):
    bids, _, fitted = participants["noise"]
    prf = load_truth(bids)["mask"]
    assert abs(np.nanmedian(fitted.cv.cvr2[prf])) < 0.05
    assert np.nanmedian(fitted.result.r2[prf]) > 0.3
    assert np.nanmedian(fitted.cv.strict_cvr2[prf]) < -0.1  # without a gain it is penalised


def test_cvr2_maps_and_their_definition_are_written(participants, tmp_path):
    _, config, fitted = participants["normal"]
    files = write_outcome(fitted, config, tmp_path)
    names = {p.name for p in files}
    stem = "sub-01_task-prf_space-T1w_model-gauss_desc-cvr2_boldmap"
    assert f"{stem}.nii.gz" in names
    sidecar = json.loads((tmp_path / "sub-01" / "func" / f"{stem}.json").read_text())
    assert sidecar["Units"] == "1" and "cross-validated" in sidecar["Description"]
    explained = sidecar["VarianceExplained"]
    assert "sign(c) * c^2" in explained["cvr2"] and explained["Threshold"].startswith("r2 >= 0.1")
    assert [f["HeldOut"] for f in explained["Folds"]] == ["sub-01_task-prf_run-1", "sub-01_task-prf_run-2"]
    assert fitted.timings["cross_validation"] > 0
    assert {"cross_validation", "fit"} <= set(sidecar["Timings"])


def test_no_cvr2_with_the_option_or_one_run(participants, tmp_path):
    bids, _, _ = participants["normal"]
    _, fitted = _fit_participant(bids, tmp_path / "a", "--no-cvr2", "--refine", "none")
    assert fitted.cv is None and "cvr2" not in fitted.maps()
    _, fitted = _fit_participant(bids, tmp_path / "b", "--run", "1", "--refine", "none")
    assert fitted.cv is None


def _write_participant(out: Path, subject: str, maps: dict[str, np.ndarray], n: int) -> None:
    key = OutputKey(subject, None, "bar", "fsaverage5", None, None, "gauss")
    geometry = GiftiGeometry(hemis={"L": n, "R": n})
    func = key.func_dir(out)
    for label, values in maps.items():
        geometry.write_maps(
            {label: values}, lambda h, lab=label: func / f"{key.stem(hemi=h, param=lab)}_boldmap.func.gii"
        )


def test_the_group_level_can_threshold_on_cvr2(tmp_path):
    stacks = {
        "polarangle": np.zeros((2, 3)),
        "eccentricity": np.ones((2, 3)),
        "sigma": np.ones((2, 3)),
        "r2": np.array([[0.5, 0.5, 0.5], [0.5, 0.5, 0.05]]),
        "cvr2": np.array([[0.3, 0.02, np.nan], [0.3, 0.3, 0.3]]),
    }
    np.testing.assert_allclose(combine(stacks, 0.1)["count"], [2, 2, 1])
    doubtful = {**stacks, "status": np.array([[0, 4, 128], [64, 2, 0]])}  # at_bound, not_reproducible
    np.testing.assert_allclose(combine(doubtful, 0.1)["count"], [1, 1, 1])
    on_cvr2 = combine(stacks, 0.1, "cvr2")
    np.testing.assert_allclose(on_cvr2["count"], [2, 1, 1])
    np.testing.assert_allclose(on_cvr2["cvr2"], [0.3, 0.16, 0.3])
    n = 10242
    rng = np.random.default_rng(0)
    for subject in ("01", "02"):
        maps = {k: rng.uniform(0.5, 2, 2 * n) for k in ("x", "y", "sigma", "eccentricity")}
        maps.update(polarangle=rng.uniform(-180, 180, 2 * n), r2=np.full(2 * n, 0.5))
        if subject == "01":
            maps["cvr2"] = np.full(2 * n, 0.05)
        _write_participant(tmp_path, subject, maps, n)
    with pytest.raises(BadDataError, match=r"sub-02 has no cvr2 map .* \(--threshold-on r2\)"):
        run_group(tmp_path, threshold_on="cvr2", report=False)
    (result,) = run_group(tmp_path, participant_labels=["01"], threshold_on="cvr2", report=False)
    assert result.threshold_on == "cvr2" and np.all(result.maps["L"]["count"] == 0)
    count = next(p for p in result.files if "desc-count" in p.name and "hemi-L" in p.name)
    shared = count.with_name(count.name.replace("_stat-count", "").replace(".func.gii", ".json"))
    sidecar = statistic_metadata(json.loads(shared.read_text()), "count")  # one sidecar per parameter
    assert sidecar["ThresholdOn"] == "cvr2" and "cvr2 >= threshold" in sidecar["Description"]
    assert any("desc-cvr2" in p.name for p in result.files)


def test_the_api_for_held_out_validations_gives_the_maps_cvr2(participants):
    """What a validation script calls (estimate_hrf, estimate_noise, fit_prf and engine_predictor on
    the loaded runs) gives the cvr2 the participant level writes."""
    from prfmap.engine import estimate_hrf, estimate_noise, fit_prf
    from prfmap.participant.crossval import engine_predictor

    _, config, fitted = participants["normal"]
    loaded = fitted.loaded
    tr, ref = loaded.tr, loaded.slice_time.fraction
    kwargs = config.fit.engine_kwargs()
    assert kwargs.pop("hrf") == "participant"  # the default: estimated per fold, then handed to the fit
    option = kwargs.pop("noise")
    assert option == "ar1"  # the same: one noise model per fold

    def fit(train, stim, fold):
        hrf = estimate_hrf(train.data, stim, tr, nuisance=train.nuisance, slice_time_ref=ref, spread=False)
        noise = estimate_noise(
            train.data, stim, tr, option, nuisance=train.nuisance, hrf=hrf, slice_time_ref=ref
        )
        return fit_prf(
            train.data, stim, tr, nuisance=train.nuisance, slice_time_ref=ref, hrf=hrf, noise=noise, **kwargs
        )

    cv = cross_validate(
        RunSet(
            loaded.runs,
            [run.stimulus_key for run in loaded.plan.runs],
            loaded.designs,
            fov_deg=loaded.fov_deg,
        ),
        fit=fit,
        predict=engine_predictor(tr, config.fit.model, slice_time_ref=ref),
    )
    both = np.isfinite(cv.cvr2) & np.isfinite(fitted.cv.cvr2)
    assert both.sum() > 0.9 * np.isfinite(fitted.cv.cvr2).sum()
    assert np.median(np.abs(cv.cvr2[both] - fitted.cv.cvr2[both])) < 1e-3
