"""Measurements of docs/validation.md, "Spatial smoothing": what ``--smooth-fwhm`` gains and costs.

Writes a high-resolution ``prfmap-synth`` T1w participant (``--voxel-mm``, default 1.5 mm: the
synthetic head's map runs 0.2–9° of eccentricity over about 33 mm, so a voxel spans ~0.3° there,
less than the pRFs' σ of 0.4–1.5°) at each noise level, fits it with the defaults and each
``--smooth-fwhm`` in a subprocess, and prints one JSON line per case: over the true pRF voxels the
share refined (with standard errors), the median cvr2, the median centre error and σ bias (all, and
the small foveal pRFs: true σ below 0.8°), the coverage of the 95 % intervals (unflagged refined
voxels), and the share of the voxels without a pRF within 2 voxels of one whose cvr2 exceeds 0.1
(signal smoothed into them).

    KERAS_BACKEND=jax python tests/benchmarks/validate_smoothing.py --noise 1 2 --fwhm 0 1.5 3 4.5 \\
        [--voxel-mm 1.5] [--seed 3] [--keep DIR] [--table FILE]
    python tests/benchmarks/validate_smoothing.py --kernels --fwhm 4 6 8

``--kernels``: the surface smoothing's effective FWHM on fsaverage5's and fs_LR 32k's midthickness
(the second moment of the kernel around 300 vertices, ``2.355 · sqrt(E[r²] / 2)``), beside Connectome
Workbench's geodesic Gaussian (``wb_command -metric-smoothing ... -fwhm``) where it is installed.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy import ndimage

sys.path.insert(0, str(Path(__file__).resolve().parent))
from validate_timing_cvr2 import APP, emit, participant  # noqa: E402

sys.path.insert(0, str(APP))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from validate_uncertainty import coverage  # noqa: E402

from helpers import read_maps  # noqa: E402
from prfmap.engine import catalog  # noqa: E402
from prfmap.io.meshes import find_midthickness  # noqa: E402
from prfmap.io.smoothing import mean_vertex_area, smooth_surface, surface_iterations  # noqa: E402
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset  # noqa: E402

SMALL_SIGMA_DEG = 0.8
"""True σ below this: the small (foveal) pRFs that smoothing blurs most."""


def _median(values: np.ndarray) -> float:
    return round(float(np.nanmedian(values)), 4) if np.isfinite(values).any() else float("nan")


def beside(bids: Path, prf: np.ndarray, voxels: int = 2) -> np.ndarray:
    """The in-mask voxels without a pRF within ``voxels`` of one that has (where smoothing spreads signal)."""
    mask_path = next((bids / "derivatives" / "fmriprep" / "sub-01" / "func").glob("*_desc-brain_mask.nii.gz"))
    mask = np.asanyarray(nib.load(mask_path).dataobj) > 0
    volume = np.zeros(mask.shape, bool)
    volume[mask] = prf
    near = ndimage.binary_dilation(volume, iterations=voxels)[mask]
    return near & ~prf


def measure(bids: Path, out: Path) -> dict:
    """Recovery, cvr2 and coverage over the true pRF voxels of one fit."""
    truth = load_truth(bids)
    maps = read_maps(bids, out, ["x", "y", "sigma", "status", "r2", "cvr2"])
    se = read_maps(bids, out, ["x", "y", "sigma"], stat="se")
    lower = read_maps(bids, out, ["sigma"], stat="ci95lower")
    upper = read_maps(bids, out, ["sigma"], stat="ci95upper")
    prf = truth["mask"]
    fitted = prf & np.isfinite(maps["x"])
    refined = fitted & np.isfinite(se["x"])
    doubtful = catalog.doubtful(catalog.status_codes(maps["status"]))
    small = fitted & (truth["sigma"] < SMALL_SIGMA_DEG)
    error = np.hypot(maps["x"] - truth["x"], maps["y"] - truth["y"])
    bias = maps["sigma"] - truth["sigma"]
    empty = beside(bids, prf)
    return {
        "prf_voxels": int(prf.sum()),
        "small_prf_voxels": int(small.sum()),
        "refined_share": round(float(np.mean(refined[prf])), 4),
        "median_cvr2": _median(maps["cvr2"][prf]),
        "median_r2": _median(maps["r2"][prf]),
        "median_centre_error": _median(error[fitted]),
        "median_centre_error_small": _median(error[small]),
        "sigma_bias": _median(bias[fitted]),
        "sigma_bias_small": _median(bias[small]),
        "coverage": coverage(maps, se, lower, upper, truth, refined & ~doubtful),
        "beside_voxels": int(empty.sum()),
        "beside_cvr2_above_0.1": round(float(np.mean(np.nan_to_num(maps["cvr2"][empty], nan=0) > 0.1)), 4),
    }


def effective_fwhm(coords: np.ndarray, kernels: np.ndarray, centres: np.ndarray) -> float:
    """Median over the centres of ``2.355 · sqrt(E[r²] / 2)``, E over each kernel's weights (column k)."""
    values = []
    for k, centre in enumerate(centres):
        weights = np.clip(kernels[:, k], 0, None)
        r2 = np.sum((coords - coords[centre]) ** 2, axis=1)
        values.append(np.sqrt(8 * np.log(2)) * np.sqrt(np.sum(weights * r2) / np.sum(weights) / 2))
    return round(float(np.median(values)), 2)


