"""Connective fields (issue 34): recovery of known CFs, pure noise predicts nothing held out, the
prediction is the weighted mean it is defined as, and the three backends agree."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import backend_result, grid_mesh
from prfmap.engine.connective import CFSource, cf_size_grid, fit_cf, predict_cf
from prfmap.io.geodesic import geodesic_distances

FRAMES = 200


def source_sheet(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """A 20 × 20 sheet of vertices 1.5 mm apart, its distances and two runs of a smooth random field."""
    coords, faces = grid_mesh(20, 1.5)
    distances = geodesic_distances(coords, faces, np.arange(len(coords)))
    rng = np.random.default_rng(seed)
    kernel = np.exp(-np.square(distances) / (2 * 1.5**2))
    kernel /= kernel.sum(axis=1, keepdims=True)
    runs = np.stack([kernel @ rng.standard_normal((len(coords), FRAMES)) for _ in range(2)])
    return distances, runs


def cf_targets(distances, fields, centre, size, noise, seed):
    """Targets of known CFs (gain 2, baseline 100) with white noise, run by run."""
    rng = np.random.default_rng(seed)
    weights = np.exp(-np.square(distances[centre]) / (2 * size[:, None] ** 2))
    weights /= weights.sum(axis=1, keepdims=True)
    scale = fields.std()
    return np.stack(
        [100 + 2 * weights @ f + noise * scale * rng.standard_normal((len(centre), FRAMES)) for f in fields]
    )


def held_out_r2(result, source_run, target_run):
    prediction = predict_cf(result.centre, result.size, result.gain, source_run)
    y = target_run - target_run.mean(axis=1, keepdims=True)
    p = prediction - prediction.mean(axis=1, keepdims=True)
    return 1 - np.sum(np.square(y - p), axis=1) / np.sum(np.square(y), axis=1)


def test_known_connective_fields_are_recovered():
    """Centre within 2 mm and size within 25 % for >= 90 % of the targets with cvr2 >= 0.2."""
    distances, fields = source_sheet(1)
    rng = np.random.default_rng(2)
    centre, size = rng.integers(0, len(distances), 300), rng.uniform(1.5, 6.0, 300)
    targets = cf_targets(distances, fields, centre, size, noise=1.0, seed=3)
    measured = fields + 0.2 * fields.std() * rng.standard_normal(fields.shape)
    result = fit_cf(targets[0], CFSource(measured[0], distances))
    cvr2 = held_out_r2(result, CFSource(measured[1], distances), targets[1])
    good = cvr2 >= 0.2
    assert good.mean() > 0.8
    near = distances[result.centre[good], centre[good]] <= 2.0
    sized = np.abs(result.size[good] / size[good] - 1) <= 0.25
    assert near.mean() >= 0.9 and sized.mean() >= 0.9, (near.mean(), sized.mean())
    assert np.median(result.gain[good]) == pytest.approx(2.0, rel=0.1)
    assert np.median(result.baseline[good]) == pytest.approx(100.0, abs=0.5)


def test_pure_noise_predicts_nothing_held_out():
    """cvr2 ≈ 0: slightly negative, as a fit to noise predicts other noise worse than zero does."""
    distances, fields = source_sheet(4)
    noise = np.random.default_rng(5).standard_normal((2, 400, FRAMES))
    result = fit_cf(noise[0], CFSource(fields[0], distances))
    cvr2 = held_out_r2(result, CFSource(fields[1], distances), noise[1])
    assert -0.06 < np.median(cvr2) <= 0.0
    assert np.percentile(cvr2, 95) < 0.03
    assert np.median(result.r2) < 0.1


@pytest.mark.backend
def test_the_prediction_is_the_gain_times_the_weighted_mean():
    distances, fields = source_sheet(6)
    centre, size, gain = (
        np.array([0, 57, -1, 399]),
        np.array([1.0, 3.0, 2.0, 9.0]),
        np.array([1.0, 2.0, 1.0, 0.5]),
    )
    prediction = predict_cf(centre, size, gain, CFSource(fields[0], distances), dtype="float64")
    for k in (0, 1, 3):
        w = np.exp(-np.square(distances[centre[k]].astype(np.float64)) / (2 * size[k] ** 2))
        np.testing.assert_allclose(prediction[k], gain[k] * (w / w.sum()) @ fields[0], rtol=1e-4, atol=1e-9)
    assert np.isnan(prediction[2]).all()


@pytest.mark.backend
def test_unusable_units_are_not_fitted_and_sizes_stay_on_the_grid():
    distances, fields = source_sheet(7)
    data = np.random.default_rng(8).standard_normal((4, FRAMES))
    data[1] = 3.0
    data[2, 5] = np.nan
    result = fit_cf(data, CFSource(fields[0], distances))
    assert list(result.centre[1:3]) == [-1, -1] and np.isnan(result.size[1:3]).all()
    assert (result.status[1:3] & 1).all()
    grid = cf_size_grid(CFSource(fields[0], distances))
    fitted = result.fitted
    assert np.all((result.size[fitted] >= grid[0] * 0.999) & (result.size[fitted] <= grid[-1] * 1.001))
    assert grid[0] == pytest.approx(0.75, rel=0.01)  # half the 1.5 mm spacing


AGREEMENT = (
    "import numpy as np\n"
    "from test_connective import source_sheet, cf_targets\n"
    "from prfmap.engine.connective import CFSource, fit_cf\n"
    "distances, fields = source_sheet(9)\n"
    "rng = np.random.default_rng(10)\n"
    "centre, size = rng.integers(0, len(distances), 60), rng.uniform(1.5, 6.0, 60)\n"
    "targets = cf_targets(distances, fields, centre, size, noise=0.7, seed=11)\n"
    "res = fit_cf(targets[0], CFSource(fields[0], distances))\n"
    "result = {'centre': res.centre.tolist(), 'size': res.size.tolist(), 'r2': res.r2.tolist()}\n"
)


def test_the_backends_agree(tmp_path, backend):
    if backend != "jax":
        pytest.skip("the cross-backend comparison runs once, in the jax session")
    results = {b: backend_result(b, AGREEMENT, tmp_path) for b in ("jax", "torch", "tensorflow")}
    ref = results["jax"]
    for other in ("torch", "tensorflow"):
        assert np.mean(np.array(results[other]["centre"]) == np.array(ref["centre"])) >= 0.95
        rel = np.abs(np.array(results[other]["size"]) / np.array(ref["size"]) - 1)
        assert np.median(rel) <= 0.02
        np.testing.assert_allclose(results[other]["r2"], ref["r2"], atol=0.01)
