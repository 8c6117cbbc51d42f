"""Measurements of docs/validation.md: timing from the metadata, and cross-validated r².

Writes ``prfmap-synth`` fsaverage5 participants (default size, two runs), runs
``prfmap BIDS OUT participant --no-report [options]`` on each in a subprocess, and prints one JSON
line per case with the median σ bias (fitted - true, pRF vertices with a finite fit), the median
centre error, the slice-time reference the sidecars record, r2/cvr2 medians, and the fit and
cross-validation seconds from the sidecars.

    KERAS_BACKEND=jax python tests/benchmarks/validate_timing_cvr2.py timing --seeds 0 1 [--keep DIR]
    KERAS_BACKEND=jax python tests/benchmarks/validate_timing_cvr2.py cvr2 --seeds 0 [--keep DIR]
    ... timing --modes start middle --synth hrf_delay_jitter=0 hrf_dispersion_jitter=0

``timing``: prfmap-synth ``--slice-timing start`` (sampled at the TR start, SliceTimingCorrected
false, no SliceTiming), ``middle`` (StartTime = TR/2), ``corrected`` (fMRIPrep's StartTime) and
``uncorrected`` (per-slice sampling, SliceTiming), each fitted with no timing option, and with
``--slice-time-ref 0.5`` (the fixed mid-TR reference prfmap used before) for comparison; the
cross-validation is skipped there (``--no-cvr2``: it does not change the maps).
``cvr2``: the default participant, and one whose second run is pure noise (``--noise-runs 1``),
fitted with the defaults (cvr2 on).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

APP = Path(__file__).resolve().parents[2] / "app"
sys.path.insert(0, str(APP))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def participant(bids: Path, out: Path, *options: str) -> float:
    """Run the participant level in a child process; wall seconds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(APP), os.environ.get("PYTHONPATH")])))
    shutil.rmtree(out, ignore_errors=True)
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "prfmap.cli.run",
            str(bids),
            str(out),
            "participant",
            "--no-report",
            "--work-dir",
            str(out) + "-work",
            *options,
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def emit(record: dict, table: Path | None) -> None:
    """Print ``record`` as one JSON line, and append the line to ``table`` when given."""
    line = json.dumps(record)
    print(line, flush=True)
    if table:
        with open(table, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")


def measure(bids: Path, out: Path, wall: float) -> dict:
    from helpers import read_maps
    from prfmap.synth import load_truth

    truth = load_truth(bids)
    prf = truth["mask"]
    labels = ["x", "y", "sigma", "r2"]
    func = out / "sub-01" / "func"
    has_cv = any(func.glob("*desc-cvr2_boldmap*"))
    maps = read_maps(bids, out, labels + (["cvr2"] if has_cv else []))
    ok = prf & np.isfinite(maps["sigma"])
    sidecar = json.loads(next(func.glob("*hemi-L*model-gauss_desc-sigma_boldmap.json")).read_text())
    row = {
        "prf_vertices": int(prf.sum()),
        "fitted": int(ok.sum()),
        "median_sigma_bias": round(float(np.median(maps["sigma"][ok] - truth["sigma"][ok])), 4),
        "median_abs_sigma_error": round(float(np.median(np.abs(maps["sigma"][ok] - truth["sigma"][ok]))), 4),
        "median_centre_error": round(
            float(np.median(np.hypot(maps["x"] - truth["x"], maps["y"] - truth["y"])[ok])), 4
        ),
        "median_r2_prf": round(float(np.nanmedian(maps["r2"][prf])), 4),
        "slice_time_reference": sidecar["SliceTimeReference"],
        "seconds": {
            "wall": round(wall, 1),
            **{
                k: round(v, 1)
                for k, v in sidecar["Timings"].items()
                if k in ("load", "fit", "cross_validation")
            },
        },
    }
    if has_cv:
        cv, r2 = maps["cvr2"], maps["r2"]
        both = prf & np.isfinite(cv) & np.isfinite(r2)
        noise = truth["noise"] & np.isfinite(cv) & np.isfinite(r2)
        row.update(
            {
                "median_cvr2_prf": round(float(np.median(cv[both])), 4),
                "fraction_cvr2_le_r2_prf": round(float(np.mean(cv[both] <= r2[both])), 4),
                "pearson_cvr2_r2_all": round(float(np.corrcoef(cv[both | noise], r2[both | noise])[0, 1]), 4),
                "median_cvr2_noise_vertices": round(float(np.median(cv[noise])), 4),
                "median_r2_noise_vertices": round(float(np.median(r2[noise])), 4),
            }
        )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("claim", choices=("timing", "cvr2"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--keep", type=Path, help="folder for the datasets and outputs (kept)")
    parser.add_argument(
        "--synth",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="SynthConfig settings of every dataset, e.g. hrf_delay_jitter=0",
    )
    parser.add_argument(
        "--modes",
        nargs="+",
        default=["start", "middle", "corrected", "uncorrected"],
        help="timing: the prfmap-synth --slice-timing modes",
    )
    args = parser.parse_args()
    extra = {k: json.loads(v) for k, v in (item.split("=", 1) for item in args.synth)}
    tag = "".join(f"-{k}{v}" for k, v in extra.items())
    from prfmap.synth import SynthConfig, make_synthetic_dataset

    root = args.keep or Path(tempfile.mkdtemp(prefix="validate-sciapp-"))
    cases = []
    for seed in args.seeds:
        if args.claim == "timing":
            for mode in args.modes:
                for options in ((), ("--slice-time-ref", "0.5")):
                    cases.append(
                        (
                            f"{mode}-seed{seed}{tag}",
                            {"slice_timing": mode, "seed": seed, **extra},
                            ("--no-cvr2", *options),
                        )
                    )
        else:
            for noise_runs in (0, 1):
                settings = {"noise_runs": noise_runs, "seed": seed, **extra}
                cases.append((f"noise_runs{noise_runs}-seed{seed}{tag}", settings, ()))
    for name, settings, options in cases:
        bids = root / name / "bids"
        if not (bids / "dataset_description.json").is_file():
            make_synthetic_dataset(bids, SynthConfig(**settings))
        out = root / name / ("out" + "".join(options).replace("-", "_"))
        wall = participant(bids, out, *options)
        print(json.dumps({"case": name, "options": list(options), **measure(bids, out, wall)}), flush=True)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
