"""Measurements of docs/validation.md, "Noise model" and "Uncertainty" (issue 17).

Writes ``prfmap-synth`` fsaverage5 participants (2 runs; per-unit HRF jitter, drifts and the synth's
small foveal pRFs by default) for each noise model and level asked for, runs the participant level
(defaults, cvr2 on) with each ``--noise-model`` asked for in a subprocess, and prints one JSON line
per participant and option: σ bias, σ at the floor, centre error, runaways (centre > 5° from the
truth) and whether they are flagged, the share of true pRFs flagged, the coverage of the nominal
95 % intervals of x, y and σ on the unflagged pRF vertices per SNR bin, cvr2, and with two runs the
sidecar's test–retest consistency (``VarianceExplained.TestRetest``; ``--synth sweep_order=shuffled``
for runs of different bar orders).

    KERAS_BACKEND=jax python tests/benchmarks/validate_uncertainty.py --seeds 11 12 \
        --noise-models ar1 realistic --noise 0.5 1.0 --options ols ar1 [--keep DIR] [--table FILE]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.stats import median_abs_deviation

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_timing_cvr2 import APP, emit, participant  # noqa: E402

sys.path.insert(0, str(APP))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import read_maps  # noqa: E402
from prfmap.engine import catalog  # noqa: E402
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset  # noqa: E402

Z95 = 1.959963984540054
SNR_BINS = ((0.0, 0.5), (0.5, 1.0), (1.0, 2.0), (2.0, np.inf))
"""Bins of the SNR a unit's fitted r² implies (:func:`snr`)."""


def coverage(maps, se, lower, upper, truth, keep) -> dict:
    """Share of ``keep`` units whose 95 % intervals contain the truth, for x, y and σ."""
    out = {}
    for key in ("x", "y"):
        out[key] = float(np.mean(np.abs(maps[key] - truth[key])[keep] <= Z95 * se[key][keep]))
    inside = (lower["sigma"] <= truth["sigma"]) & (truth["sigma"] <= upper["sigma"])
    out["sigma"] = float(np.mean(inside[keep]))
    return {k: round(v, 3) for k, v in out.items()}


def sigma_calibration(maps, lower, upper, truth, keep) -> dict:
    """How σ's errors in log σ compare with what its intervals say, on the ``keep`` units.

    ``z`` is the error of log σ over the interval's standard deviation (its log width over 2 × 1.96):
    its SD about its mean (1 for calibrated intervals), the SD its median absolute deviation implies
    (the core's, not swayed by a tail), the share beyond ±1.96 (0.05), and the errors' variance about
    a common mean (σ's bias) fitted as ``scale · sd² + extra²`` (Gaussian likelihood): ``scale`` 1 and
    ``extra`` 0 for calibrated intervals; ``extra`` is the part of the error the intervals' widths do
    not follow. Meant for intervals centred on the estimate in log σ (``--sigma-prior none``): under
    the prior, σ is the posterior mode and its interval also holds the maximum-likelihood one.
    """
    with np.errstate(invalid="ignore", divide="ignore"):
        sd = (np.log(upper["sigma"]) - np.log(lower["sigma"])) / (2 * Z95)
        error = np.log(maps["sigma"]) - np.log(truth["sigma"])
    sel = keep & np.isfinite(sd) & (sd > 0) & np.isfinite(error)
    if sel.sum() < 20:
        return {}
    e, s = error[sel], sd[sel]
    z = e / s

    def negative(theta: np.ndarray) -> float:
        variance = np.exp(theta[0]) * s**2 + np.exp(theta[1])
        return float(np.sum(0.5 * np.log(variance) + 0.5 * (e - theta[2]) ** 2 / variance))

    best = minimize(negative, x0=[0.0, np.log(0.01), 0.0], method="Nelder-Mead", options={"maxiter": 4000})
    return {
        "n": int(sel.sum()),
        "z_sd": round(float(np.std(z)), 3),
        "z_sd_mad": round(float(median_abs_deviation(z, scale="normal")), 3),
        "beyond_1.96": round(float(np.mean(np.abs(z) > Z95)), 3),
        "scale": round(float(np.exp(best.x[0])), 3),
        "extra": round(float(np.sqrt(np.exp(best.x[1]))), 3),
        "median_sd": round(float(np.median(s)), 3),
    }


def snr(r2: np.ndarray) -> np.ndarray:
    """The SNR a fit's r² implies, ``sqrt(r² / (1 - r²))`` (the response's over the noise's SD)."""
    r2 = np.clip(np.nan_to_num(r2), 0.0, 0.999)
    return np.sqrt(r2 / (1.0 - r2))