def workbench_kernels(
    mesh: tuple[np.ndarray, np.ndarray], deltas: np.ndarray, fwhm: float
) -> np.ndarray | None:
    """Workbench's geodesic Gaussian smoothing of each column, or None without ``wb_command``."""
    if shutil.which("wb_command") is None:
        return None
    with tempfile.TemporaryDirectory() as folder:
        surf, metric, out = (Path(folder) / name for name in ("m.surf.gii", "d.func.gii", "s.func.gii"))
        nib.save(
            nib.gifti.GiftiImage(
                darrays=[
                    nib.gifti.GiftiDataArray(mesh[0].astype(np.float32), intent="NIFTI_INTENT_POINTSET"),
                    nib.gifti.GiftiDataArray(mesh[1].astype(np.int32), intent="NIFTI_INTENT_TRIANGLE"),
                ]
            ),
            surf,
        )
        columns = [nib.gifti.GiftiDataArray(np.ascontiguousarray(c, np.float32)) for c in deltas.T]
        nib.save(nib.gifti.GiftiImage(darrays=columns), metric)
        subprocess.run(
            ["wb_command", "-metric-smoothing", str(surf), str(metric), str(fwhm), str(out), "-fwhm"],
            check=True,
        )
        return np.column_stack([d.data for d in nib.load(out).darrays])


def kernels(fwhms: list[float]) -> None:
    """Print the surface smoothing's effective FWHM per mesh and requested FWHM (``--kernels``)."""
    rng = np.random.default_rng(0)
    for space, den in (("fsaverage5", None), ("fsLR", "32k")):
        meshes, source = find_midthickness("01", space, den, None)
        coords, faces = meshes["L"]
        centres = rng.choice(len(coords), 300, replace=False)
        deltas = np.zeros((len(coords), len(centres)))
        deltas[centres, np.arange(len(centres))] = 1.0
        for fwhm in fwhms:
            iterations = surface_iterations(fwhm, mean_vertex_area(coords, faces))
            # a random last column: every vertex's row varies, so every vertex takes part
            with_noise = np.column_stack([deltas, rng.normal(size=len(coords))])
            ours = smooth_surface(with_noise, (coords, faces), fwhm)[:, :-1] if iterations else None
            theirs = workbench_kernels((coords, faces), deltas, fwhm)
            print(
                json.dumps(
                    {
                        "mesh": source,
                        "vertex_spacing_mm": round(float(np.sqrt(mean_vertex_area(coords, faces))), 2),
                        "fwhm_mm": fwhm,
                        "iterations": iterations,
                        "prfmap_effective_fwhm_mm": effective_fwhm(coords, ours, centres)
                        if ours is not None
                        else 0,
                        "workbench_effective_fwhm_mm": effective_fwhm(coords, theirs, centres)
                        if theirs is not None
                        else None,
                    }
                ),
                flush=True,
            )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--voxel-mm", type=float, default=1.5)
    parser.add_argument("--noise", type=float, nargs="+", default=[1.0, 2.0])
    parser.add_argument("--fwhm", type=float, nargs="+", default=[0.0, 1.5, 3.0, 4.5])
    parser.add_argument("--seed", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="folder for the datasets and outputs (kept)")
    parser.add_argument("--table", type=Path, help="also append the JSON lines to this file")
    parser.add_argument("--kernels", action="store_true", help="measure the surface kernels instead")
    args = parser.parse_args()
    if args.kernels:
        kernels(args.fwhm)
        return 0
    root = args.keep or Path(tempfile.mkdtemp(prefix="validate-smoothing-"))
    for level in args.noise:
        case = root / f"voxel{args.voxel_mm:g}_noise{level:g}_seed{args.seed}"
        bids = case / "bids"
        if not (bids / "dataset_description.json").is_file():
            make_synthetic_dataset(
                bids, SynthConfig(space="T1w", voxel_mm=args.voxel_mm, noise=level, seed=args.seed, runs=2)
            )
        for fwhm in args.fwhm:
            out = case / f"out_fwhm{fwhm:g}"
            wall = participant(bids, out, "--smooth-fwhm", str(fwhm))
            record = {
                "voxel_mm": args.voxel_mm,
                "noise": level,
                "seed": args.seed,
                "fwhm_mm": fwhm,
                "wall_s": round(wall, 1),
                **measure(bids, out),
            }
            emit(record, args.table)
            shutil.rmtree(str(out) + "-work", ignore_errors=True)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
