"""Benchmark of the engine on workload W, reported against this machine's own matrix-multiply speed.

Prints one JSON line per stage: seconds, units/s, achieved GFLOP/s and that figure as a fraction of the
float32 matrix-multiply speed of the same backend measured in the same run. Seconds alone mean little on a
noisy shared machine; the fraction is what to compare.

Workload W (defaults): 20,484 units (both fsaverage5 hemispheres), 200 frames, 101 × 101 aperture,
``gauss`` + SPM HRF, 8,000-point grid, Levenberg–Marquardt refinement of every unit.

    KERAS_BACKEND=jax python tests/benchmarks/bench_engine.py [--units 327684 --frames 300]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))

TARGET_TFLOP = 12.0  # whole of W within the time of 12 TFLOP of float32 matrix multiply


def matmul_gflops(size: int = 2048, repeats: int = 5) -> float:
    """Best float32 matrix-multiply speed of the active backend, compiled, in GFLOP/s."""
    from keras import ops

    from prfmap.engine.backend import get_backend

    fn = get_backend().compile_fun(lambda a, b: ops.sum(ops.matmul(a, b)))
    rng = np.random.default_rng(0)
    a = ops.convert_to_tensor(rng.standard_normal((size, size), dtype=np.float32))
    b = ops.convert_to_tensor(rng.standard_normal((size, size), dtype=np.float32))
    ops.convert_to_numpy(fn(a, b))
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        ops.convert_to_numpy(fn(a, b))
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def bar_apertures(n_frames: int, size: int, fov: float) -> np.ndarray:
    """Eight bar sweeps in a circular aperture, as in a standard retinotopy run."""
    x = np.linspace(-fov / 2, fov / 2, size)
    xx, yy = np.meshgrid(x, x[::-1])
    angles = np.arange(8) * 45.0
    per = int(np.ceil(n_frames / len(angles)))
    frames = []
    for angle in angles:
        a = np.radians(angle)
        along = xx * np.cos(a) + yy * np.sin(a)
        for pos in np.linspace(-fov / 2, fov / 2, per):
            frames.append((np.abs(along - pos) < fov / 16) & (np.hypot(xx, yy) <= fov / 2))
    return np.asarray(frames[:n_frames], dtype=np.float32)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--units", type=int, default=20484)
    parser.add_argument("--frames", type=int, default=200)
    parser.add_argument("--size", type=int, default=101)
    parser.add_argument("--grid", type=int, nargs=3, default=(20, 20, 20), metavar=("ECC", "ANGLE", "SIGMA"))
    parser.add_argument("--refine", default="lm", choices=("lm", "sgd", "none"))
    parser.add_argument("--mem-gb", type=float, default=4.0)
    parser.add_argument("--noise", type=float, default=0.5, help="noise SD relative to signal SD")
    args = parser.parse_args()

    from prfmap.engine import Stimulus, backend_info, fit_prf, polar_grid, predict

    info = backend_info()
    peak = matmul_gflops()
    print(json.dumps({"stage": "matmul", "gflops": round(peak, 1), **info}), flush=True)

    fov, tr = 20.0, 1.5
    stim = Stimulus(bar_apertures(args.frames, args.size, fov), fov)
    rng = np.random.default_rng(0)
    ecc = 9.0 * np.sqrt(rng.uniform(size=args.units))
    angle = rng.uniform(0, 2 * np.pi, args.units)
    truth = {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": rng.uniform(0.3, 4.0, args.units),
        "amplitude": rng.uniform(1, 3, args.units),
        "baseline": np.zeros(args.units),
    }
    data = predict(truth, stim, tr)
    data += args.noise * data.std(axis=1, keepdims=True) * rng.standard_normal(data.shape)
    grid = polar_grid(stim, *args.grid)

    warm = fit_prf(data[: min(args.units, 2048)], stim, tr, refine=args.refine, grid=grid, mem_gb=args.mem_gb)
    res = fit_prf(data, stim, tr, refine=args.refine, grid=grid, mem_gb=args.mem_gb)
    s = res.settings
    units, frames, pixels, n_grid = args.units, args.frames, s["pixels"], s["grid_points"]
    conv = 2 * frames * frames
    flops = {
        "grid_predictions": 2 * n_grid * frames * pixels,
        "grid_scoring": 2 * units * n_grid * frames,
        "refine": s["unit_iterations"] * 4 * (2 * frames * pixels + conv),
        "linear": units * (2 * frames * pixels + conv),
    }
    for stage in ("grid_predictions", "grid_scoring", "refine", "linear"):
        seconds = res.timings[stage]
        gflops = flops[stage] / max(seconds, 1e-9) / 1e9
        print(
            json.dumps(
                {
                    "stage": stage,
                    "seconds": round(seconds, 3),
                    "units_per_s": round(units / max(seconds, 1e-9), 1),
                    "gflops": round(gflops, 1),
                    "fraction_of_matmul": round(gflops / peak, 3),
                    "iterations": s["iterations"] if stage == "refine" else None,
                }
            ),
            flush=True,
        )
    budget = TARGET_TFLOP * 1e12 / (peak * 1e9)
    err = np.hypot(res.params["x"] - truth["x"], res.params["y"] - truth["y"])
    print(
        json.dumps(
            {
                "stage": "total",
                "seconds": round(res.timings["total"], 3),
                "target_seconds": round(budget, 1),
                "fraction_of_target": round(res.timings["total"] / budget, 3),
                "units": units,
                "frames": frames,
                "pixels": pixels,
                "grid_points": n_grid,
                "median_centre_error_deg": round(float(np.nanmedian(err)), 4),
                "warmup_seconds_incl_compile": round(warm.timings["total"], 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
