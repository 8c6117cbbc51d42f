"""Peak resident memory of a whole participant run against its ``--mem-gb`` bound.

Writes a synthetic T1w participant of about 300,000 voxels × 300 frames (a box-shaped brain mask, the
bar-sweep stimulus of ``prfmap-synth``), runs ``prfmap ... participant --mem-gb BOUND`` in a subprocess
and reports the child's peak resident set size (``getrusage(RUSAGE_CHILDREN).ru_maxrss``) as one JSON
line. Exits 1 when the peak exceeds the bound.

    KERAS_BACKEND=jax python tests/benchmarks/bench_memory.py [--mem-gb 4] [--refine none] [--keep DIR]
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


def box_layout(shape: tuple[int, int, int]):
    """A ``synth`` volume layout whose mask is the whole box (every voxel a unit)."""
    from prfmap.io.geometry import VolumeGeometry

    zooms = 2.0
    affine = np.diag([zooms, zooms, zooms, 1.0])
    affine[:3, 3] = -np.array(shape) * zooms / 2
    mask = np.ones(shape, bool)
    ijk = np.indices(shape).reshape(3, -1).T.astype(float)
    rel = (ijk - (np.array(shape) - 1) / 2) / (np.array(shape) / 2)
    side = np.sign(rel[:, 0])
    prf = (rel[:, 1] < -0.45) & (np.abs(rel[:, 0]) > 0.05) & (np.abs(rel[:, 2]) < 0.6)
    coords = {"u": (rel[:, 1] + 1) / 0.55, "v": rel[:, 2] / 0.6, "sign": -side}
    header = nib.Nifti1Header()
    header.set_qform(affine, code=1)
    header.set_sform(affine, code=1)
    return VolumeGeometry(mask=mask, affine=affine, header=header), coords, prf, np.zeros(len(prf), bool)


def make_dataset(root: Path, shape: tuple[int, int, int], steps: int, blank: int) -> tuple[int, int]:
    """Write the participant unless ``root`` already holds it; returns (units, frames)."""
    from prfmap import synth

    config = synth.SynthConfig(space="T1w", runs=1, n_steps=steps, n_blank=blank, n_pixels=40)
    if not (root / "dataset_description.json").is_file():
        synth._volume_layout = lambda small: box_layout(shape)  # the benchmark's own, bigger brain
        synth.make_synthetic_dataset(root, config)
    return int(np.prod(shape)), int(synth.bar_apertures(config).shape[0])


def main() -> int:
    """Write the participant, fit it under a memory bound, print the peak as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mem-gb", type=float, default=4.0)
    parser.add_argument("--refine", default="none", choices=("none", "lm", "sgd"))
    parser.add_argument("--shape", type=int, nargs=3, default=(60, 100, 50))
    parser.add_argument("--steps", type=int, default=35, help="bar positions per sweep")
    parser.add_argument("--blank", type=int, default=4, help="blank frames between sweep pairs")
    parser.add_argument("--nprocs", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--keep",
        type=Path,
        help="write the dataset and outputs here and keep them (a dataset already there is reused)",
    )
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="prfmap-bench-mem-")) if args.keep is None else args.keep
    try:
        t0 = time.perf_counter()
        units, frames = make_dataset(tmp / "bids", tuple(args.shape), args.steps, args.blank)
        written = time.perf_counter() - t0
        shutil.rmtree(tmp / "out", ignore_errors=True)
        shutil.rmtree(tmp / "work", ignore_errors=True)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(APP), os.environ.get("PYTHONPATH", "")])}
        cmd = [
            sys.executable,
            "-m",
            "prfmap.cli.run",
            str(tmp / "bids"),
            str(tmp / "out"),
            "participant",
            "--mem-gb",
            str(args.mem_gb),
            "--refine",
            args.refine,
            "--no-report",
            "--nprocs",
            str(args.nprocs),
            "--work-dir",
            str(tmp / "work"),
        ]
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
        peak_gb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024 / 2**30
        chunks = [line for line in proc.stdout.splitlines() if "chunk(s) fitted" in line]
        print(
            json.dumps(
                {
                    "units": units,
                    "frames": frames,
                    "mem_gb": args.mem_gb,
                    "refine": args.refine,
                    "backend": os.environ.get("KERAS_BACKEND", "jax"),
                    "exit_code": proc.returncode,
                    "peak_rss_gb": round(peak_gb, 3),
                    "under_bound": peak_gb <= args.mem_gb,
                    "fit_seconds": round(seconds, 1),
                    "dataset_seconds": round(written, 1),
                    "chunks": chunks[-1].split("INFO: ")[-1] if chunks else None,
                }
            )
        )
        if proc.returncode:
            sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        return 0 if proc.returncode == 0 and peak_gb <= args.mem_gb else 1
    finally:
        if args.keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
