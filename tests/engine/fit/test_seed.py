"""The seed search: a model's extras (surround, exponent, normalisation) are seeded per unit from a small grid
around its Gaussian fit, recovered on noiseless data, kept in range, and a vanished surround is flagged."""

import numpy as np
import pytest

from conftest import FOV, TR, bar_design, random_params
from prfmap.engine import Stimulus, cartesian_grid, catalog, fit_prf, predict
from prfmap.engine.fit.search import seed_search
from prfmap.engine.models import get_model
from prfmap.engine.problem import make_problem, nuisance_basis

pytestmark = pytest.mark.backend  # docs/validation.md: the seeding is checked on every backend


def _centres(n: int, rng: np.random.Generator) -> dict:
    """Realistic pRFs: centres within 7° of fixation in a 10° radius stimulus, sigma 0.5–3°."""
    return random_params("gauss", n, rng)


def test_dog_surrounds_are_recovered_on_noiseless_data(stim):
    """Surrounds 2–4 times wider than the centre, 5–30 % of its integral: size and ratio within 10 %."""
    rng = np.random.default_rng(20)
    n = 200
    p = _centres(n, rng)
    scale, ratio = rng.uniform(2, 4, n), rng.uniform(0.05, 0.3, n)
    p["sigma_surround"], p["amplitude_surround"] = p["sigma"] * scale, p["amplitude"] * ratio
    res = fit_prf(predict(p, stim, TR, "dog"), stim, TR, model="dog")
    size_ok = np.abs(res.params["sigma_surround"] / p["sigma_surround"] - 1) <= 0.1
    fitted_ratio = res.params["amplitude_surround"] / res.params["amplitude"]
    ratio_ok = np.abs(fitted_ratio / ratio - 1) <= 0.1
    assert size_ok.mean() >= 0.9 and ratio_ok.mean() >= 0.9, (size_ok.mean(), ratio_ok.mean())
    assert np.all(res.params["amplitude_surround"] >= 0)
    assert not res.flags["surround_vanished"].any()
    assert res.settings.seed_candidates == len(get_model("dog").seed_candidates(np.ones((1, 5)))[0])


def test_css_exponents_are_recovered_on_noiseless_data(stim):
    rng = np.random.default_rng(21)
    n = 200
    p = _centres(n, rng) | {"n": rng.uniform(0.2, 1.0, n)}
    res = fit_prf(predict(p, stim, TR, "css"), stim, TR, model="css")
    close = np.abs(res.params["n"] - p["n"]) <= 0.1
    assert close.mean() >= 0.9, close.mean()
    assert np.all((res.params["n"] > 0) & (res.params["n"] <= 1))


@pytest.mark.parametrize("model", ["dog", "dn"])
def test_a_vanished_surround_is_flagged(model, stim):
    """Gaussian data fitted with a surround model: its surround is flagged, a real surround is not."""
    rng = np.random.default_rng(22)
    p = random_params(model, 60, rng)
    key = {"dog": "amplitude_surround", "dn": "amplitude_norm"}[model]
    p[key][:30] = 0.0
    data = predict(p, stim, TR, model)
    data[-1] = np.nan
    res = fit_prf(data, stim, TR, model=model)
    flag = res.flags["surround_vanished"]
    assert flag.dtype == bool and flag.shape == (60,)
    assert flag[:30].mean() >= 0.9
    assert not flag[30:].any()  # the unfitted (NaN) unit included
    assert get_model("gauss").flags(np.ones((3, 3))) == {}


def test_seed_search_picks_the_best_projected_correlation():
    """Candidates are scored as the grid is: canonical-HRF predictions with the nuisance projected out."""
    stim = Stimulus(bar_design(80, 21), FOV)
    rng = np.random.default_rng(23)
    n, n_cand = 12, 9
    model = get_model("dog")
    nuisance = np.linspace(-1, 1, stim.n_frames)[:, None]
    prob = make_problem(model, stim, TR, 1, nuisance, "float64", 0.5)
    truth = random_params("dog", n, rng)
    cand = [random_params("dog", n, rng) for _ in range(n_cand)]
    best = rng.integers(0, n_cand, n)
    for i, j in enumerate(best):
        for k in cand[j]:
            cand[j][k][i] = truth[k][i]
    data = predict(truth, stim, TR, "dog", dtype="float64") + 3.0 * nuisance.T
    q = nuisance_basis(stim.n_frames, nuisance)
    y = data - (data @ q) @ q.T
    theta = np.stack([model.from_report(c) for c in cand], axis=1)  # (units, candidates, K)
    chosen, score = seed_search(prob, y, theta, 1.0, None)
    np.testing.assert_allclose(chosen, model.from_report(truth), rtol=1e-10)
    np.testing.assert_allclose(score, 1.0, atol=1e-8)

    def reference_corr(c: dict) -> np.ndarray:
        pred = predict(c, stim, TR, "dog", dtype="float64")
        pred -= (pred @ q) @ q.T
        return np.sum(pred * y, axis=1) / np.linalg.norm(pred, axis=1) / np.linalg.norm(y, axis=1)

    others = [random_params("dog", n, rng) for _ in range(n_cand)]
    corr = np.stack([reference_corr(c) for c in others], axis=1)
    theta = np.stack([model.from_report(c) for c in others], axis=1)
    chosen, score = seed_search(prob, y, theta, 1.0, None)
    np.testing.assert_allclose(score, corr.max(axis=1), atol=1e-8)
    np.testing.assert_allclose(chosen, theta[np.arange(n), corr.argmax(axis=1)])


