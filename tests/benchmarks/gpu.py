"""The GPU figures (issue 23): prfmap's engine on an H200, with the card's matmul rates of the same call.

One command (``tests/benchmarks/gpu.sh``, which installs Keras from carried wheels first) runs, in one
process per backend, each case once to compile and warm up and once timed, and checks each fit against
the truth of its workload (``workloads.py``):

- the card's matrix-multiply rates: float32 (true fp32), TF32 and bf16, in GFLOP/s (JAX and PyTorch);
- W (20,484 units × 200 frames) on JAX and on PyTorch with ``torch.compile``;
- full fsaverage (327,684 × 300) and the HCP-scale long acquisition (59,412 × 1,500, five runs of
  distinct apertures) on JAX;

every unit refined with Levenberg–Marquardt. It prints one table (units/s, seconds, FLOPs, the fraction
of the card's fp32 and TF32 rates, median centre/σ errors against the truth) and writes every record to
``$OUT/gpu_benchmark.json`` (``--out``). ``--dry-run`` runs the same code on a CPU on tiny versions
of the workloads (seconds), which ``tests/test_gpu_benchmark.py`` does in ``make test``.

Exit status: 0 when every case ran and passed its check, 1 otherwise (the table and the JSON are
written either way), 2 when a backend does not see a GPU (without ``--dry-run``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "app"))
sys.path.insert(0, str(HERE))

CASES = {"jax": ("rates", "W", "fsaverage", "hcp"), "torch": ("rates", "W")}
DRY_RUN = {"units": 48, "size": 21, "frames_per_run": 40, "grid": (4, 4, 3)}
"""The dry run's workloads: their runs and apertures, on a 21-pixel grid, 40 frames per run."""
MAX_ERROR_DEG = {"W": 0.35, "fsaverage": 0.35, "hcp": 0.2}
"""A fit passes when its median centre and σ errors against the truth are below these (noise SD half
the signal SD; W measured 0.20°/0.14° on a CPU); the dry run only asks for finite, sub-3° fits."""
GEMM_SIZE = {"full": 8192, "dry": 256}


def matmul_rates(backend: str, size: int, repeats: int = 5) -> dict[str, float]:
    """GFLOP/s of a size³ matrix product in true float32, TF32 and bf16, best of ``repeats``."""
    flops = 2.0 * size**3
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        key = jax.random.PRNGKey(0)
        a = jax.random.normal(key, (size, size), jnp.float32)
        b = jax.random.normal(jax.random.PRNGKey(1), (size, size), jnp.float32)
        variants = {
            "fp32": (jax.jit(lambda x, y: jnp.matmul(x, y, precision="float32")), a, b),
            "tf32": (jax.jit(lambda x, y: jnp.matmul(x, y, precision="tensorfloat32")), a, b),
            "bf16": (jax.jit(jnp.matmul), a.astype(jnp.bfloat16), b.astype(jnp.bfloat16)),
        }

        def timed(fn: Any, x: Any, y: Any) -> float:
            fn(x, y).block_until_ready()
            best = float("inf")
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn(x, y).block_until_ready()
                best = min(best, time.perf_counter() - t0)
            return best

        return {name: flops / timed(*v) / 1e9 for name, v in variants.items()}
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    out = {}
    for name, dtype, precision in (
        ("fp32", torch.float32, "highest"),
        ("tf32", torch.float32, "high"),
        ("bf16", torch.bfloat16, "highest"),
    ):
        torch.set_float32_matmul_precision(precision)
        x, y = a.to(dtype), b.to(dtype)
        torch.matmul(x, y)
        best = float("inf")
        for _ in range(repeats):
            if device == "cuda":
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            torch.matmul(x, y)
            if device == "cuda":
                torch.cuda.synchronize()
            best = min(best, time.perf_counter() - t0)
        out[name] = flops / best / 1e9
    torch.set_float32_matmul_precision("highest")  # the engine's: torch's default
    return out


def fit_case(name: str, dry: bool, mem_gb: float) -> dict[str, Any]:
    """Make workload ``name``, fit it twice (compile and warm-up, then timed) and check it."""
    from bench_engine import stage_flops
    from workloads import WORKLOADS, distinct_frames, make

    from prfmap.engine import fit_prf

    workload = WORKLOADS[name]
    if dry:
        workload = workload.scaled(**{k: v for k, v in DRY_RUN.items() if k != "units"})
    t0 = time.perf_counter()
    case = make(workload, units=DRY_RUN["units"] if dry else None)
    made = time.perf_counter() - t0
    options = {"nuisance": case.nuisance, "grid": case.grid, "mem_gb": mem_gb}
    if dry:
        options["max_iter"] = 5
    t0 = time.perf_counter()
    fit_prf(case.data, case.stim, case.tr, **options)
    warm = time.perf_counter() - t0
    res = fit_prf(case.data, case.stim, case.tr, **options)
    units, frames = case.data.shape
    flops = stage_flops(res.settings.to_dict(), units, frames, distinct_frames(case.stim.design))
    seconds = res.timings["total"]
    errors = case.errors(res.params)
    limit = 3.0 if dry else MAX_ERROR_DEG[name]
    return {
        "case": name,
        "units": units,
        "frames": frames,
        "seconds": round(seconds, 3),
        "units_per_s": round(units / seconds, 1),
        "gflop": round(sum(flops.values()) / 1e9, 1),
        "gflops": round(sum(flops.values()) / seconds / 1e9, 1),
        "stages": {k: round(v, 3) for k, v in res.timings.items()},
        "iterations": res.settings.iterations,
        "unit_iterations": res.settings.unit_iterations,
        "median_centre_error_deg": round(errors["centre_deg"], 4),
        "median_sigma_error_deg": round(errors["sigma_deg"], 4),
        "passed": bool(errors["centre_deg"] < limit and errors["sigma_deg"] < limit),
        "warmup_seconds": round(warm, 1),
        "workload_seconds": round(made, 1),
    }


