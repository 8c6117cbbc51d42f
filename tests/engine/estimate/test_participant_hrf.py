"""The participant-level HRF: two-gamma kernels of any delay, and its estimate from the best units."""

import numpy as np
import pytest

from conftest import FOV, TR, bar_design, random_params
from helpers import ar1_noise
from prfmap.engine import HRF, Stimulus, estimate_hrf, fit_prf, predict
from prfmap.engine.estimate.hrf import delay_spread_of, screen_r2, spread_beyond_errors, top_units
from prfmap.engine.hrf import hrf_kernels
from prfmap.synth.model import unit_kernels


@pytest.mark.parametrize(
    ("delay", "dispersion", "stref"), [(6.0, 1.0, 0.5), (7.4, 1.15, 0.0), (5.2, 0.8, 0.3)]
)
def test_kernels_match_the_synthetic_forward_model(delay, dispersion, stref):
    # prfmap-synth integrates its per-unit two-gamma HRFs independently of the engine
    mine = hrf_kernels(TR, 1, stref, hrf=HRF(delay, dispersion))[0]
    theirs = unit_kernels(TR, np.array([stref * TR]), np.array([delay]), np.array([dispersion]), len(mine))[0]
    np.testing.assert_allclose(mine, theirs, atol=1e-10)
    assert mine.sum() == pytest.approx(1.0, abs=2e-3)


def test_canonical_record_and_peak():
    assert HRF().peak_s() == pytest.approx(5.0, abs=0.05)  # SPM's canonical response peaks at 5 s
    assert HRF(7.5).peak_s() > HRF().peak_s() + 1.2
    record = HRF(7.25, 0.9, "participant", 120).describe()
    assert HRF.from_record(record) == HRF(7.25, 0.9, "participant", 120)
    assert HRF.from_record(None) == HRF()


def test_top_units_take_the_best_share_within_limits():
    r2 = np.linspace(0.0, 0.9, 1000)
    r2[::10] = np.nan
    top = top_units(r2, fraction=0.05, min_units=10, max_units=30)
    assert len(top) == 30 and np.all(np.diff(r2[top]) <= 0) and r2[top[0]] == np.nanmax(r2)
    assert len(top_units(r2, fraction=0.01, min_units=20, max_units=30)) == 20
    assert len(top_units(np.full(100, 0.05))) == 0  # none explains enough to inform the HRF


@pytest.fixture(scope="module")
def units():
    return random_params("gauss", 80, np.random.default_rng(5))


@pytest.mark.parametrize("truth", [HRF(7.5, 1.0), HRF(6.0, 1.0)], ids=["shifted", "canonical"])
def test_participant_hrf_recovers_the_response_of_noiseless_data(stim, units, truth):
    data = predict(units, stim, TR, hrf=truth, dtype="float64")
    hrf = estimate_hrf(data, stim, TR)
    result = fit_prf(data, stim, TR, hrf=hrf, return_predictions=True)
    found = HRF.from_record(result.settings.hrf_model)
    assert found.option == "participant" and found.units == 50  # at least 50 units, all 80 good
    assert abs(found.peak_s() - truth.peak_s()) < 0.15
    assert abs(found.delay - truth.delay) < 0.1 and found.dispersion == 1.0
    assert np.median(np.abs(result.params["sigma"] - units["sigma"])) < 0.02
    assert np.median(result.r2) > 0.999
    assert "participant-level two-gamma" in result.settings.hrf
    # predict with the recorded HRF reproduces the fit's own time courses
    again = predict(result.params, stim, TR, hrf=found)
    np.testing.assert_allclose(again, result.predictions, atol=2e-3 * np.abs(data).max())


def test_a_given_hrf_is_held_fixed_and_options_are_checked(stim, units):
    data = predict(units, stim, TR, hrf=HRF(7.0, 1.1), dtype="float64")
    held = fit_prf(data[:8], stim, TR, hrf=HRF(7.0, 1.1, "participant", 99), refine="none")
    assert held.settings.hrf_model == HRF(7.0, 1.1, "participant", 99).describe()
    vertex = fit_prf(data[:8], stim, TR, hrf="vertex", refine="none")
    assert vertex.settings.hrf_model["option"] == "vertex" and "hrf_deriv" in vertex.params
    with pytest.raises(ValueError, match="unknown HRF option 'spm'"):
        fit_prf(data[:8], stim, TR, hrf="spm")
    with pytest.raises(ValueError, match="estimate_hrf"):  # one stage before the fit, not inside it
        fit_prf(data[:8], stim, TR, hrf="participant")


def test_too_few_units_with_signal_keep_the_canonical_hrf(stim):
    noise = np.random.default_rng(0).normal(size=(30, stim.n_frames))
    assert estimate_hrf(noise, stim, TR) == HRF(option="participant", units=0)


def test_the_spread_beyond_errors_recovers_the_true_spread_whatever_each_offset_s_error():
    rng = np.random.default_rng(3)
    true = rng.normal(0.2, 0.5, 400)
    errors = np.exp(rng.uniform(np.log(0.1), np.log(1.0), 400))  # from sharp to as wide as the spread
    offsets = true + errors * rng.standard_normal(400)
    offsets[:6] = 40.0  # fits gone astray
    assert spread_beyond_errors(offsets, errors) == pytest.approx(0.5, rel=0.12)
    robust = 1.4826 * np.median(np.abs(offsets - np.median(offsets)))
    assert robust > 0.6  # what the offsets' own spread says, errors and all


def test_the_delay_s_spread_is_estimated_beyond_the_offsets_errors():
    # units whose delays are spread by 0.71 s, at a noise where the offsets' errors are ~0.4 s
    rng = np.random.default_rng(8)
    stim = Stimulus(np.concatenate([bar_design(148, size=61)] * 2), FOV, run_lengths=(148, 148))
    delays = np.repeat([5.0, 5.5, 6.0, 6.5, 7.0], 80)
    truth = random_params("gauss", len(delays), rng)
    clean = np.concatenate(
        [
            predict({k: v[delays == d] for k, v in truth.items()}, stim, TR, hrf=HRF(d), dtype="float64")
            for d in np.unique(delays)
        ]
    )
    data = clean + 0.8 * clean.std(axis=1, keepdims=True) * ar1_noise(rng, clean.shape, 148)
    nuisance = np.zeros((stim.n_frames, 2))
    nuisance[:148, 0] = nuisance[148:, 1] = 1.0
    common = {"nuisance": nuisance, "slice_time_ref": 0.5, "mem_gb": 1.0, "dtype": "float32"}
    common.update(progress=None, cache=None)
    found = delay_spread_of(data, stim, TR, screen_r2(data, stim, TR, **common), common)
    assert found == pytest.approx(delays.std(), rel=0.2)
