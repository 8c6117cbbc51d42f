"""Measurement of docs/validation.md, "Uncertainty" (issue 17, Must show 5): inverse-variance-weighted
group means against medians on a synthetic group.

Writes a ``prfmap-synth`` group (fsaverage5, default settings, 4 participants whose retinotopy is
the synth's template with small per-participant differences), runs the participant level (defaults,
no report) and the group level, and compares, on the vertices where at least three participants
contribute, the group's ``stat-ivwmean`` of x, y and σ and the participants' median (the same
participants: r² ≥ 0.1, status not doubtful) with the mean of the participants' true values.

    KERAS_BACKEND=jax python tests/benchmarks/validate_group_ivw.py [--subjects 4] [--keep DIR]
        [-- participant-level options, e.g. --covariance sandwich]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import read_maps  # noqa: E402
from prfmap.engine import catalog  # noqa: E402
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset  # noqa: E402

APP = Path(__file__).resolve().parents[2] / "app"
LABELS = ("x", "y", "sigma")


def prfmap(*args: str) -> None:
    """``prfmap`` in a child process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(APP), os.environ.get("PYTHONPATH")])))
    subprocess.run(
        [sys.executable, "-m", "prfmap.cli.run", *args], env=env, check=True, stdout=subprocess.DEVNULL
    )


def group_map(out: Path, stat: str, label: str) -> np.ndarray:
    """A group map (both hemispheres) as (units,)."""
    pair = [
        next((out / "group").glob(f"*hemi-{h}_*_stat-{stat}_desc-{label}_boldmap.func.gii")) for h in "LR"
    ]
    return np.concatenate([np.asarray(nib.load(p).darrays[0].data, dtype=np.float64) for p in pair])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--subjects", type=int, default=4)
    parser.add_argument("--seed", type=int, default=31)
    parser.add_argument("--keep", type=Path, help="folder for the dataset and outputs (kept)")
    parser.add_argument("--reuse", action="store_true", help="reuse the participant outputs under --keep")
    parser.add_argument("extra", nargs="*", help="more participant-level options (after --)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="validate-group-ivw-"))
    bids, out = root / "bids", root / ("out" + "".join(args.extra).replace("-", "_"))
    if not (bids / "dataset_description.json").is_file():
        make_synthetic_dataset(bids, SynthConfig(subjects=args.subjects, seed=args.seed))
    if not (args.reuse and (out / "sub-01").is_dir()):
        shutil.rmtree(out, ignore_errors=True)
        prfmap(
            str(bids), str(out), "participant", "--no-report", "--work-dir", str(root / "work"), *args.extra
        )
    prfmap(str(bids), str(out), "group", "--no-report", "--work-dir", str(root / "work"))
    subjects = [f"{s:02d}" for s in range(1, args.subjects + 1)]
    truths = [load_truth(bids, s) for s in subjects]
    fits = [read_maps(bids, out, [*LABELS, "r2", "status"], subject=s) for s in subjects]
    keep = np.stack(
        [(f["r2"] >= 0.1) & ~catalog.doubtful(f["status"]) & np.isfinite(f["sigma"]) for f in fits]
    )
    prf = np.stack([t["mask"] for t in truths])
    enough = (keep & prf).sum(axis=0) >= 3
    record = {"subjects": args.subjects, "options": args.extra, "vertices": int(enough.sum())}
    for label in LABELS:
        estimates = np.stack([np.where(k, f[label], np.nan) for f, k in zip(fits, keep, strict=True)])
        truth = np.nanmean(
            np.stack([np.where(p, t[label], np.nan) for t, p in zip(truths, prf, strict=True)]), axis=0
        )
        median = np.nanmedian(estimates[:, enough], axis=0)
        ivw = group_map(out, "ivwmean", label)[enough]
        record[label] = {
            "median_abs_error_ivwmean": round(float(np.nanmedian(np.abs(ivw - truth[enough]))), 4),
            "median_abs_error_median": round(float(np.nanmedian(np.abs(median - truth[enough]))), 4),
        }
    print(json.dumps(record), flush=True)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
