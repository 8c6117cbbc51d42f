"""Measurements of docs/validation.md: connective fields recovered from ``prfmap-synth --cf-source``.

Writes fsaverage5 participants whose V2 and V3 vertices are connective fields of V1 (resting-state
runs: a smooth random field on V1; or bar runs: V1's pRF responses), runs ``prfmap --model cf
--cf-source V1 --roi V2 V3`` in a subprocess and prints one JSON line per setting: among the targets
with cvr2 >= 0.2, the share whose centre lies within 2 mm (geodesic, on V1) of the true one and whose
size is within 25 % of the true size; the median size ratio; the null targets' cvr2.

    KERAS_BACKEND=jax python tests/benchmarks/validate_connective.py --noise 0.1 0.25 0.5 --runs 2 4
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np

from prfmap.io.geodesic import geodesic_distances
from prfmap.io.meshes import find_midthickness
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset

HEMIS = {"L": slice(0, 10242), "R": slice(10242, 20484)}


def measure(bids: Path, out: Path) -> dict[str, float]:
    """Recovery of the generator's connective fields by the fit in ``out``."""
    truth = load_truth(bids, "01")
    func = out / "sub-01" / "func"
    meshes, _ = find_midthickness("01", "fsaverage5", None, None)
    near, sized, ratio, null_cvr2, targets = [], [], [], [], 0
    for hemi, part in HEMIS.items():
        est = {
            label: nib.load(next(func.glob(f"*hemi-{hemi}_*model-cf_desc-{label}_boldmap.func.gii")))
            .darrays[0]
            .data.astype(np.float64)
            for label in ("cfcenter", "cfsize", "cvr2")
        }
        source = np.flatnonzero(truth["cfsource"][part] > 0)
        distances = geodesic_distances(*meshes[hemi], source)
        position = {v: i for i, v in enumerate(source)}
        centre, size = truth["truecfcenter"][part], truth["truecfsize"][part]
        has = centre >= 0
        good = has & (est["cvr2"] >= 0.2)
        targets += int(has.sum())
        near += [
            distances[position[int(a)], position[int(b)]] <= 2.0
            for a, b in zip(est["cfcenter"][good], centre[good], strict=True)
        ]
        sized += list(np.abs(est["cfsize"][good] / size[good] - 1) <= 0.25)
        ratio += list(est["cfsize"][good] / size[good])
        null_cvr2 += list(est["cvr2"][(truth["cftarget"][part] > 0) & ~has])
    near, sized = np.array(near), np.array(sized)
    return {
        "targets": targets,
        "cvr2_at_least_0.2": len(near),
        "centre_within_2mm": float(near.mean()),
        "size_within_25pc": float(sized.mean()),
        "both": float((near & sized).mean()),
        "median_size_ratio": float(np.median(ratio)),
        "null_cvr2_median": float(np.median(null_cvr2)),
        "null_cvr2_p99": float(np.percentile(null_cvr2, 99)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.1, 0.25, 0.5])
    parser.add_argument("--runs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--bars", action="store_true", help="bar runs instead of resting-state runs")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    for runs in args.runs:
        for noise in args.noise:
            with tempfile.TemporaryDirectory() as tmp:
                bids = make_synthetic_dataset(
                    Path(tmp) / "bids",
                    SynthConfig(runs=runs, noise=noise, cf_source="V1", rest=not args.bars, seed=args.seed),
                )
                out = Path(tmp) / "out"
                start = time.perf_counter()
                command = [sys.executable, "-m", "prfmap.cli.run", str(bids), str(out), "participant"]
                command += [
                    "--model",
                    "cf",
                    "--cf-source",
                    "V1",
                    "--roi",
                    "V2",
                    "V3",
                    "--skip-bids-validation",
                ]
                subprocess.run(command, check=True, capture_output=True)
                seconds = time.perf_counter() - start
                print(
                    json.dumps(
                        {
                            "runs": runs,
                            "noise": noise,
                            "bars": args.bars,
                            "seconds": round(seconds, 1),
                            **measure(bids, out),
                        }
                    ),
                    flush=True,
                )


if __name__ == "__main__":
    main()
