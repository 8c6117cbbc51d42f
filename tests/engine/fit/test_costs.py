"""``rss_rows``, the sums of squares behind σ's profiles and the centre's path, against numpy's least
squares on ``predict``'s time courses, row by row and under each of several HRFs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from conftest import TR, random_params
from prfmap.engine import predict
from prfmap.engine.fit import costs
from prfmap.engine.hrf import CANONICAL
from prfmap.engine.models import get_model
from prfmap.engine.problem import make_problem, nuisance_basis


def test_rows_give_numpy_least_squares_of_their_own_unit_under_each_hrf(stim, monkeypatch):
    monkeypatch.setattr(costs, "COST_ROWS", 16)  # three calls, the last one padded
    rng = np.random.default_rng(3)
    model = get_model("gauss")
    hrfs = [CANONICAL, replace(CANONICAL, delay=CANONICAL.delay + 1.0)]
    problems = [make_problem(model, stim, TR, 1, None, "float64", 0.5, hrf) for hrf in hrfs]
    q = nuisance_basis(stim.n_frames, None)
    truth = random_params("gauss", 4, rng)
    y = predict(truth, stim, TR, dtype="float64") + rng.normal(0, 0.5, (4, stim.n_frames))
    y = y - (y @ q) @ q.T
    rows = random_params("gauss", 37, rng)
    of_unit = rng.integers(0, 4, 37)  # any unit, in any order, repeated

    got = costs.rss_rows(problems, model.internal(model.from_report(rows)), y, of_unit, 1.0, "test")

    assert got.shape == (2, 37)
    for h, hrf in enumerate(hrfs):
        unit_response = {**rows, "amplitude": np.ones(37), "baseline": np.zeros(37)}
        regressor = predict(unit_response, stim, TR, dtype="float64", hrf=hrf)
        regressor = regressor - (regressor @ q) @ q.T
        for i in range(37):
            target = y[of_unit[i]]
            _, rss, _, _ = np.linalg.lstsq(regressor[i][:, None], target, rcond=None)
            np.testing.assert_allclose(got[h, i], rss[0], rtol=1e-8, err_msg=f"HRF {h}, row {i}")
    assert not np.allclose(got[0], got[1], rtol=1e-3)  # the HRFs' own sums of squares
