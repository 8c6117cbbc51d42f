"""The synthetic forward model's HRF against scipy's gamma distribution."""

from __future__ import annotations

import numpy as np
from scipy import stats

from prfmap.synth.model import HRF_DELAY, HRF_RATIO, HRF_U_DISPERSION, HRF_UNDERSHOOT, hrf_integral


def test_the_hrf_integral_is_the_difference_of_two_gamma_cdfs() -> None:
    t = np.linspace(-1.0, 32.0, 331)
    delay = np.array([[5.0], [6.0], [7.0]])
    dispersion = np.array([[0.8], [1.0], [1.2]])
    peak = stats.gamma.cdf(t, delay / dispersion, scale=dispersion)
    under = stats.gamma.cdf(
        t, (HRF_UNDERSHOOT + delay - HRF_DELAY) / HRF_U_DISPERSION, scale=HRF_U_DISPERSION
    )
    expected = (peak - HRF_RATIO * under) / (1.0 - HRF_RATIO)
    np.testing.assert_array_equal(hrf_integral(t, delay, dispersion), expected)
    assert np.all(hrf_integral(t[t <= 0]) == 0)
