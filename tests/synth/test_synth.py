"""prfmap-synth: stimulus, forward model, dataset layout in each space, and the command line."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest

from prfmap.cli.synth import main
from prfmap.io.aperture import load_aperture
from prfmap.io.bids import find_inputs
from prfmap.io.bold import load_bold
from prfmap.participant.confounds import dummy_scans_from_confounds, read_confounds
from prfmap.participant.preprocess import preprocess_run
from prfmap.synth.config import CLEAN, SynthConfig
from prfmap.synth.dataset import load_truth, make_synthetic_dataset
from prfmap.synth.model import unit_kernels
from prfmap.synth.response import bar_apertures, gaussian_overlap, hrf_kernel


def test_bar_apertures_follow_the_screen_convention():
    cfg = SynthConfig(small=True)
    design = bar_apertures(cfg)
    n_frames = 8 * cfg.steps_per_sweep + 5 * cfg.blank_frames
    assert design.shape == (n_frames, 40, 40) and design.dtype == np.float32
    assert set(np.unique(design)) == {0.0, 1.0}
    assert not design[: cfg.blank_frames].any()
    first = cfg.blank_frames  # sweep 0 moves rightwards: starts at the left (column 0)
    cols = np.flatnonzero(design[first].any(axis=0))
    assert cols.max() < 10
    up = cfg.blank_frames + 2 * cfg.steps_per_sweep + cfg.blank_frames  # third sweep: upwards
    rows = np.flatnonzero(design[up].any(axis=1))
    assert rows.min() > 30  # starts at the bottom: the last rows
    # circular aperture: corners never stimulated
    assert not design[:, 0, 0].any() and not design[:, -1, -1].any()


def test_hrf_kernel_matches_an_independent_exact_integral():
    from prfmap.engine.hrf import hrf_kernels

    for tr in (1.0, 1.5, 2.0):
        mine = hrf_kernel(tr)
        exact = hrf_kernels(tr)[0][: len(mine)]
        assert abs(mine.sum() - 1) < 1e-3
        np.testing.assert_allclose(mine, exact, atol=2e-3)


def test_gaussian_overlap_is_the_covered_fraction():
    design = np.ones((2, 101, 101), np.float32)
    design[1, :, 51:] = 0  # right half blank (x > 0)
    cover = gaussian_overlap(design, 20.0, np.array([0.0, 3.0]), np.array([0.0, 0.0]), np.array([1.0, 1.0]))
    np.testing.assert_allclose(cover[:, 0], 1.0, atol=1e-3)
    assert abs(cover[0, 1] - 0.5) < 0.05  # half of a central pRF (plus the x = 0 column)
    assert cover[1, 1] < 0.01  # a pRF at x = 3 deg sees nothing of the left half


@pytest.fixture(scope="module")
def small_sets(tmp_path_factory):
    out = {}
    for space in ("fsaverage5", "fsLR", "T1w", "fsnative"):
        root = tmp_path_factory.mktemp(space) / "bids"
        make_synthetic_dataset(root, SynthConfig(space=space, small=True, runs=2, seed=3))
        out[space] = root
    return out


@pytest.mark.parametrize("space", ["fsaverage5", "fsLR", "T1w", "fsnative"])
def test_dataset_is_found_and_loaded(small_sets, space):
    root = small_sets[space]
    desc = json.loads((root / "derivatives" / "fmriprep" / "dataset_description.json").read_text())
    assert desc["DatasetType"] == "derivative"
    runs = find_inputs(root, space=space)
    assert len(runs) == 2 and runs[0].tr == 1.5
    assert runs[0].stimulus_key == runs[1].stimulus_key  # same stimulus: runs get averaged
    ap = load_aperture(runs[0].stim_file, tr=runs[0].tr)
    assert ap.fov_deg == 20.0 and ap.design.shape[1:] == (40, 40)
    data, geom = load_bold(runs[0])
    assert data.shape == (geom.n_units, ap.design.shape[0])
    truth = load_truth(root)
    assert all(v.shape == (geom.n_units,) for v in truth.values())
    mask = truth["mask"]
    assert 50 < mask.sum() < 0.5 * geom.n_units
    assert np.isfinite(truth["sigma"][mask]).all() and np.isnan(truth["sigma"][~mask]).all()
    ecc = np.hypot(truth["x"][mask], truth["y"][mask])
    assert ecc.max() < 10 and truth["sigma"][mask].min() > 0.2
    np.testing.assert_allclose(truth["eccentricity"][mask], ecc, rtol=1e-5)
    confounds = read_confounds(runs[0].confounds)
    assert len(confounds) == data.shape[1] and "framewise_displacement" in confounds


def test_fsaverage5_prfs_sit_on_the_occipital_pole(small_sets):
    from nilearn import datasets

    truth = load_truth(small_sets["fsaverage5"])
    mesh = datasets.load_fsaverage("fsaverage5")["pial"]
    pial = np.concatenate([mesh.parts[h].coordinates for h in ("left", "right")])
    mask = truth["mask"]
    assert pial[mask, 1].max() < -55  # occipital
    n_left = mesh.parts["left"].coordinates.shape[0]
    left, right = mask[:n_left], mask[n_left:]
    assert left.any() and right.any()
    # left hemisphere maps the right visual field and vice versa
    assert (truth["x"][:n_left][left] > 0).mean() > 0.95
    assert (truth["x"][n_left:][right] < 0).mean() > 0.95
    # eccentricity grows away from the pole (the centre of the ten most foveal vertices)
    for part, sl in (("left", slice(0, n_left)), ("right", slice(n_left, None))):
        xyz = mesh.parts[part].coordinates[mask[sl]]
        ecc = truth["eccentricity"][sl][mask[sl]]
        dist = np.linalg.norm(xyz - xyz[np.argsort(ecc)[:10]].mean(axis=0), axis=1)
        assert np.corrcoef(dist, ecc)[0, 1] > 0.5
    # the medial wall carries no signal: NaN rows after preprocessing
    run = find_inputs(small_sets["fsaverage5"])[0]
    data, _ = load_bold(run)
    pre = preprocess_run(data, run.tr)
    empty = np.isnan(pre.data).all(axis=1)
    assert 500 < empty.sum() < 2000 and not (empty & mask).any()


def nilearn_kernel(tr: float, delay: float, dispersion: float, sample_time: float, n_taps: int) -> np.ndarray:
    """A unit's per-TR kernel computed numerically from nilearn's two-gamma HRF (the independent
    reference of the synth's exact gamma-CDF kernels): the HRF on a fine grid, convolved with a
    one-TR boxcar, read at ``m TR + sample_time``."""
    from nilearn.glm.first_level.hemodynamic_models import _gamma_difference_hrf

    hrf = _gamma_difference_hrf(
        tr, oversampling=50, delay=delay, undershoot=16.0 + delay - 6.0, dispersion=dispersion
    )
    boxcar = np.zeros((n_taps + 1) * 50)
    boxcar[:50] = 1.0
    fine = np.convolve(boxcar, hrf)[: len(boxcar)]
    return fine[int(round(sample_time / tr * 50)) :: 50][:n_taps]


def _projected(values: np.ndarray, q: np.ndarray) -> np.ndarray:
    return values - (values @ q) @ q.T


def test_fsnative_surfaces_are_the_participants_own(small_sets):
    anat = small_sets["fsnative"] / "derivatives" / "fmriprep" / "sub-01" / "anat"
    run = find_inputs(small_sets["fsnative"], space="fsnative")[0]
    _, geom = load_bold(run)
    truth = load_truth(small_sets["fsnative"])
    start = 0
    for hemi in ("L", "R"):
        inflated = nib.load(anat / f"sub-01_hemi-{hemi}_inflated.surf.gii")
        coords, faces = inflated.agg_data(("pointset", "triangle"))
        assert coords.shape[0] == geom.hemis[hemi] != 10242  # a mesh of its own
        assert faces.max() == coords.shape[0] - 1 and len(np.unique(faces)) == coords.shape[0]
        sphere = nib.load(anat / f"sub-01_hemi-{hemi}_desc-reg_sphere.surf.gii").agg_data("pointset")
        np.testing.assert_allclose(np.linalg.norm(sphere, axis=1), 100, rtol=0.02)
        sulc = nib.load(anat / f"sub-01_hemi-{hemi}_sulc.shape.gii").agg_data()
        assert sulc.shape == (coords.shape[0],)
        mid = nib.load(anat / f"sub-01_hemi-{hemi}_midthickness.surf.gii").agg_data("pointset")
        mask = truth["mask"][start : start + coords.shape[0]]
        start += coords.shape[0]
        assert mask.sum() > 50 and mid[mask, 1].max() < -55  # occipital


def test_fslr_prfs_sit_in_early_visual_cortex(small_sets):
    from prfmap.report.atlas import fslr_labels

    truth = load_truth(small_sets["fsLR"])
    run = find_inputs(small_sets["fsLR"], space="fsLR")[0]
    axis = nib.load(run.bold).header.get_axis(1)
    labels = fslr_labels()
    inside = []
    for name, slc, model in axis.iter_structures():
        hemi = {"CIFTI_STRUCTURE_CORTEX_LEFT": "L", "CIFTI_STRUCTURE_CORTEX_RIGHT": "R"}.get(name)
        if hemi:
            mask = truth["mask"][slc]
            inside.append(np.isin(labels[hemi][model.vertex[mask]], (1, 2, 3)))
    inside = np.concatenate(inside)
    # 150 pRF vertices per hemisphere, less the default 10 % without a pRF
    assert 240 <= inside.size <= 300 and inside.mean() > 0.8  # V1-V3 of HCP-MMP1.0


def test_clean_noise_free_data_is_the_canonical_forward_model(tmp_path):
    root = tmp_path / "bids"
    make_synthetic_dataset(root, SynthConfig(space="T1w", small=True, runs=1, noise=0.0, **CLEAN))
    run = find_inputs(root)[0]
    data, _ = load_bold(run)
    truth = load_truth(root)
    m = truth["mask"]
    np.testing.assert_allclose(truth["sampletime"][m], run.tr / 2)
    np.testing.assert_allclose(truth["hrfdelay"][m], 6.0)
    design = load_aperture(run.stim_file, tr=run.tr).design
    overlap = gaussian_overlap(design, 20.0, truth["x"][m], truth["y"][m], truth["sigma"][m])
    kernel = hrf_kernel(run.tr)
    expected = np.stack([np.convolve(o, kernel)[: design.shape[0]] for o in overlap])
    pre = preprocess_run(data, run.tr, high_pass_hz=0.02).data[m]
    q, _ = np.linalg.qr(
        np.column_stack(
            [np.ones(design.shape[0]), preprocess_run(data[:1], run.tr, high_pass_hz=0.02).nuisance]
        )
    )
    expected = _projected(expected, q)
    r = [np.corrcoef(a, b)[0, 1] for a, b in zip(pre, expected, strict=True)]
    assert np.min(r) > 0.97
    # amplitude: regression slope of the data on the unit-amplitude prediction
    slope = np.sum(pre * expected, axis=1) / np.sum(expected**2, axis=1)
    np.testing.assert_allclose(slope, truth["amplitude"][m], rtol=0.05)


def test_realistic_responses_follow_each_units_hrf_and_slice_time(tmp_path):
    root = tmp_path / "bids"
    make_synthetic_dataset(root, SynthConfig(space="T1w", small=True, runs=1, noise=0.0, drift=0.0))
    run = find_inputs(root)[0]
    data, _ = load_bold(run)
    truth = load_truth(root)
    m = truth["mask"]
    # every unit carries its own HRF and is sampled at its own slice's time (interleaved slices)
    assert np.ptp(truth["hrfdelay"][m]) > 1.5 and np.ptp(truth["hrfdispersion"][m]) > 0.3
    assert len(np.unique(truth["sampletime"][m])) > 3 and np.ptp(truth["sampletime"][m]) > run.tr / 2
    assert truth["noise"].sum() > 0 and not (truth["noise"] & m).any()
    design = load_aperture(run.stim_file, tr=run.tr).design
    overlap = gaussian_overlap(design, 20.0, truth["x"][m], truth["y"][m], truth["sigma"][m])
    n = design.shape[0]
    expected = np.stack(
        [
            np.convolve(o, nilearn_kernel(run.tr, d, w, t, 24))[:n]
            for o, d, w, t in zip(
                overlap, truth["hrfdelay"][m], truth["hrfdispersion"][m], truth["sampletime"][m], strict=True
            )
        ]
    )
    psc = data[m] / data[m].mean(axis=1, keepdims=True) * 100 - 100
    q = np.ones((n, 1)) / np.sqrt(n)
    expected, psc = _projected(expected, q), _projected(psc.astype(np.float64), q)
    r = [np.corrcoef(a, b)[0, 1] for a, b in zip(psc, expected, strict=True)]
    assert np.min(r) > 0.999
    slope = np.sum(psc * expected, axis=1) / np.sum(expected**2, axis=1)
    np.testing.assert_allclose(slope, truth["amplitude"][m], rtol=0.01)


def test_only_the_global_noise_model_shares_a_fluctuation_across_units(tmp_path):
    shared = {}
    for model in ("realistic", "global"):
        root = make_synthetic_dataset(
            tmp_path / model, SynthConfig(space="T1w", small=True, runs=1, noise_model=model, drift=0.0)
        )
        run = find_inputs(root)[0]
        data, _ = load_bold(run)
        noise = preprocess_run(data, run.tr, high_pass_hz=0.0).data[load_truth(root)["noise"]]
        levels = noise.std(axis=1)
        assert 0.4 < np.median(levels) < 0.6 and np.percentile(levels, 90) > 1.3 * np.median(levels)
        corr = np.corrcoef(noise)
        shared[model] = np.mean(corr[np.triu_indices_from(corr, 1)])
    assert abs(shared["realistic"]) < 0.02 and shared["global"] > 0.05


def test_unit_kernels_match_nilearn_and_integrate_to_one():
    rng = np.random.default_rng(0)
    for tr in (0.8, 1.5, 2.0):
        delay, disp = rng.uniform(5, 7, 4), rng.uniform(0.8, 1.2, 4)
        times = rng.uniform(0, tr, 4)
        exact = unit_kernels(tr, times, delay, disp)
        assert np.all(np.abs(exact.sum(axis=1) - 1) < 1e-3)
        for row, d, w, t in zip(exact, delay, disp, times, strict=True):
            reference = nilearn_kernel(tr, d, w, t, len(row))
            assert np.abs(row - reference).max() < 2e-3 * max(tr, 1.0)
    # a later sample sees the response later: the kernel's centre of mass moves by the offset
    early, late = unit_kernels(1.0, np.array([0.0, 0.9]), np.full(2, 6.0), np.ones(2))
    taps = np.arange(len(early))
    assert abs((early @ taps - late @ taps) - 0.9) < 0.02


def test_sidecars_say_how_volumes_sample_time(tmp_path):
    expected = {
        "uncorrected": (True, {"SliceTimingCorrected": False}),
        "corrected": (True, {"SliceTimingCorrected": True, "StartTime": 0.675}),
        "start": (False, {"SliceTimingCorrected": False}),
        "middle": (False, {"SliceTimingCorrected": True, "StartTime": 0.75}),
    }
    for mode, (with_slices, derivative) in expected.items():
        root = make_synthetic_dataset(
            tmp_path / mode, SynthConfig(space="T1w", small=True, runs=1, slice_timing=mode)
        )
        raw = json.loads((root / "sub-01/func/sub-01_task-prf_run-1_bold.json").read_text())
        prep = json.loads(
            next((root / "derivatives/fmriprep/sub-01/func").glob("*_desc-preproc_bold.json")).read_text()
        )
        assert {k: prep[k] for k in derivative} == derivative
        assert ("StartTime" in prep) == ("StartTime" in derivative)
        assert ("SliceTiming" in raw) == with_slices
        raw_bold = nib.load(root / "sub-01/func/sub-01_task-prf_run-1_bold.nii.gz")
        if with_slices:  # one raw slice per SliceTiming entry, all within the TR
            assert len(raw["SliceTiming"]) == raw_bold.shape[2] == 10
            assert max(raw["SliceTiming"]) < raw["RepetitionTime"]
        truth = load_truth(root)
        times = truth["sampletime"][truth["mask"]]
        if mode == "uncorrected":
            gap = np.abs(times[:, None] - np.asarray(raw["SliceTiming"])[None, :]).min(axis=1)
            assert gap.max() < 1e-6 and len(np.unique(times)) > 3
        else:
            np.testing.assert_allclose(times, derivative.get("StartTime", 0.0), atol=1e-6)


def test_seed_reproducible_and_dummy_scans(tmp_path):
    cfg = SynthConfig(space="T1w", small=True, runs=1, dummy_scans=3, seed=5)
    a = make_synthetic_dataset(tmp_path / "a", cfg)
    b = make_synthetic_dataset(tmp_path / "b", cfg)
    name = "sub-01_task-prf_run-1_space-T1w_desc-preproc_bold.nii.gz"
    img_a = nib.load(a / "derivatives/fmriprep/sub-01/func" / name)
    img_b = nib.load(b / "derivatives/fmriprep/sub-01/func" / name)
    np.testing.assert_array_equal(img_a.get_fdata(), img_b.get_fdata())
    run = find_inputs(a)[0]
    frames = load_aperture(run.stim_file, tr=run.tr).design.shape[0]
    assert img_a.shape[3] == frames + 3
    assert dummy_scans_from_confounds(read_confounds(run.confounds)) == 3


def test_engine_recovers_the_truth(tmp_path):
    from prfmap.engine import Stimulus, fit_prf
    from prfmap.participant.preprocess import combine_runs

    root = tmp_path / "bids"
    make_synthetic_dataset(root, SynthConfig(space="fsLR", small=True, runs=2, noise=0.3))
    runs = find_inputs(root)
    pre, keys, designs = [], [], {}
    for run in runs:
        data, _ = load_bold(run)
        pre.append(preprocess_run(data, run.tr))
        keys.append(run.stimulus_key)
        designs[run.stimulus_key] = load_aperture(run.stim_file, tr=run.tr).design
    comb = combine_runs(pre, keys, designs)
    stim = Stimulus(comb.design, fov_deg=20.0, run_lengths=comb.run_lengths)
    res = fit_prf(comb.data, stim, runs[0].tr, nuisance=comb.nuisance)
    truth = load_truth(root)
    m = truth["mask"]
    err = np.hypot(res.params["x"][m] - truth["x"][m], res.params["y"][m] - truth["y"][m])
    assert np.median(err) < 0.3
    assert np.median(np.abs(res.params["sigma"][m] - truth["sigma"][m])) < 0.3
    assert np.median(res.r2[~m]) < 0.2


def test_cli_writes_a_dataset_and_rejects_bad_options(tmp_path, capsys):
    out = tmp_path / "ds"
    assert main([str(out), "--space", "T1w", "--small", "--runs", "1", "--seed", "2"]) == 0
    assert "wrote 1 participant" in capsys.readouterr().out
    assert (out / "stimuli" / "bars.nii.gz").is_file()
    assert (out / "participants.tsv").read_text().splitlines()[1].startswith("sub-01")
    events = (out / "sub-01/func/sub-01_task-prf_run-1_events.tsv").read_text()
    assert "stim_file" in events and "bars.nii.gz" in events
    sidecar = json.loads((out / "sub-01/func/sub-01_task-prf_run-1_bold.json").read_text())
    assert sidecar["RepetitionTime"] == 1.5 and sidecar["TaskName"] == "prf"
    assert len(sidecar["SliceTiming"]) == 10  # uncorrected by default: one time per slice
    truth = json.loads((out / "derivatives/prfsynth/truth.json").read_text())["Settings"]
    assert truth["slice_timing"] == "uncorrected" and truth["hrf_delay_jitter"] == 1.0
    clean = tmp_path / "clean"
    assert (
        main([str(clean), "--space", "T1w", "--small", "--runs", "1", "--clean", "--hrf-delay-jitter", "0.5"])
        == 0
    )
    truth = json.loads((clean / "derivatives/prfsynth/truth.json").read_text())["Settings"]
    assert {k: truth[k] for k in CLEAN} == CLEAN  # --clean wins over the options it sets
    for argv, match in (
        ([str(out)], "not empty"),
        ([str(tmp_path / "x"), "--space", "fsaverage"], "invalid choice"),
        ([str(tmp_path / "x"), "--noise", "-1"], "zero or a positive number"),
        ([str(tmp_path / "x"), "--runs", "0"], "positive integer"),
        ([str(tmp_path / "x"), "--slice-timing", "late"], "invalid choice"),
        ([str(tmp_path / "x"), "--noise-fraction", "1.5"], "must lie in [0, 1]"),
        ([str(tmp_path / "x"), "--hrf-dispersion-jitter", "1"], "must lie in [0, 1)"),
    ):
        with pytest.raises(SystemExit) as info:
            main(argv)
        assert info.value.code == 64
        err = capsys.readouterr().err
        assert match in err and err.count("\n") == 1
    assert main([str(out), "--space", "T1w", "--small", "--runs", "1", "--overwrite"]) == 0
