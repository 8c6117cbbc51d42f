"""Benchmark of the engine on a workload, reported against this machine's own matrix-multiply speed.

Prints one JSON line per stage: seconds, units/s, the FLOPs the stage computes, achieved GFLOP/s and
that figure as a fraction of the float32 matrix-multiply speed of the same backend measured in the
same run (before and after the fit; the faster is the reference). Seconds alone mean little on a
noisy shared machine; the fractions are what to compare. The last line sums up: units/s, units/s per
100 GFLOP/s of matrix multiply, the whole fit in TFLOP-equivalents (seconds × the reference speed)
and the median centre and σ errors against the truth.

Workloads (``tests/benchmarks/workloads.py``): ``W`` (20,484 units, one bar run of 200 frames, the
default), ``long`` (3,000 units, five runs of 300 frames at TR 1 s: wedges, rings, bars), ``fsaverage``
(327,684 × 300) and ``hcp`` (59,412 × 1,500); ``gauss`` + SPM HRF, 8,000-point grid,
Levenberg–Marquardt refinement of every unit. To compare with an older engine, run this script with
``PYTHONPATH=<checkout>/app`` (a ``git worktree`` of that commit) on the same machine.

    KERAS_BACKEND=jax python tests/benchmarks/bench_engine.py [--workload long] [--units N] [--json F]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from workloads import WORKLOADS, distinct_frames, make  # noqa: E402

TARGET_TFLOP = 12.0  # whole of W within the time of 12 TFLOP of float32 matrix multiply (engine issue)


def matmul_gflops(size: int = 2048, repeats: int = 5, dtype: str = "float32") -> float:
    """Best matrix-multiply speed of the active backend, compiled, in GFLOP/s."""
    from keras import ops

    from prfmap.engine.backend import get_backend

    fn = get_backend().compile_fun(lambda a, b: ops.sum(ops.matmul(a, b)))
    rng = np.random.default_rng(0)
    a = ops.convert_to_tensor(rng.standard_normal((size, size)).astype(np.float32), dtype=dtype)
    b = ops.convert_to_tensor(rng.standard_normal((size, size)).astype(np.float32), dtype=dtype)
    ops.convert_to_numpy(fn(a, b))
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        ops.convert_to_numpy(fn(a, b))
        best = min(best, time.perf_counter() - t0)
    return 2 * size**3 / best / 1e9


def stage_flops(settings: dict[str, Any], units: int, frames: int, distinct: int) -> dict[str, float]:
    """FLOPs each stage computes (design.md's counts, with the distinct frames of issue 18).

    One neural response of one unit is ``2·D·P`` (D distinct frames, P pixels) and its way to the BOLD
    of every frame ``2·D·F`` (the folded expansion and HRF); without distinct frames ``D = F``. LM
    evaluates the response and its three derivatives once per unit-step computed.
    """
    pixels, n_grid = settings["pixels"], settings["grid_points"]
    one = 2 * distinct * pixels + 2 * distinct * frames
    # the grid is scored over the distinct frames, after one product of the data with M
    scoring = 2 * units * n_grid * frames if distinct == frames else 2 * units * (n_grid + frames) * distinct
    return {
        "grid_predictions": n_grid * one,
        "grid_scoring": scoring,
        "refine": settings["unit_iterations"] * 4 * one,
        "linear": units * one,
    }


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """Make the workload, fit it (a warm-up pass first) and return the JSON records."""
    from prfmap.engine import backend_info, fit_prf

    workload = WORKLOADS[args.workload]
    case = make(workload, units=args.units)
    units, frames = case.data.shape
    distinct = units and distinct_frames(case.stim.design)
    peaks = [matmul_gflops()]
    records: list[dict[str, Any]] = [{"stage": "matmul", "gflops": round(peaks[0], 1), **backend_info()}]
    options = {"nuisance": case.nuisance, "grid": case.grid, "mem_gb": args.mem_gb, "refine": args.refine}
    t0 = time.perf_counter()
    warm_units = units if args.warmup == "full" else min(units, 2048)
    fit_prf(case.data[:warm_units], case.stim, case.tr, **options)
    warm_seconds = time.perf_counter() - t0
    res = fit_prf(case.data, case.stim, case.tr, **options)
    peaks.append(matmul_gflops())
    peak = max(peaks)
    flops = stage_flops(res.settings.to_dict(), units, frames, distinct)
    for stage, count in flops.items():
        seconds = max(res.timings[stage], 1e-9)
        gflops = count / seconds / 1e9
        records.append(
            {
                "stage": stage,
                "seconds": round(seconds, 3),
                "units_per_s": round(units / seconds, 1),
                "gflop": round(count / 1e9, 1),
                "gflops": round(gflops, 1),
                "fraction_of_matmul": round(gflops / peak, 3),
            }
        )
    total = res.timings["total"]
    records.append(
        {
            "stage": "total",
            "workload": workload.name,
            "units": units,
            "frames": frames,
            "distinct_frames": distinct,
            "pixels": res.settings.pixels,
            "grid_points": res.settings.grid_points,
            "seconds": round(total, 3),
            "units_per_s": round(units / total, 1),
            "units_per_s_per_100_gflops": round(units / total / peak * 100, 1),
            "tflop_equivalent": round(total * peak / 1e3, 2),
            "matmul_gflops": [round(p, 1) for p in peaks],
            "iterations": res.settings.iterations,
            "unit_iterations": res.settings.unit_iterations,
            "units_refined": res.settings.units_refined,
            **{f"median_{k}_error": round(v, 4) for k, v in case.errors(res.params).items()},
            "warmup_units": warm_units,
            "warmup_seconds_incl_compile": round(warm_seconds, 1),
        }
    )
    if workload.name == "W":
        records[-1]["fraction_of_12_tflop_target"] = round(total * peak / 1e3 / TARGET_TFLOP, 3)
    if args.save_params:
        np.savez(args.save_params, **{k: res.params[k] for k in ("x", "y", "sigma")})
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workload", default="W", choices=sorted(WORKLOADS))
    parser.add_argument("--units", type=int, help="units to fit (default: the workload's)")
    parser.add_argument("--refine", default="lm", choices=("lm", "sgd", "none"))
    parser.add_argument("--mem-gb", type=float, default=4.0)
    parser.add_argument(
        "--warmup",
        choices=("full", "subset"),
        default="full",
        help="compile on the whole workload first (default) or on 2,048 units",
    )
    parser.add_argument("--json", type=Path, help="also write the records to this file")
    parser.add_argument("--save-params", type=Path, help="write x, y, sigma of the fit (.npz)")
    args = parser.parse_args()
    records = run(args)
    for record in records:
        print(json.dumps(record), flush=True)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")


if __name__ == "__main__":
    main()
