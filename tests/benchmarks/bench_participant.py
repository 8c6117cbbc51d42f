"""Stage timings of the BIDS App's participant level, against this machine's matrix-multiply speed.

Writes (or reuses, ``--dataset``) the default ``prfmap-synth`` participant (fsaverage5, 2 runs of 190
frames), then runs ``prfmap <bids> <out> participant`` with the defaults (cvr2, the participant HRF
and the report on) twice with one ``--work-dir``: ``cold`` (nothing cached) and ``warm`` (the JAX
compilation cache and the pybids index the first run kept). Each stage's seconds come from the run
log's timestamps, beside the run's CPU seconds (which other jobs move less); with the float32
matrix-multiply speed of JAX measured before and after (the faster is the reference) they are also
given in TFLOP-equivalents (seconds × that speed), which is what to compare on a shared, noisy machine.

    KERAS_BACKEND=jax python tests/benchmarks/bench_participant.py [--dataset DIR] [--json FILE]
        [--model M ...] [--roi AREA ...]

``--roi`` fits only those visual areas' vertices (the benchmark of issue 34: the cost in proportion).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_engine import matmul_gflops  # noqa: E402

BIN = Path(sys.executable).parent
STAGES = (  # (stage, the log message that ends it), in the order the participant level logs them
    ("start, validation and imports", re.compile(r"memory budget|: \d+ run\(s\) in")),
    ("pybids query", re.compile(r": \d+ run\(s\) in \d+ fit")),
    ("load and preprocess", re.compile(r"units × \d+ frames")),
    ("participant HRF", re.compile(r"participant HRF from")),
    ("noise model", re.compile(r"noise model from")),
    ("fit", re.compile(r"fitted \d+ units in")),
    ("cross-validation (fits of 2 folds)", re.compile(r"cvr2 from")),
    ("write and report", re.compile(r"published \d+ files")),
)


def stage_seconds(log: Path, started: datetime, ended: datetime) -> dict[str, float]:
    """Seconds of each stage from the run log's timestamps (``started``/``ended``: the process)."""
    stamps = []
    for line in log.read_text(encoding="utf-8").splitlines():
        match = re.match(r"(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ", line)
        if match:
            stamps.append((datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f"), line))
    out, last = {}, started
    for name, pattern in STAGES:
        found = next((t for t, line in stamps if t >= last and pattern.search(line)), None)
        if found is None:
            continue
        out[name] = (found - last).total_seconds()
        last = found
    out["exit"] = (ended - last).total_seconds()
    return out


def run_participant(
    bids: Path, out: Path, work: Path, models: list[str] | None = None, roi: list[str] | None = None
) -> tuple[float, float, dict[str, float]]:
    """Run the participant level (defaults, ``--model``, ``--roi``); wall, CPU and stage seconds."""
    shutil.rmtree(out, ignore_errors=True)
    command = [
        str(BIN / "prfmap"),
        str(bids),
        str(out),
        "participant",
        "--backend",
        "jax",
        "--work-dir",
        str(work),
        *(["--model", *models] if models else []),
        *(["--roi", *roi] if roi else []),
    ]
    started = datetime.now()
    t0, cpu0 = time.perf_counter(), _children_cpu()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    wall, cpu = time.perf_counter() - t0, _children_cpu() - cpu0
    log = next(p for p in sorted((out / "logs").glob("prfmap_*.log")) if not p.stem.endswith("config"))
    return wall, cpu, stage_seconds(log, started, datetime.now())


def _children_cpu() -> float:
    """User + system CPU seconds of the finished child processes (less moved by other jobs than wall time)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", type=Path, help="a prfmap-synth dataset to reuse (written if absent)")
    parser.add_argument("--json", type=Path, help="also write the records to this file")
    parser.add_argument("--model", nargs="+", help="the models fitted (default: prfmap's, the Gaussian)")
    parser.add_argument("--roi", nargs="+", help="fit only these visual areas (default: every vertex)")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="prfmap-bench-participant-"))
    bids = args.dataset or scratch / "bids"
    if not (bids / "dataset_description.json").exists():
        subprocess.run(
            [str(BIN / "prfmap-synth"), str(bids), "--subjects", "1", "--runs", "2", "--space", "fsaverage5"],
            check=True,
            stdout=subprocess.DEVNULL,
        )
    peaks = [matmul_gflops()]
    records: list[dict[str, Any]] = []
    work = scratch / "work"
    for label in ("cold", "warm"):
        wall, cpu, stages = run_participant(bids, scratch / f"out-{label}", work, args.model, args.roi)
        records.append(
            {
                "run": label,
                "models": args.model or ["gauss"],
                "roi": args.roi or "all",
                "seconds": round(wall, 1),
                "cpu_seconds": round(cpu, 1),
                "stages": {k: round(v, 2) for k, v in stages.items()},
            }
        )
    peaks.append(matmul_gflops())
    peak = max(peaks)
    for record in records:
        record["tflop_equivalent"] = round(record["seconds"] * peak / 1e3, 2)
        record["stages_tflop_equivalent"] = {k: round(v * peak / 1e3, 2) for k, v in record["stages"].items()}
        record["matmul_gflops"] = [round(p, 1) for p in peaks]
        print(json.dumps(record), flush=True)
    if args.json:
        args.json.write_text(json.dumps(records, indent=1) + "\n")
    shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
