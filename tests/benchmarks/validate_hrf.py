"""Measurements of docs/validation.md, "HRF default": canonical, participant and vertex HRFs compared.

Writes ``prfmap-synth`` fsaverage5 participants (two runs, default realism otherwise) whose pRF
units have (1) SPM's canonical HRF, (2) the default per-unit HRF variability (delay ± 1 s,
dispersion ± 20 %) and (3) every HRF 1.25 s later than SPM's (± 0.25 s: the response peaks
1–1.5 s late, as prfpy's HRF against SPM's), loads them as ``prfmap participant`` does (timing from
the sidecars, preprocessing, run combination), keeps its pRF units and 2,000 of the units without
a pRF drawn at random, and for each ``--hrf`` option fits all runs and the leave-one-run-out folds
(:mod:`prfmap.participant.crossval`; the participant HRF estimated anew in each fold from its training runs)
with prfmap's other defaults (``--refine-r2-min 0.1``). Prints one JSON line per case and option:
median |σ error| of the pRF units (fit of all runs), median cvr2 of the pRF units, the estimated
HRF, seconds.

    KERAS_BACKEND=jax python tests/benchmarks/validate_hrf.py --seeds 0 1 [--keep DIR] [--table FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

APP = Path(__file__).resolve().parents[2] / "app"
sys.path.insert(0, str(APP))

from validate_timing_cvr2 import emit  # noqa: E402

from prfmap.cli.config import build_config  # noqa: E402
from prfmap.cli.parser import build_parser  # noqa: E402
from prfmap.engine import Stimulus, fit_prf  # noqa: E402
from prfmap.engine.catalog import HRF_OPTIONS  # noqa: E402
from prfmap.io.bids import find_runs  # noqa: E402
from prfmap.participant.crossval import RunSet, cross_validate, engine_predictor  # noqa: E402
from prfmap.participant.load import load_fit  # noqa: E402
from prfmap.participant.plan import plan_fits  # noqa: E402
from prfmap.runtime.progress import make_progress  # noqa: E402
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset  # noqa: E402

NOISE_UNITS = 2000
CASES = {
    "canonical": {"hrf_delay_jitter": 0.0, "hrf_dispersion_jitter": 0.0},
    "variable": {},
    "shifted": {"hrf_delay_shift": 1.25, "hrf_delay_jitter": 0.25, "hrf_dispersion_jitter": 0.0},
}


def load_mapped_region(bids: Path, work: Path):
    """The loaded participant (as ``prfmap participant`` loads it) restricted to its pRF units and
    :data:`NOISE_UNITS` units without a pRF drawn at random."""
    opts = build_parser().parse_args(
        [str(bids), str(work / "out"), "participant", "--work-dir", str(work / "work")]
    )
    config = build_config(opts)
    (plan,) = plan_fits(find_runs(config.inputs, work_dir=work / "work"), "gauss")
    with make_progress() as progress:
        loaded = load_fit(plan, config, progress)
    truth = load_truth(bids)
    rng = np.random.default_rng(0)
    noise = np.flatnonzero(truth["noise"])
    keep = truth["mask"].copy()
    keep[rng.choice(noise, min(NOISE_UNITS, noise.size), replace=False)] = True
    runs = [dataclasses.replace(run, data=run.data[keep]) for run in loaded.runs]
    combined = dataclasses.replace(loaded.combined, data=loaded.combined.data[keep])
    return loaded, runs, combined, {k: np.asarray(v)[keep] for k, v in truth.items()}


def measure(loaded, runs, combined, truth, option: str) -> dict:
    """σ error of the fit of all runs and cvr2 of the leave-one-run-out folds, for one ``--hrf``."""
    tr, fov, stref = loaded.tr, loaded.fov_deg, loaded.slice_time.fraction
    kwargs = {"hrf": option, "slice_time_ref": stref, "refine_r2_min": 0.1}  # prfmap's default
    start = time.perf_counter()
    stim = Stimulus(combined.design, fov_deg=fov, run_lengths=combined.run_lengths)
    result = fit_prf(combined.data, stim, tr, nuisance=combined.nuisance, **kwargs)
    fit_s = time.perf_counter() - start
    fold_hrfs = []

    def fit_fold(training, fold_stim, fold):
        fitted = fit_prf(training.data, fold_stim, tr, nuisance=training.nuisance, **kwargs)
        fold_hrfs.append(fitted.settings.hrf_model)
        return fitted

    cv = cross_validate(
        RunSet(runs, [run.stimulus_key for run in loaded.plan.runs], loaded.designs, fov_deg=fov),
        fit=fit_fold,
        predict=engine_predictor(tr, "gauss", slice_time_ref=stref),
    )
    prf = truth["mask"]
    ok = prf & np.isfinite(result.params["sigma"])
    both = prf & np.isfinite(cv.cvr2)
    error = result.params["sigma"] - truth["sigma"]
    return {
        "hrf": option,
        "prf_units": int(prf.sum()),
        "units": int(prf.size),
        "median_abs_sigma_error": round(float(np.median(np.abs(error[ok]))), 4),
        "median_sigma_bias": round(float(np.median(error[ok])), 4),
        "median_centre_error": round(
            float(np.median(np.hypot(result.params["x"] - truth["x"], result.params["y"] - truth["y"])[ok])),
            4,
        ),
        "median_cvr2_prf": round(float(np.median(cv.cvr2[both])), 4),
        "median_r2_prf": round(float(np.nanmedian(result.r2[prf])), 4),
        "hrf_model": result.settings.hrf_model,
        "fold_hrf_peaks_s": [h["peak_s"] for h in fold_hrfs],
        "seconds": {"fit": round(fit_s, 1), "cross_validation": round(sum(cv.seconds), 1)},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--cases", nargs="+", choices=list(CASES), default=list(CASES))
    parser.add_argument("--options", nargs="+", choices=HRF_OPTIONS, default=list(HRF_OPTIONS))
    parser.add_argument("--keep", type=Path, help="folder for the datasets (kept)")
    parser.add_argument("--table", type=Path, help="also append the JSON lines to this file")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="validate-hrf-"))
    for seed in args.seeds:
        for case in args.cases:
            bids = root / f"{case}-seed{seed}" / "bids"
            if not (bids / "dataset_description.json").is_file():
                make_synthetic_dataset(bids, SynthConfig(seed=seed, **CASES[case]))
            loaded, runs, combined, truth = load_mapped_region(bids, bids.parent)
            for option in args.options:
                row = {"case": case, "seed": seed, **measure(loaded, runs, combined, truth, option)}
                emit(row, args.table)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
