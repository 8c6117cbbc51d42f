"""``validate_uncertainty.sigma_calibration``, the measure of how σ's intervals follow its errors
(issue 37), on simulated intervals whose calibration is known."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))

from validate_uncertainty import Z95, sigma_calibration  # noqa: E402


def simulated(n: int, missing: float, seed: int = 0) -> tuple[dict, dict, dict, dict, np.ndarray]:
    """Intervals of log σ with SDs 0.1–0.6 around estimates whose errors have that SD plus ``missing``."""
    rng = np.random.default_rng(seed)
    truth = {"sigma": rng.uniform(0.3, 3.0, n)}
    sd = rng.uniform(0.1, 0.6, n)
    estimate = np.log(truth["sigma"]) + rng.normal(0.0, np.sqrt(sd**2 + missing**2))
    maps = {"sigma": np.exp(estimate)}
    lower, upper = {"sigma": np.exp(estimate - Z95 * sd)}, {"sigma": np.exp(estimate + Z95 * sd)}
    return maps, lower, upper, truth, np.ones(n, dtype=bool)


def test_calibrated_intervals_read_scale_one_and_nothing_missing():
    out = sigma_calibration(*simulated(4000, 0.0))
    assert out["n"] == 4000
    assert abs(out["z_sd"] - 1) < 0.05 and abs(out["z_sd_mad"] - 1) < 0.06, out
    assert 0.04 <= out["beyond_1.96"] <= 0.06, out
    # an extra near 0 trades off against the scale: 0.00–0.05 over six draws of these 4,000 units
    assert abs(out["scale"] - 1) < 0.1 and out["extra"] < 0.1, out


def test_an_error_the_widths_do_not_follow_is_found_as_the_extra():
    out = sigma_calibration(*simulated(4000, 0.3))
    assert abs(out["extra"] - 0.3) < 0.03 and abs(out["scale"] - 1) < 0.15, out
    assert out["beyond_1.96"] > 0.12 and out["z_sd"] > 1.2, out


def test_units_left_out_and_too_few_units_give_nothing():
    maps, lower, upper, truth, keep = simulated(100, 0.0)
    keep[:90] = False
    lower["sigma"][90:95] = np.nan  # no interval: not counted
    assert sigma_calibration(maps, lower, upper, truth, keep) == {}
    keep[:] = True
    assert sigma_calibration(maps, lower, upper, truth, keep)["n"] == 95
