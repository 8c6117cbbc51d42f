"""The maps of the participant level with and without issue 18's speed changes (``PRFMAP_REFERENCE=1``).

Runs ``prfmap <bids> <out> participant`` with the defaults (cvr2, the participant HRF, the report
off to save time) once with the engine as it is and once with ``PRFMAP_REFERENCE=1`` on one backend,
then prints, for the centre (x, y), σ, eccentricity and polar angle, the median, 95th percentile,
largest value and share above 0.01 of the absolute differences between the two runs' maps, over the
vertices with r² ≥ 0.1 in both and over every fitted vertex, and the seconds of each run.

    KERAS_BACKEND=jax python tests/benchmarks/compare_reference.py BIDS_DIR [--backend torch] [--json F]
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

import nibabel as nib
import numpy as np

BIN = Path(sys.executable).parent
LABELS = ("x", "y", "sigma", "eccentricity", "polarangle", "r2")


def read_maps(out: Path) -> dict[str, np.ndarray]:
    """Every map of ``LABELS`` of the participant's fit, both hemispheres, left first."""
    maps = {}
    for label in LABELS:
        parts = []
        for hemi in ("L", "R"):
            path = next(out.glob(f"sub-*/func/*hemi-{hemi}_*model-gauss_desc-{label}_boldmap.func.gii"))
            parts.append(np.asarray(nib.load(path).darrays[0].data, dtype=np.float64))
        maps[label] = np.concatenate(parts)
    return maps


def run(bids: Path, out: Path, backend: str, reference: bool) -> float:
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "PRFMAP_REFERENCE": "1" if reference else "0", "KERAS_BACKEND": backend}
    t0 = time.perf_counter()
    subprocess.run(
        [
            str(BIN / "prfmap"),
            str(bids),
            str(out),
            "participant",
            "--backend",
            backend,
            "--no-report",
            "--work-dir",
            str(out.parent / f"work-{out.name}"),
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    return time.perf_counter() - t0


def differences(fast: dict[str, np.ndarray], slow: dict[str, np.ndarray]) -> dict[str, dict[str, float]]:
    """Median and 95th percentile |Δ| per map, over pRF vertices (r² ≥ 0.1 in both) and all fitted."""
    fitted = np.isfinite(fast["x"]) & np.isfinite(slow["x"])
    prf = fitted & (fast["r2"] >= 0.1) & (slow["r2"] >= 0.1)
    out = {}
    for label in LABELS[:-1]:
        delta = np.abs(fast[label] - slow[label])
        if label == "polarangle":
            delta = np.minimum(delta, 360.0 - delta)
        for name, where in (("prf", prf), ("fitted", fitted)):
            out[f"{label}_{name}"] = {
                "median": round(float(np.median(delta[where])), 5),
                "p95": round(float(np.percentile(delta[where], 95)), 5),
                "max": round(float(np.max(delta[where])), 5),
                "share_over_0.01": round(float(np.mean(delta[where] > 0.01)), 5),
            }
    out["vertices"] = {"prf": int(prf.sum()), "fitted": int(fitted.sum())}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bids", type=Path)
    parser.add_argument("--backend", default=os.environ.get("KERAS_BACKEND", "jax"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="prfmap-compare-"))
    seconds = {
        name: run(args.bids, scratch / name, args.backend, name == "reference")
        for name in ("fast", "reference")
    }
    record = {
        "backend": args.backend,
        "seconds": {k: round(v, 1) for k, v in seconds.items()},
        **differences(read_maps(scratch / "fast"), read_maps(scratch / "reference")),
    }
    print(json.dumps(record), flush=True)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
