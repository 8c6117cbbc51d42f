"""A 768 × 768 aperture against the 100 × 100 one of the same bars: time, peak memory and maps.

Writes the default ``prfmap-synth`` participant (fsaverage5, 2 runs, 100-pixel bars), a copy whose
``stimuli/bars.nii.gz`` holds the same bar sweeps drawn on 768 × 768 pixels, runs
``prfmap ... participant --mem-gb B --no-report`` on each (one after the other, in subprocesses), and
prints one JSON line: each run's wall time and peak resident memory (``ru_maxrss`` of the child), and
the differences between the two runs' maps in the vertices that have a pRF (median and 90th
percentile of |Δ| for x, y, sigma and eccentricity, degrees) and each run's error against the truth.

    KERAS_BACKEND=jax python tests/benchmarks/bench_aperture.py [--mem-gb 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import nibabel as nib
import numpy as np

APP = Path(__file__).resolve().parents[2] / "app"
sys.path.insert(0, str(APP))
LABELS = ("x", "y", "sigma", "eccentricity")


def make_datasets(root: Path) -> tuple[Path, Path]:
    """The 100-pixel participant and its 768-pixel copy."""
    from prfmap.synth import SynthConfig, bar_apertures, make_synthetic_dataset

    coarse, fine = root / "ds100", root / "ds768"
    if not (coarse / "dataset_description.json").is_file():
        make_synthetic_dataset(coarse, SynthConfig())
    if not (fine / "dataset_description.json").is_file():
        shutil.copytree(coarse, fine)
        img = nib.load(coarse / "stimuli" / "bars.nii.gz")
        design = bar_apertures(SynthConfig(n_pixels=768))
        on_disk = np.moveaxis(design, 0, -1)[:, :, None, :].astype(np.uint8)
        nib.save(nib.Nifti1Image(on_disk, img.affine, img.header), fine / "stimuli" / "bars.nii.gz")
    return coarse, fine


def run(bids: Path, out: Path, mem_gb: float) -> dict[str, float]:
    """One participant level in a child process: wall seconds and the child's peak RSS (GB)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(APP), os.environ.get("PYTHONPATH")])))
    start = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "prfmap.cli.run",
            str(bids),
            str(out),
            "participant",
            "--mem-gb",
            str(mem_gb),
            "--no-report",
            "--work-dir",
            str(out) + "-work",
        ],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # call once per process
    return {"wall_s": round(wall, 1), "peak_gb": round(peak * 1024 / 2**30, 3)}


def read(out: Path, label: str) -> np.ndarray:
    func = out / "sub-01" / "func"
    return np.concatenate(
        [
            nib.load(next(func.glob(f"*hemi-{h}_*model-gauss_desc-{label}_boldmap.func.gii"))).darrays[0].data
            for h in "LR"
        ]
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mem-gb", type=float, default=1.0)
    parser.add_argument("--keep", type=Path, help="folder for the datasets and outputs (kept)")
    args = parser.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-aperture-"))
    root.mkdir(parents=True, exist_ok=True)
    coarse, fine = make_datasets(root)
    report: dict = {"mem_gb": args.mem_gb}
    for name, bids in (("100px", coarse), ("768px", fine)):
        out = root / f"out-{name}"
        shutil.rmtree(out, ignore_errors=True)
        shutil.rmtree(str(out) + "-work", ignore_errors=True)
        # a fresh interpreter per run, so that ru_maxrss of the children is this run's own
        here = str(Path(__file__).parent)
        code = (
            f"import sys, json; sys.path.insert(0, {here!r}); import bench_aperture as b; "
            f"print(json.dumps(b.run(b.Path({str(bids)!r}), b.Path({str(out)!r}), {args.mem_gb!r})))"
        )
        line = (
            subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
            .stdout.strip()
            .splitlines()[-1]
        )
        report[name] = json.loads(line)
    from prfmap.synth import load_truth

    truth = load_truth(coarse, "01")
    prf = truth["mask"]
    outs = {name: root / f"out-{name}" for name in ("100px", "768px")}
    report["vertices_with_prf"] = int(prf.sum())
    for label in LABELS:
        diff = np.abs(read(outs["768px"], label) - read(outs["100px"], label))[prf]
        report[f"abs_diff_{label}"] = {
            "median": round(float(np.nanmedian(diff)), 4),
            "p90": round(float(np.nanpercentile(diff, 90)), 4),
        }
    for name, out in outs.items():
        centre = np.hypot(read(out, "x") - truth["x"], read(out, "y") - truth["y"])[prf]
        sigma = np.abs(read(out, "sigma") - truth["sigma"])[prf]
        report[name]["median_centre_error"] = round(float(np.nanmedian(centre)), 4)
        report[name]["median_sigma_error"] = round(float(np.nanmedian(sigma)), 4)
    report["time_ratio"] = round(report["768px"]["wall_s"] / report["100px"]["wall_s"], 2)
    print(json.dumps(report))
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