def missing_gpu(info: dict[str, str], dry: bool) -> str | None:
    """What is wrong when a backend runs on its CPU outside a dry run (``backend_info()``), else None."""
    if dry or "cpu" not in info["device"].lower():
        return None
    return (
        f"{info['backend']} sees no GPU (device {info['device']}): check the driver and CUDA_VISIBLE_DEVICES"
    )


def child(backend: str, cases: list[str], dry: bool, out: Path, mem_gb: float) -> int:
    """Run ``cases`` on ``backend`` in this process; records go to ``out`` (JSON lines)."""
    from prfmap.engine import backend_info, select_backend

    select_backend(backend)
    info = backend_info()
    records: list[dict[str, Any]] = [{"case": "device", **info}]
    if backend == "jax":
        import jax

        records[0]["jax_default_matmul_precision"] = str(jax.config.jax_default_matmul_precision)
    status = 0
    problem = missing_gpu(info, dry)
    if problem:
        records[0]["error"] = problem
        status = 2
    with out.open("a", encoding="utf-8") as f:
        f.write(json.dumps({"backend": backend, **records[0]}) + "\n")
    for name in cases if status == 0 else ():
        try:
            if name == "rates":
                rates = matmul_rates(backend, GEMM_SIZE["dry" if dry else "full"])
                records.append({"case": "rates", **{k: round(v, 1) for k, v in rates.items()}})
            else:
                records.append(fit_case(name, dry, mem_gb))
        except Exception as exc:  # noqa: BLE001 - one case failing must not lose the others' figures
            records.append(
                {
                    "case": name,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=5),
                }
            )
        with out.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"backend": backend, **records[-1]}) + "\n")
    return status


def table(records: list[dict[str, Any]]) -> str:
    """The one table: a row per fitted case, against its backend's fp32 and TF32 rates."""
    rates = {r["backend"]: r for r in records if r.get("case") == "rates" and "fp32" in r}
    lines = [
        f"{'case':<10} {'backend':<7} {'units':>8} {'frames':>6} {'seconds':>8} {'units/s':>10} "
        f"{'GFLOP':>8} {'of fp32':>8} {'of tf32':>8} {'centre°':>8} {'sigma°':>7} {'check':>6}"
    ]
    for r in records:
        if r.get("case") in ("rates", "device"):
            continue
        if "error" in r:
            lines.append(f"{r['case']:<10} {r['backend']:<7} failed: {r['error'][:80]}")
            continue
        rate = rates.get(r["backend"], {})
        of = {k: r["gflops"] / rate[k] if rate.get(k) else float("nan") for k in ("fp32", "tf32")}
        lines.append(
            f"{r['case']:<10} {r['backend']:<7} {r['units']:>8} {r['frames']:>6} {r['seconds']:>8.2f} "
            f"{r['units_per_s']:>10.0f} {r['gflop']:>8.0f} {of['fp32']:>8.3f} {of['tf32']:>8.3f} "
            f"{r['median_centre_error_deg']:>8.3f} {r['median_sigma_error_deg']:>7.3f} "
            f"{'ok' if r['passed'] else 'FAIL':>6}"
        )
    for backend, r in rates.items():
        lines.append(
            f"matmul {backend}: fp32 {r['fp32']:.0f}, tf32 {r['tf32']:.0f}, bf16 {r['bf16']:.0f} GFLOP/s"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny workloads, a CPU will do")
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-benchmark")))
    parser.add_argument("--backends", default="jax,torch", help="comma-separated (default jax,torch)")
    parser.add_argument("--mem-gb", type=float, default=40.0, help="engine budget (at most 60%% of the GPU)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=270.0,
        help="seconds per backend process (both within the device's 10 min)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cases", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    lines = args.out / "gpu_benchmark.jsonl"
    if args.child:
        return child(args.child, args.cases.split(","), args.dry_run, lines, args.mem_gb)
    lines.unlink(missing_ok=True)
    status = 0
    for backend in args.backends.split(","):
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONUNBUFFERED": "1"}
        if backend == "torch":  # torch.compile on the GPU; on a CPU it takes minutes per shape
            env["PRFMAP_COMPILE"] = "0" if args.dry_run else "1"
        command = [
            sys.executable,
            __file__,
            "--child",
            backend,
            "--cases",
            ",".join(CASES[backend]),
            "--out",
            str(args.out),
            "--mem-gb",
            str(args.mem_gb),
        ] + (["--dry-run"] if args.dry_run else [])
        try:
            code = subprocess.run(command, env=env, timeout=args.timeout).returncode
        except subprocess.TimeoutExpired:
            code = 1
            with lines.open("a", encoding="utf-8") as f:
                f.write(
                    json.dumps(
                        {
                            "backend": backend,
                            "case": "timeout",
                            "error": f"stopped after {args.timeout:.0f} s",
                        }
                    )
                    + "\n"
                )
        status = max(status, code)
    records = (
        [json.loads(line) for line in lines.read_text(encoding="utf-8").splitlines()]
        if lines.exists()
        else []
    )
    fits = [r for r in records if r.get("case") not in ("rates", "device")]
    if any("error" in r or not r.get("passed", False) for r in fits) or not fits:
        status = max(status, 1)
    summary = {"dry_run": args.dry_run, "status": status, "records": records, "table": table(records)}
    (args.out / "gpu_benchmark.json").write_text(json.dumps(summary, indent=1) + "\n", encoding="utf-8")
    print(summary["table"], flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