@pytest.mark.parametrize("name", ["dog", "dn"])
def test_candidates_sharing_their_gaussians_score_as_when_each_is_computed(name, monkeypatch):
    """The seed candidates of a surround model share the unit's centre and size and a few surround
    sizes: the search computes those Gaussians once per unit and picks the same candidates with the
    same scores."""
    import prfmap.engine.fit.search as search

    stim = Stimulus(bar_design(80, 21), FOV)
    rng = np.random.default_rng(25)
    model, n = get_model(name), 40
    truth = random_params(name, n, rng)
    data = predict(truth, stim, TR, name, dtype="float64") + rng.normal(0, 0.2, (n, stim.n_frames))
    prob = make_problem(model, stim, TR, 1, None, "float64", 0.5)
    q = nuisance_basis(stim.n_frames, None)
    y = data - (data @ q) @ q.T
    candidates = model.seed_candidates(model.from_report({k: truth[k] for k in ("x", "y", "sigma")}))
    sizes, which = search.shared_sizes(model, candidates)
    np.testing.assert_array_equal(sizes, sorted(model.seed_grid[model.second_size]))
    np.testing.assert_array_equal(sizes[which], candidates[:, :, model.names.index(model.second_size)])
    shared = seed_search(prob, y, candidates, 1.0, None)
    monkeypatch.setattr(search, "shared_sizes", lambda *_: None)
    each = seed_search(prob, y, candidates, 1.0, None)
    np.testing.assert_array_equal(shared[0], each[0])
    np.testing.assert_allclose(shared[1], each[1], atol=1e-12)
    moved = candidates.copy()
    moved[:, 1:, 0] += 0.5  # candidates that do not share their centre are computed one by one
    assert search.shared_sizes(model, moved) is None
    assert search.shared_sizes(get_model("gauss"), candidates[:, :, :3]) is None
    css = get_model("css")  # its sizes, σ·√n, differ for every candidate
    assert search.shared_sizes(css, css.seed_candidates(np.ones((2, 4)))) is None


def test_seed_candidates_keep_fixed_parameters_and_scale_css_sizes():
    css = get_model("css")
    theta = np.array([[1.0, -2.0, 2.0, 0.5]])
    cand = css.seed_candidates(theta)
    assert cand.shape == (1, len(css.seed_grid["n"]) * len(css.seed_grid["sigma"]), 4)
    np.testing.assert_allclose(cand[0, :, :2], [[1.0, -2.0]] * cand.shape[1])
    expected = {(n, 2.0 * f * np.sqrt(n)) for n in css.seed_grid["n"] for f in css.seed_grid["sigma"]}
    got = {(round(c[3], 9), round(c[2], 9)) for c in cand[0]}
    assert got == {(round(a, 9), round(b, 9)) for a, b in expected}
    kept = css.seed_candidates(theta, keep={"n"})
    np.testing.assert_allclose(kept[0, :, 3], 0.5)
    np.testing.assert_allclose(kept[0, :, 2], 2.0 * np.sqrt(0.5) * np.array(css.seed_grid["sigma"]))
    assert get_model("gauss").seed_candidates(theta[:, :3]).shape == (1, 1, 3)


