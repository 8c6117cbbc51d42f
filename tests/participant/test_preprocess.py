"""Preprocessing: DCT basis, percent signal change, confounds, run averaging/concatenation."""

from __future__ import annotations

import numpy as np
import pytest

from prfmap.errors import BadDataError, MissingInputError, UsageError
from prfmap.participant.confounds import dummy_scans_from_confounds, read_confounds, select_confounds
from prfmap.participant.preprocess import PreprocessedRun, combine_runs, dct_basis, preprocess_run
from prfmap.participant.repair import FrameRepair, repair_nonfinite


def test_dct_basis_matches_spm_definition():
    basis = dct_basis(200, 1.5, 0.01)
    # SPM: components k = 1 .. floor(2 N TR f); here 2 * 200 * 1.5 * 0.01 = 6
    assert basis.shape == (200, 6)
    np.testing.assert_allclose(basis.T @ basis, np.eye(6), atol=1e-12)
    np.testing.assert_allclose(basis.sum(axis=0), 0, atol=1e-12)
    t = np.arange(200)
    np.testing.assert_allclose(basis[:, 2], np.sqrt(2 / 200) * np.cos(np.pi * 3 * (t + 0.5) / 200))
    assert dct_basis(200, 1.5, 0).shape == (200, 0)
    # frequency of component k is k / (2 N TR): the last one kept lies below the cut-off
    assert 6 / (2 * 200 * 1.5) <= 0.01 < 7 / (2 * 200 * 1.5)


def test_percent_signal_change_and_drift_removal():
    rng = np.random.default_rng(0)
    n, tr = 120, 2.0
    t = np.arange(n)
    signal = np.sin(2 * np.pi * t * tr / 30.0)  # 1/30 Hz, well above the cut-off
    drift = 5 * np.cos(np.pi * (t + 0.5) / n)  # the first DCT component
    raw = 1000 * (1 + (2.0 * signal + drift) / 100)
    data = np.stack([raw, raw * 0.5, np.full(n, 800.0), raw, -raw])
    data[3, 10] = np.nan
    res = preprocess_run(data + rng.normal(0, 1e-3, data.shape) * [[1], [1], [0], [1], [1]], tr)
    assert res.data.dtype == np.float32 and res.data.shape == (5, n)
    q, _ = np.linalg.qr(np.column_stack([np.ones(n), dct_basis(n, tr, 0.01)]))
    expected = 2.0 * signal - q @ (q.T @ (2.0 * signal))
    # first two units: same percent change whatever the scale; the drift is gone; the unit with one
    # NaN frame is repaired (interpolated) and counted, not dropped
    for u in (0, 1):
        np.testing.assert_allclose(res.data[u], expected, atol=0.01)
    others = np.arange(n) != 10
    assert np.abs(res.data[3] - expected)[others].max() < 0.05
    assert abs(res.data[3, 10] - expected[10]) < 0.3  # one frame of a 2 % sine, interpolated
    assert res.repair == FrameRepair(repaired_units=1, repaired_frames=1, most_frames=1)
    assert np.isnan(res.data[[2, 4]]).all()  # constant, negative mean
    assert res.nuisance.shape == (n, dct_basis(n, tr, 0.01).shape[1])


def test_series_already_in_percent_signal_change_are_fitted_as_given():
    """``--bold-scale percent``: the series are the signal change; the same data as raw BOLD on a
    baseline of 1000 give the same preprocessed series; demeaned or z-scored raw BOLD is refused."""
    n, tr = 150, 1.5
    raw = _bold(40, n, tr)
    percent = 100 * (raw / raw.mean(axis=1, keepdims=True) - 1)
    as_raw = preprocess_run(raw, tr, dummy_scans=2, source="run-1_bold.nii.gz")
    as_percent = preprocess_run(percent, tr, dummy_scans=2, bold_scale="percent")
    np.testing.assert_allclose(as_percent.data, as_raw.data, atol=2e-3)
    assert np.isfinite(as_percent.data).all()
    np.testing.assert_allclose(as_percent.data.mean(axis=1), 0, atol=1e-4)
    z = (percent - percent.mean(axis=1, keepdims=True)) / percent.std(axis=1, keepdims=True)
    for series in (percent, z, raw - raw.mean(axis=1, keepdims=True)):
        with pytest.raises(
            BadDataError, match=r"run-1_bold.nii.gz looks demeaned or z-scored .*--bold-scale percent"
        ):
            preprocess_run(series, tr, source="run-1_bold.nii.gz")
    low_snr = 100 + np.random.default_rng(1).normal(0, 20, (40, n))  # a temporal SNR of 5 is BOLD
    assert np.isfinite(preprocess_run(low_snr, tr).data).all()