def measure(bids: Path, out: Path) -> dict:
    """Issue 17's Must show 1–3 on one participant's outputs."""
    truth = load_truth(bids)
    maps = read_maps(bids, out, ["x", "y", "sigma", "status", "r2", "cvr2", "eccentricity"])
    se = read_maps(bids, out, ["x", "y", "sigma", "eccentricity"], stat="se")
    lower = read_maps(bids, out, ["sigma"], stat="ci95lower")
    upper = read_maps(bids, out, ["sigma"], stat="ci95upper")
    func = out / "sub-01" / "func"
    sidecar = json.loads(next(func.glob("*hemi-L*model-gauss_desc-x_boldmap.json")).read_text())
    pixel = sidecar["Stimulus"]["FittedPixelDeg"]
    prf = truth["mask"]
    fitted = prf & np.isfinite(maps["x"])
    with_se = fitted & np.isfinite(se["x"])  # refined (grid-only vertices have no standard errors)
    status = catalog.status_codes(maps["status"])
    doubtful = catalog.doubtful(status)
    uncertain = (status & catalog.STATUS_BITS["uncertain"]) != 0
    floor = (status & catalog.STATUS_BITS["size_at_floor"]) != 0
    error = np.hypot(maps["x"] - truth["x"], maps["y"] - truth["y"])
    runaway = fitted & (error > 5)
    keep = with_se & ~doubtful
    level = snr(maps["r2"])
    bins = {}
    for low, high in SNR_BINS:
        sel = keep & (level >= low) & (level < high)
        if sel.sum() >= 20:
            bins[f"{low:g}-{high:g}"] = {"n": int(sel.sum()), **coverage(maps, se, lower, upper, truth, sel)}
    large = prf & (truth["sigma"] >= 2 * pixel)
    return {
        "prf_vertices": int(prf.sum()),
        "noise_model": sidecar["FitSettings"].get("noise_model", {}).get("coefficients"),
        "sigma_bias": round(float(np.nanmedian((maps["sigma"] - truth["sigma"])[fitted])), 4),
        "sigma_bias_unflagged": round(float(np.nanmedian((maps["sigma"] - truth["sigma"])[keep])), 4),
        "floor_share_sigma_ge_2px": round(float(np.mean(floor[large & fitted])), 4),
        "median_centre_error": round(float(np.nanmedian(error[fitted])), 4),
        "runaways": int(runaway.sum()),
        "runaways_unflagged": int(np.sum(runaway & ~doubtful)),
        "flagged_share": round(float(np.mean(doubtful[fitted])), 4),
        "without_se_share": round(float(np.mean(~with_se[fitted])), 4),
        "uncertain_share": round(float(np.mean(uncertain[fitted])), 4),
        "coverage_all": coverage(maps, se, lower, upper, truth, keep),
        "coverage_by_snr": bins,
        "sigma_calibration": sigma_calibration(maps, lower, upper, truth, keep & ~floor),
        "median_se_x": round(float(np.nanmedian(se["x"][keep])), 4),
        "median_cvr2": round(float(np.nanmedian(maps["cvr2"][prf])), 4),
        "retest": (sidecar.get("VarianceExplained") or {}).get("TestRetest", {}).get("Consistent"),
        "retest_units": (sidecar.get("VarianceExplained") or {}).get("TestRetest", {}).get("Units"),
    }


def number(text: str) -> float | str:
    """``text`` as a float where it is one (a SynthConfig value given on the command line)."""
    try:
        return float(text)
    except ValueError:
        return text


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[11])
    parser.add_argument("--noise-models", nargs="+", default=["ar1", "realistic"])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5])
    parser.add_argument("--options", nargs="+", default=["ols", "ar1"], help="--noise-model options")
    parser.add_argument("--keep", type=Path, help="folder for the datasets and outputs (kept)")
    parser.add_argument("--table", type=Path, help="also append the JSON lines to this file")
    parser.add_argument(
        "--synth", nargs="*", default=[], help="SynthConfig fields, KEY=VALUE (e.g. hrf_delay_jitter=0)"
    )
    parser.add_argument("extra", nargs="*", help="more prfmap options (after --)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="validate-uncertainty-"))
    for seed in args.seeds:
        for model in args.noise_models:
            for level in args.noise:
                fields = dict(item.split("=", 1) for item in args.synth)
                config = SynthConfig(
                    seed=seed, noise=level, noise_model=model, **{k: number(v) for k, v in fields.items()}
                )
                tag = "".join(f"_{k}{v}" for k, v in fields.items())
                case = root / f"seed{seed}_{model}_{level:g}{tag}"
                bids = case / "bids"
                if not (bids / "dataset_description.json").is_file():
                    make_synthetic_dataset(bids, config)
                for option in args.options:
                    out = case / f"out_{option}{''.join(args.extra).replace('-', '_')}"
                    wall = participant(bids, out, "--noise-model", option, *args.extra)
                    record = {
                        "seed": seed,
                        "synth_noise_model": model,
                        "noise": level,
                        "synth": args.synth,
                        "option": option,
                        "extra": args.extra,
                        "wall_s": round(wall, 1),
                        **measure(bids, out),
                    }
                    emit(record, args.table)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
