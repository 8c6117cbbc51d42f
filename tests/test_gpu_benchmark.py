"""tests/benchmarks/gpu.sh works before GPU time is spent on it: its dry run on this CPU (issue 23)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "tests" / "benchmarks" / "gpu.sh"


def run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict]:
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("KERAS_BACKEND", None)
    env.pop("OUT", None)
    proc = subprocess.run(
        ["bash", str(SCRIPT), *args, "--out", str(tmp_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    summary = tmp_path / "gpu_benchmark.json"
    return proc, json.loads(summary.read_text()) if summary.exists() else {}


def test_dry_run_fits_every_case_on_both_backends_and_writes_the_table(tmp_path):
    proc, summary = run(tmp_path, "--dry-run")
    assert proc.returncode == 0, proc.stderr[-2000:]
    records = summary["records"]
    cases = {(r["backend"], r["case"]) for r in records}
    assert {("jax", c) for c in ("device", "rates", "W", "fsaverage", "hcp")} <= cases
    assert {("torch", c) for c in ("device", "rates", "W")} <= cases
    fits = [r for r in records if r["case"] in ("W", "fsaverage", "hcp")]
    assert all(r["passed"] and r["units_per_s"] > 0 and r["gflop"] >= 0 for r in fits)
    assert {r["frames"] for r in fits if r["case"] == "hcp"} == {200}  # five runs of 40 frames
    rates = [r for r in records if r["case"] == "rates"]
    assert all(r["fp32"] > 0 and r["tf32"] > 0 and r["bf16"] > 0 for r in rates)
    header = proc.stdout.splitlines()[0].split()
    assert header[:6] == ["case", "backend", "units", "frames", "seconds", "units/s"]
    assert "of" in header and "check" in header and "matmul jax: fp32" in proc.stdout


def test_a_backend_on_its_cpu_fails_the_real_run():
    sys.path.insert(0, str(SCRIPT.parent))
    from gpu import missing_gpu

    assert "jax sees no GPU" in missing_gpu({"backend": "jax", "device": "cpu"}, dry=False)
    assert missing_gpu({"backend": "jax", "device": "cpu"}, dry=True) is None
    assert missing_gpu({"backend": "torch", "device": "cuda:0 (NVIDIA H200)"}, dry=False) is None
