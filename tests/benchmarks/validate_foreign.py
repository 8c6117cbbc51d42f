"""Intervals on data prfmap did not generate: a second, independent pRF simulator (issue 37).

prfmap-synth shares prfmap's forward model (an HRF integrated over each TR, its Gaussian overlap),
so intervals measured on it can look better than they are. This script keeps only prfmap-synth's
files (an fsaverage5 participant in fMRIPrep's layout, its pRF vertices' visual-field positions) and
replaces what is simulated, the way other simulators do it:

- its own bar stimulus: a 10° circular field on a 121-pixel grid, bars of 2.5° (a quarter of the
  radius), eight directions in a different order per run, each sweep 20 TRs, blanks of 10 TRs
  after every second sweep and at both ends;
- the pRF's response is the stimulus frames weighted by the Gaussian integrated over each pixel,
  convolved in TR steps with nilearn's SPM HRF *sampled at each TR's start*
  (``spm_hrf(tr, oversampling=1)``, as prfpy and popeye do), one HRF for every vertex;
- small foveal pRFs: σ = (0.1 + 0.08 · eccentricity) · exp(N(0, 0.25²)) degrees;
- AR(1) noise with ρ 0.3, linear drifts of up to ±2 % per run, a 1,000 baseline; amplitudes
  drawn uniformly in [1, 3] % of it; ``--noise`` is the noise SD in percent;
- sidecars say only RepetitionTime: the volumes sample the start of each TR.

Runs the participant level with the defaults (and any options after ``--``) and prints one JSON line
per participant: the measures of ``validate_uncertainty.py`` (coverage of x, y and σ per SNR bin,
σ bias, σ at the floor, doubtful share, runaways, the sidecar's test–retest consistency) and the
doubtful share and σ bias per eccentricity band.

    KERAS_BACKEND=jax python tests/benchmarks/validate_foreign.py --seeds 5 6 --noise 0.5 1.0 \
        [--keep DIR] [--table FILE] [-- --covariance sandwich]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy.signal import lfilter
from scipy.special import erf

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_timing_cvr2 import APP, emit, participant  # noqa: E402
from validate_uncertainty import measure  # noqa: E402

sys.path.insert(0, str(APP))

from prfmap.engine import catalog  # noqa: E402
from prfmap.synth import SynthConfig, make_synthetic_dataset  # noqa: E402

RADIUS = 10.0
PIXELS = 121
BAR = 2.5
SWEEP = 20
BLANK = 10
RHO = 0.3
BASELINE = 1000.0
ECC_BANDS = ((0, 2), (2, 4), (4, 7), (7, 10), (10, np.inf))


def bar_stimulus(n_frames: int, order: list[int]) -> np.ndarray:
    """Apertures (frames, rows, columns): bars sweeping in the directions ``order`` (× 45°)."""
    edges = np.linspace(-RADIUS, RADIUS, PIXELS + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    xx, yy = np.meshgrid(centres, -centres)
    field = np.hypot(xx, yy) <= RADIUS
    frames = [np.zeros((PIXELS, PIXELS), bool)] * BLANK
    for i, direction in enumerate(order):
        angle = np.radians(45 * direction)
        along = xx * np.cos(angle) + yy * np.sin(angle)
        for position in np.linspace(-RADIUS - BAR / 2, RADIUS + BAR / 2, SWEEP):
            frames.append(field & (np.abs(along - position) <= BAR / 2))
        if i % 2 == 1:
            frames.extend([np.zeros((PIXELS, PIXELS), bool)] * BLANK)
    frames.extend([np.zeros((PIXELS, PIXELS), bool)] * n_frames)
    return np.asarray(frames[:n_frames], dtype=np.uint8)


def pixel_weights(x: np.ndarray, y: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """(units, rows, columns): each Gaussian's volume inside each pixel (exact, by erf)."""
    edges = np.linspace(-RADIUS, RADIUS, PIXELS + 1)
    s = np.sqrt(2) * sigma[:, None]
    cx = 0.5 * np.diff(erf((edges[None, :] - x[:, None]) / s), axis=1)
    cy = 0.5 * np.diff(erf((edges[None, ::-1] - y[:, None]) / s), axis=1)  # rows top to bottom
    return np.abs(cy)[:, :, None] * cx[:, None, :]