def _bold(n_units: int, n: int, tr: float, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(n) * tr
    signal = 2.0 * np.sin(2 * np.pi * t / 24.0 + rng.uniform(0, 6, (n_units, 1)))
    return 1000 * (1 + signal / 100) + rng.normal(0, 0.5, (n_units, n))


def test_a_few_non_finite_frames_are_interpolated():
    n, tr = 200, 1.5
    data = _bold(4, n, tr)
    broken = data.copy()
    broken[0, [5, 60, 61, 199]] = np.nan  # 2 % of frames, a 2-frame gap, the last frame
    broken[1, 0] = np.inf
    broken[2, 100:102] = -np.inf
    repaired, counts = repair_nonfinite(broken, tr)
    assert np.isfinite(repaired).all()
    assert counts == FrameRepair(repaired_units=3, repaired_frames=7, most_frames=4, refused_units=0)
    np.testing.assert_allclose(repaired[0, 60], data[0, 59] + (data[0, 62] - data[0, 59]) / 3)
    assert repaired[0, 199] == data[0, 198] and repaired[1, 0] == data[1, 1]  # ends: nearest value
    np.testing.assert_array_equal(repaired[3], data[3])
    clean, fixed = preprocess_run(data, tr).data, preprocess_run(broken, tr).data
    touched = ~np.isfinite(broken)
    assert np.isfinite(fixed).all() and np.abs(fixed - clean)[~touched].max() < 0.1
    assert np.abs(fixed - clean)[touched].max() < 1.0  # a 2 % sine, interpolated over <= 4.5 s
    message = preprocess_run(broken, tr).repair.message("run-1")
    assert message == (
        "run-1: 3 unit(s) with non-finite frames repaired by linear interpolation "
        "(7 frame(s) in all, at most 4 in one unit)"
    )


def test_units_with_too_many_non_finite_frames_are_refused_and_counted():
    n, tr = 200, 1.5
    data = _bold(5, n, tr)
    data[0, ::15] = np.nan  # 14 frames: 7 % > 5 %
    data[1, 50:54] = np.nan  # 4 consecutive frames: 6 s > 4 s
    data[2, 50:52] = np.nan  # 2 consecutive frames (3 s): repaired
    data[3] = np.nan  # no signal at all: neither repaired nor refused
    res = preprocess_run(data, tr)
    assert np.isnan(res.data[[0, 1, 3]]).all() and np.isfinite(res.data[[2, 4]]).all()
    assert res.repair == FrameRepair(repaired_units=1, repaired_frames=2, most_frames=2, refused_units=2)
    assert (
        "2 unit(s) refused (NaN in every map): more than 5% of their frames non-finite or a gap "
        "over 4 s" in res.repair.message("run-2")
    )
    # the gap limit is in seconds: at a TR of 1 s, four frames are a 4-s gap and are repaired
    assert repair_nonfinite(data[1:2], 1.0)[1].repaired_units == 1
    assert preprocess_run(_bold(2, n, tr), tr).repair.message("run-3") is None


def test_dummy_scans_and_confounds():
    rng = np.random.default_rng(1)
    n = 60
    nuisance_signal = rng.normal(size=n + 3)
    data = 500 + 10 * nuisance_signal[None, :] + rng.normal(0, 1e-6, (4, n + 3))
    data[:, :3] += 300  # non-steady-state volumes
    conf = np.column_stack([nuisance_signal, np.r_[np.nan, np.ones(n + 2)]])
    res = preprocess_run(data, 1.0, dummy_scans=3, high_pass_hz=0, confounds=conf)
    assert res.data.shape == (4, n)
    np.testing.assert_allclose(res.data, 0, atol=1e-3)  # all explained by the confound
    assert res.nuisance.shape == (n, 2)
    with pytest.raises(BadDataError, match="confounds have 5 rows"):
        preprocess_run(data, 1.0, confounds=conf[:5])
    with pytest.raises(BadDataError, match="dummy scans"):
        preprocess_run(data, 1.0, dummy_scans=n + 2)


def test_confound_table_helpers(tmp_path):
    path = tmp_path / "conf.tsv"
    path.write_text(
        "trans_x\tframewise_displacement\tmotion_outlier00\tmotion_outlier01\t"
        "non_steady_state_outlier00\tnon_steady_state_outlier_01\n"
        "0.1\tn/a\t0\t0\t1\t0\n0.2\t0.3\t0\t0\t0\t1\n0.3\t0.1\t1\t0\t0\t0\n0.1\t0.2\t0\t1\t0\t0\n"
    )
    table = read_confounds(path)
    assert dummy_scans_from_confounds(table) == 2
    assert dummy_scans_from_confounds(table.drop(columns=[c for c in table if "steady" in c])) == 0
    values = select_confounds(table, ["trans_x", "motion_outlier*", "framewise_displacement"])
    assert values.shape == (4, 4)
    assert np.isnan(values[0, 3])
    with pytest.raises(UsageError, match="no column 'rot_q' in conf.tsv"):
        select_confounds(table, ["rot_q"], str(path))


def _run(data: np.ndarray, tr: float = 1.0, hp: float = 0.02) -> PreprocessedRun:
    return preprocess_run(data, tr, high_pass_hz=hp)


def test_same_stimulus_runs_are_averaged():
    rng = np.random.default_rng(2)
    a = _run(100 + rng.normal(size=(3, 50)))
    b = _run(100 + rng.normal(size=(3, 50)))
    design = np.zeros((50, 4, 4), np.float32)
    out = combine_runs([a, b], ["s", "s"], {"s": design})
    np.testing.assert_allclose(out.data, (a.data + b.data) / 2, rtol=1e-6)
    assert out.run_lengths == [50] and out.design.shape == (50, 4, 4)
    # identical DCT bases of the two runs collapse to one orthonormal basis, orthogonal to 1
    k = dct_basis(50, 1.0, 0.02).shape[1]
    assert out.nuisance.shape == (50, k)
    np.testing.assert_allclose(out.nuisance.T @ out.nuisance, np.eye(k), atol=1e-10)
    np.testing.assert_allclose(out.nuisance.sum(axis=0), 0, atol=1e-10)


def test_different_stimuli_are_concatenated_block_diagonally():
    rng = np.random.default_rng(3)
    a = _run(100 + rng.normal(size=(2, 40)))
    b = _run(100 + rng.normal(size=(2, 60)))
    c = _run(100 + rng.normal(size=(2, 40)))
    designs = {"bars": np.zeros((40, 3, 3)), "wedges": np.ones((60, 3, 3))}
    out = combine_runs([a, b, c], ["bars", "wedges", "bars"], designs)
    assert out.run_lengths == [40, 60]
    assert out.data.shape == (2, 100) and out.design.shape == (100, 3, 3)
    np.testing.assert_allclose(out.data[:, :40], (a.data + c.data) / 2, rtol=1e-6)
    np.testing.assert_array_equal(out.data[:, 40:], b.data)
    assert out.design[:40].max() == 0 and out.design[40:].min() == 1
    ka, kb = dct_basis(40, 1.0, 0.02).shape[1], dct_basis(60, 1.0, 0.02).shape[1]
    assert out.nuisance.shape == (100, ka + kb + 1)
    assert not out.nuisance[40:, :ka].any() and not out.nuisance[:40, ka : ka + kb].any()
    # with the engine's global constant, the last column spans a constant per run
    span = np.column_stack([np.ones(100), out.nuisance])
    run2 = np.r_[np.zeros(40), np.ones(60)]
    coef, *_ = np.linalg.lstsq(span, run2, rcond=None)
    np.testing.assert_allclose(span @ coef, run2, atol=1e-10)


def test_combine_errors():
    a = _run(100 + np.random.default_rng(4).normal(size=(2, 40)))
    b = _run(100 + np.random.default_rng(5).normal(size=(2, 41)))
    with pytest.raises(
        BadDataError, match="has 40 frames but its runs have 41"
    ):  # names the run that differs
        combine_runs([a, b], ["s", "s"], {"s": np.zeros((40, 2, 2))})
    with pytest.raises(BadDataError, match="has 39 frames but its runs have 40"):
        combine_runs([a], ["s"], {"s": np.zeros((39, 2, 2))})


def test_read_confounds_missing(tmp_path):
    with pytest.raises(MissingInputError, match="none.tsv"):
        read_confounds(tmp_path / "none.tsv")
