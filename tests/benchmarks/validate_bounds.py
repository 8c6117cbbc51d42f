"""Measurements of docs/validation.md: bounded estimates and the fit-status map.

Writes ``prfmap-synth`` fsaverage5 participants at the default (realistic) settings, runs the
participant level with the defaults (cvr2 on) in a subprocess and prints one JSON line per seed:
estimates outside the bounds the sidecars document, true pRF vertices with a centre error above 5°,
and noise vertices above the r² threshold that are written with status 0.

    KERAS_BACKEND=jax python tests/benchmarks/validate_bounds.py --seeds 0 1 [--keep DIR] [-- OPTIONS]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_timing_cvr2 import APP, participant  # noqa: E402

sys.path.insert(0, str(APP))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import read_maps  # noqa: E402
from prfmap.engine import catalog  # noqa: E402
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset  # noqa: E402

R2_THRESHOLD = 0.1  # prfmap's default --r2-threshold


def outside_bounds(maps: dict[str, np.ndarray], sidecars: dict[str, dict]) -> dict[str, int]:
    """Per map: finite values outside the bound its sidecar documents (numbers from FitSettings)."""
    settings = next(iter(sidecars.values()))["FitSettings"]
    radius = settings["bounds"]["x"][1] / catalog.CENTRE_RADII
    scales = {
        "radius": radius,
        "fov": settings["bounds"]["sigma"][1],
        "pixel": settings["bounds"]["sigma"][0],
        "sigma": maps["sigma"],
    }
    counts = {}
    for label, values in maps.items():
        entry = catalog.parameter_by_label(label)
        if entry is None or entry.bound == catalog.UNBOUNDED:
            continue
        low, high = entry.bound.resolve(scales)
        slack = 1e-4 * np.maximum(1.0, np.abs(values))  # float32 maps
        finite = np.isfinite(values)
        counts[label] = int(np.sum(finite & ((values < low - slack) | (values > high + slack))))
    return counts


def measure(bids: Path, out: Path) -> dict:
    """Must show 1 of issue 10 on one participant's outputs."""
    truth = load_truth(bids)
    labels = ["x", "y", "sigma", "amplitude", "r2", "cvr2", "status", "eccentricity", "polarangle"]
    maps = read_maps(bids, out, labels)
    func = out / "sub-01" / "func"
    sidecars = {p.name: json.loads(p.read_text()) for p in func.glob("*hemi-L*boldmap.json")}
    prf, noise = truth["mask"], truth["noise"]
    error = np.hypot(maps["x"] - truth["x"], maps["y"] - truth["y"])
    status = np.nan_to_num(maps["status"], nan=0).astype(int)
    above = noise & (maps["r2"] >= R2_THRESHOLD)
    return {
        "prf_vertices": int(prf.sum()),
        "noise_vertices": int(noise.sum()),
        "outside_bounds": outside_bounds({k: maps[k] for k in labels}, sidecars),
        "prf_centre_error_above_5deg": int(np.sum(prf & (error > 5))),
        "prf_centre_error_above_5deg_percent": round(100 * float(np.mean(error[prf] > 5)), 3),
        "prf_nan": int(np.sum(prf & ~np.isfinite(maps["x"]))),
        "median_centre_error": round(float(np.nanmedian(error[prf])), 4),
        "noise_above_r2_threshold": int(above.sum()),
        "noise_above_threshold_unflagged": int(np.sum(above & (status == 0))),
        "status_counts_prf": {
            name: int(np.sum(prf & (status & bit > 0))) for bit, (name, _) in catalog.STATUS_FLAGS.items()
        },
        "status_counts_noise": {
            name: int(np.sum(noise & (status & bit > 0))) for bit, (name, _) in catalog.STATUS_FLAGS.items()
        },
        "max_eccentricity": round(float(np.nanmax(maps["eccentricity"])), 3),
        "max_sigma": round(float(np.nanmax(maps["sigma"])), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--keep", type=Path, help="folder for the datasets and outputs (kept)")
    parser.add_argument("options", nargs="*", help="prfmap options (after --)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="validate-bounds-"))
    for seed in args.seeds:
        bids = root / f"seed{seed}" / "bids"
        if not (bids / "dataset_description.json").is_file():
            make_synthetic_dataset(bids, SynthConfig(seed=seed))
        out = root / f"seed{seed}" / ("out" + "".join(args.options).replace("-", "_"))
        wall = participant(bids, out, *args.options)
        print(
            json.dumps(
                {"seed": seed, "options": args.options, "wall_s": round(wall, 1), **measure(bids, out)}
            ),
            flush=True,
        )
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