def responses(design: np.ndarray, x, y, sigma, tr: float, sampling: str) -> np.ndarray:
    """(units, frames): overlap with each frame, convolved with SPM's HRF sampled at the TR's start
    (``sampling="start"``) or integrated over each frame's TR and read at the volume's start
    (``"integrated"``: prfmap's own forward model, the control)."""
    from nilearn.glm.first_level import spm_hrf

    overlap = np.einsum("uij,fij->uf", pixel_weights(x, y, sigma), design.astype(float))
    if sampling == "start":
        hrf = spm_hrf(tr, oversampling=1)
    else:
        fine = spm_hrf(tr, oversampling=50)
        hrf = np.array([fine[max(0, 50 * k - 50) : 50 * k].sum() for k in range(fine.size // 50)])
    hrf = hrf / hrf.sum()
    n = design.shape[0]
    return np.stack([np.convolve(row, hrf)[:n] for row in overlap])


def ar1(shape: tuple[int, int], sd: float, rng: np.random.Generator) -> np.ndarray:
    """AR(1) noise of marginal SD ``sd`` along the last axis."""
    innovations = rng.normal(0, sd * np.sqrt(1 - RHO**2), shape)
    first = rng.normal(0, sd, shape[0])
    innovations[:, 0] = first
    return lfilter([1.0], [1.0, -RHO], innovations, axis=1)


def hemisphere_files(root: Path, hemi: str) -> tuple[list[Path], dict[str, Path]]:
    """The participant's BOLD files of one hemisphere (runs in order) and its truth maps by label."""
    func = root / "derivatives" / "fmriprep" / "sub-01" / "func"
    bold = sorted(func.glob(f"*hemi-{hemi}_space-fsaverage5_bold.func.gii"))
    truth = root / "derivatives" / "prfsynth" / "sub-01" / "func"
    maps = {p.name.split("_desc-")[1].split("_")[0]: p for p in truth.glob(f"*hemi-{hemi}*_desc-*.func.gii")}
    return bold, maps


def rewrite(root: Path, noise: float, seed: int, sampling: str) -> None:
    """Replace prfmap-synth's stimulus, BOLD and truth with this simulator's."""
    rng = np.random.default_rng([seed, 37])
    stimuli = root / "stimuli"
    stim_files = sorted(stimuli.glob("*.nii.gz"))
    n_frames = nib.load(stim_files[0]).shape[-1]
    tr = json.loads(next(stimuli.glob("*.json")).read_text())["RepetitionTime"]
    designs = []
    for run, path in enumerate(stim_files):
        order = list(rng.permutation(8)) if run else [0, 2, 4, 6, 1, 3, 5, 7]
        design = bar_stimulus(n_frames, order)
        designs.append(design)
        img = nib.Nifti1Image(np.moveaxis(design, 0, -1)[:, :, None, :], np.eye(4))
        nib.save(img, path)
        sidecar = path.with_name(path.name.replace(".nii.gz", ".json"))
        meta = json.loads(sidecar.read_text())
        meta["FieldOfViewDeg"] = 2 * RADIUS
        meta["Description"] = "validate_foreign.py bars: rows top to bottom, columns left to right"
        sidecar.write_text(json.dumps(meta, indent=2))
    for path in (root / "sub-01" / "func").glob("*_bold.json"):
        meta = json.loads(path.read_text())
        path.write_text(json.dumps({k: meta[k] for k in ("RepetitionTime", "TaskName") if k in meta}))
    for path in (root / "derivatives" / "fmriprep" / "sub-01" / "func").glob("*_bold.json"):
        path.write_text(json.dumps({"RepetitionTime": tr}))
    for hemi in "LR":
        bold, maps = hemisphere_files(root, hemi)
        mask = nib.load(maps["prf"]).darrays[0].data > 0.5
        x = nib.load(maps["x"]).darrays[0].data[mask].astype(float)
        y = nib.load(maps["y"]).darrays[0].data[mask].astype(float)
        ecc = np.hypot(x, y)
        sigma = (0.1 + 0.08 * ecc) * np.exp(rng.normal(0, 0.25, ecc.size))
        amplitude = rng.uniform(1, 3, ecc.size)
        if len(stim_files) == 1:
            designs = designs * len(bold)
        for path, design in zip(bold, designs, strict=True):
            img = nib.load(path)
            data = np.column_stack([d.data for d in img.darrays]).astype(float)
            signal = data.std(axis=1) > 0
            n = int(signal.sum())
            series = np.zeros((n, n_frames))
            where = np.flatnonzero(signal)
            prf = np.isin(where, np.flatnonzero(mask))
            series[prf] = amplitude[:, None] * responses(design, x, y, sigma, tr, sampling)
            slope = rng.uniform(-2, 2, n)
            drift = slope[:, None] * np.linspace(-0.5, 0.5, n_frames)[None, :]
            series = BASELINE * (1 + (series + drift + ar1((n, n_frames), noise, rng)) / 100)
            data[where] = series
            for k, darray in enumerate(img.darrays):
                darray.data = data[:, k].astype(np.float32)
            nib.save(img, path)
        truth = {"sigma": sigma, "amplitude": amplitude}
        for label, values in truth.items():
            img = nib.load(maps[label])
            full = np.full(mask.size, np.nan, np.float32)
            full[mask] = values
            img.darrays[0].data = full
            nib.save(img, maps[label])


def by_eccentricity(bids: Path, out: Path) -> dict:
    """The doubtful share and the median σ bias per eccentricity band of the true pRFs."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from helpers import read_maps
    from prfmap.synth import load_truth

    truth = load_truth(bids)
    maps = read_maps(bids, out, ["x", "y", "sigma", "status"])
    doubtful = catalog.doubtful(catalog.status_codes(maps["status"]))
    fitted = truth["mask"] & np.isfinite(maps["x"])
    bands = {}
    for low, high in ECC_BANDS:
        sel = fitted & (truth["eccentricity"] >= low) & (truth["eccentricity"] < high)
        if sel.sum():
            bands[f"{low:g}-{high:g}"] = {
                "n": int(sel.sum()),
                "doubtful": round(float(np.mean(doubtful[sel])), 3),
                "sigma_bias": round(float(np.nanmedian((maps["sigma"] - truth["sigma"])[sel])), 3),
            }
    return bands


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[5])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5])
    parser.add_argument("--hrf-sampling", choices=("start", "integrated"), default="start")
    parser.add_argument("--keep", type=Path, help="folder for the datasets and outputs (kept)")
    parser.add_argument("--table", type=Path, help="also append the JSON lines to this file")
    parser.add_argument("extra", nargs="*", help="more prfmap options (after --)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="validate-foreign-"))
    for seed in args.seeds:
        for level in args.noise:
            case = root / f"foreign_seed{seed}_{level:g}_{args.hrf_sampling}"
            bids = case / "bids"
            if not (bids / "dataset_description.json").is_file():
                config = SynthConfig(seed=seed, slice_timing="start", sweep_order="shuffled")
                make_synthetic_dataset(bids, config)
                rewrite(bids, level, seed, args.hrf_sampling)
            out = case / f"out{''.join(args.extra).replace('-', '_')}"
            wall = participant(bids, out, *args.extra)
            record = {
                "generator": "foreign",
                "seed": seed,
                "noise": level,
                "hrf_sampling": args.hrf_sampling,
                "extra": args.extra,
                "wall_s": round(wall, 1),
                **measure(bids, out),
                "by_eccentricity": by_eccentricity(bids, out),
            }
            emit(record, args.table)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
