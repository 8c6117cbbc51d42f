"""Test–retest consistency of the standard errors from a two-run fit's folds (issue 37)."""

from __future__ import annotations

import numpy as np

from prfmap.engine.catalog.result import FitResult, Uncertainty
from prfmap.participant.retest import RETEST_PARAMETERS, FoldEstimate, retest_consistency


def two_fits(n: int, se: float, claimed: float, seed: int = 0) -> tuple[FoldEstimate, FoldEstimate]:
    """Two independent estimates of ``n`` units with errors of SD ``se``, each claiming ``claimed``."""
    rng = np.random.default_rng(seed)
    truth = {k: rng.uniform(-5, 5, n) for k in RETEST_PARAMETERS}
    fits = []
    for _ in range(2):
        values = {k: v + rng.normal(0.0, se, n) for k, v in truth.items()}
        errors = {k: np.full(n, claimed) for k in RETEST_PARAMETERS}
        fits.append(FoldEstimate(values, errors, np.full(n, 0.5), np.zeros(n, dtype=bool)))
    return fits[0], fits[1]


def test_right_standard_errors_are_consistent_for_95_percent():
    record = retest_consistency(*two_fits(20000, 0.3, 0.3))
    assert record["Units"] == 20000
    for key in RETEST_PARAMETERS:
        assert 0.94 <= record["Consistent"][key] <= 0.96, record


def test_standard_errors_half_the_truth_are_consistent_for_two_thirds():
    record = retest_consistency(*two_fits(20000, 0.3, 0.15))
    for key in RETEST_PARAMETERS:  # P(|N(0, 1)| <= 1.96 / 2) = 0.673
        assert 0.66 <= record["Consistent"][key] <= 0.69, record


def test_only_units_with_signal_in_both_and_not_doubtful_are_compared():
    first, second = two_fits(10, 0.3, 0.3)
    first.r2[:3] = 0.05  # below r² 0.1 in one fit
    second.doubtful[3] = True
    first.se["sigma"][4] = np.inf  # not determined
    second.values["x"][5] = np.nan  # not fitted
    second.se["x"][5] = np.nan
    assert retest_consistency(first, second)["Units"] == 4
    first.r2[:] = 0.0
    assert retest_consistency(first, second) is None


def test_a_fold_under_a_prior_is_compared_at_its_maximum_likelihood_sigma():
    """Posterior σ shrink both runs toward lines from the same participant; the check compares the
    data's estimates and errors (``Uncertainty.likelihood``) and leaves the others as reported."""
    n = 4
    params = {"x": np.arange(n, dtype=float), "y": np.zeros(n), "sigma": np.full(n, 1.0)}
    se = {k: np.full(n, 0.1) for k in RETEST_PARAMETERS}
    likelihood, likelihood_se = {"sigma": np.array([0.5, 0.8, 1.2, 2.0])}, {"sigma": np.full(n, 0.4)}
    unc = Uncertainty(se, {}, {}, np.full(n, 100.0), 0.0, likelihood, likelihood_se)
    result = FitResult("gauss", params, np.full(n, 0.5), np.zeros(n), status=np.zeros(n), uncertainty=unc)
    estimate = FoldEstimate.of(result)
    np.testing.assert_array_equal(estimate.values["sigma"], likelihood["sigma"])
    np.testing.assert_array_equal(estimate.se["sigma"], likelihood_se["sigma"])
    np.testing.assert_array_equal(estimate.values["x"], params["x"])
    np.testing.assert_array_equal(estimate.se["x"], se["x"])
    plain = FitResult(
        "gauss", params, np.full(n, 0.5), np.zeros(n), status=np.zeros(n), uncertainty=Uncertainty(se)
    )
    np.testing.assert_array_equal(FoldEstimate.of(plain).values["sigma"], params["sigma"])


def test_a_fold_is_compared_with_its_errors_without_the_hrf_term():
    """A unit's own HRF is the same in both runs and cancels in their difference: where the fit gives
    standard errors without the HRF's variability (``Uncertainty.noise_se``), the check takes those,
    σ's over its maximum-likelihood error under a prior; elsewhere the errors it had."""
    n = 4
    params = {"x": np.arange(n, dtype=float), "y": np.zeros(n), "sigma": np.full(n, 1.0)}
    se = {k: np.full(n, 0.2) for k in RETEST_PARAMETERS}
    noise_se = {k: np.full(n, 0.1) for k in RETEST_PARAMETERS}
    likelihood, likelihood_se = {"sigma": np.full(n, 0.9)}, {"sigma": np.full(n, 0.4)}
    unc = Uncertainty(se, {}, {}, np.full(n, 100.0), 0.0, likelihood, likelihood_se, noise_se)
    result = FitResult("gauss", params, np.full(n, 0.5), np.zeros(n), status=np.zeros(n), uncertainty=unc)
    estimate = FoldEstimate.of(result)
    for key in RETEST_PARAMETERS:
        np.testing.assert_array_equal(estimate.se[key], noise_se[key])
    np.testing.assert_array_equal(estimate.values["sigma"], likelihood["sigma"])
