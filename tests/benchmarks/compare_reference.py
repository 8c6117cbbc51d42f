"""The participant level's maps from this checkout and from another (e.g. before issue 18's changes).

Runs ``prfmap <bids> <out> participant`` with the defaults (cvr2, the participant HRF, the report
off to save time) once with this checkout's engine and once with the ``app/`` of a reference
checkout on one backend, then prints, for the centre (x, y), σ, eccentricity and polar angle, the
median, 95th percentile, largest value and share above 0.01 of the absolute differences between
the two runs' maps, over the vertices with r² ≥ 0.1 in both and over every fitted vertex, and the
seconds of each run.

    git worktree add /tmp/prfmap-ref b41bea7~1      # the engine before issue 18's speed changes
    python tests/benchmarks/compare_reference.py BIDS_DIR /tmp/prfmap-ref [--backend torch] [--json F]

(Up to d51f55e the engine kept a switch for this, ``PRFMAP_REFERENCE=1``; a checkout of that commit
run with it set compares the same arithmetic as the one before issue 18 with today's I/O.)
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


def run(bids: Path, out: Path, backend: str, checkout: Path | None) -> float:
    """Seconds of the participant level of ``checkout``'s ``app/`` (None: this environment's prfmap)."""
    shutil.rmtree(out, ignore_errors=True)
    env = {**os.environ, "KERAS_BACKEND": backend}
    if checkout is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(checkout / "app"), env.get("PYTHONPATH", "")])
    t0 = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-c",
            "from prfmap.cli.console import main; main()",
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
    parser.add_argument("reference", type=Path, help="a checkout (git worktree) of the reference commit")
    parser.add_argument("--backend", default=os.environ.get("KERAS_BACKEND", "jax"))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="prfmap-compare-"))
    seconds = {
        name: run(args.bids, scratch / name, args.backend, args.reference if name == "reference" else None)
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