def test_a_grid_naming_a_models_extras_is_searched_with_that_model(stim):
    p = random_params("css", 20, np.random.default_rng(24))
    data = predict(p, stim, TR, "css")
    axes = {"x": np.linspace(-8, 8, 9), "y": np.linspace(-8, 8, 9), "sigma": [0.5, 1, 2, 3]}
    with_n = fit_prf(
        data, stim, TR, model="css", refine="none", grid=cartesian_grid(axes | {"n": [0.3, 0.6]})
    )
    assert with_n.settings.seed_candidates == 0 and with_n.settings.grid_points == 9 * 9 * 4 * 2
    assert set(np.round(with_n.params["n"], 6)) <= {0.3, 0.6}
    seeded = fit_prf(data, stim, TR, model="css", refine="none", grid=cartesian_grid(axes))
    assert seeded.settings.seed_candidates > 0 and "seed" in seeded.timings
    with pytest.raises(ValueError, match="cannot name"):
        fit_prf(data, stim, TR, model="gauss", grid=cartesian_grid(axes | {"n": [0.5]}))


@pytest.mark.parametrize("model", ["css", "dog"])
def test_a_shared_gaussian_start_recovers_as_the_models_own(model, stim):
    """Seeded from an earlier Gaussian fit of the same data (what a comparison of models shares), the
    model skips its own grid search and reaches the same fit as when it searches itself."""
    rng = np.random.default_rng(23)
    n = 120
    p = random_params(model, n, rng)
    data = predict(p, stim, TR, model) + rng.normal(0, 0.05, (n, stim.n_frames))
    data[-1] = np.nan
    gauss = fit_prf(data, stim, TR, model="gauss")
    own = fit_prf(data, stim, TR, model=model)
    shared = fit_prf(data, stim, TR, model=model, gauss_start=gauss.params)
    assert shared.settings.grid_points == 0 and own.settings.grid_points > 0
    assert "grid" not in shared.timings and "refine_gauss" not in shared.timings
    fitted = np.isfinite(own.r2)
    assert np.array_equal(fitted, np.isfinite(shared.r2))
    assert np.median(shared.r2[fitted]) >= np.median(own.r2[fitted]) - 0.005
    close = np.hypot(shared.params["x"] - own.params["x"], shared.params["y"] - own.params["y"]) < 0.2
    assert close[fitted].mean() >= 0.9, close[fitted].mean()


@pytest.mark.parametrize("model", ["css", "dog", "dn"])
def test_units_a_shared_gaussian_fit_explains_too_little_keep_it(model, stim):
    """In a comparison, a unit the Gaussian fit explains too little to refine is not seeded: the model
    there is that Gaussian (CSS n 1, no surround or pool), with its amplitude, baseline, r² and time
    course, flagged grid-only; the units it does seed are fitted as before."""
    rng = np.random.default_rng(26)
    n = 60
    p = random_params("gauss", n, rng)
    data = predict(p, stim, TR) + rng.normal(0, 0.3, (n, stim.n_frames))
    data[:20] = rng.normal(0, 1, (20, stim.n_frames))
    options = {"refine_r2_min": 0.1, "return_predictions": True}
    gauss = fit_prf(data, stim, TR, model="gauss", **options)
    start = {k: gauss.params[k] for k in ("x", "y", "sigma", "amplitude", "baseline")}
    start |= {"r2": gauss.r2, "loss": gauss.loss, "predictions": gauss.predictions}
    res = fit_prf(data, stim, TR, model=model, gauss_start=start, **options)
    weak = gauss.r2 < 0.1
    assert 15 <= weak.sum() <= 25
    for key in ("x", "y", "sigma", "amplitude", "baseline"):
        np.testing.assert_allclose(res.params[key][weak], gauss.params[key][weak], rtol=1e-12)
    np.testing.assert_allclose(res.r2[weak], gauss.r2[weak], rtol=1e-12)
    np.testing.assert_allclose(res.predictions[weak], gauss.predictions[weak], rtol=1e-12)
    extra = {"css": "n", "dog": "amplitude_surround", "dn": "amplitude_norm"}[model]
    assert np.all(res.params[extra][weak] == (1.0 if model == "css" else 0.0))
    grid_only = (res.status.astype(int) & catalog.STATUS_BITS["grid_only"]) > 0
    assert np.all(grid_only[weak]) and not grid_only[~weak].any()
    assert np.array_equal(res.flags[catalog.TOOK_GAUSSIAN], weak)  # what a comparison does not predict again
    # at the written parameters, the model's own time courses are the Gaussian's
    again = predict({k: v[weak] for k, v in res.params.items()}, stim, TR, model, dtype="float64")
    as_gauss = predict({k: v[weak] for k, v in gauss.params.items()}, stim, TR, "gauss", dtype="float64")
    np.testing.assert_allclose(again, as_gauss, atol=1e-6 * np.abs(as_gauss).max())
    # the units it seeds are the model's own fits
    assert np.all(res.r2[~weak] > 0.1) and np.mean(res.params[extra][~weak] != (model == "css")) > 0.9
