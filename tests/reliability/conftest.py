"""Helpers of the reliability tests: synthetic datasets, ``prfmap`` subprocesses, map comparison."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

import prfmap
from prfmap.synth import SynthConfig, make_synthetic_dataset

APP_DIR = Path(prfmap.__file__).resolve().parents[1]
CHUNK = 128


def env(chunk: int | None = CHUNK) -> dict[str, str]:
    """Environment of a ``prfmap`` subprocess on JAX with ``chunk`` units per checkpoint."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(APP_DIR), out.get("PYTHONPATH")) if p)
    out["KERAS_BACKEND"] = "jax"
    out.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if chunk:
        out["PRFMAP_CHUNK_UNITS"] = str(chunk)
    else:
        out.pop("PRFMAP_CHUNK_UNITS", None)
    return out


def command(bids: Path, out: Path, *args: str | Path) -> list[str]:
    """``python -m prfmap.cli.run BIDS OUT participant ARGS`` on one core without reports."""
    return [sys.executable, "-m", "prfmap.cli.run", str(bids), str(out), "participant",
            "--no-report", "--nprocs", "1", *map(str, args)]  # fmt: skip


def run(bids: Path, out: Path, *args: str | Path, chunk: int | None = CHUNK) -> subprocess.CompletedProcess:
    """Run ``prfmap`` to the end (text output captured)."""
    return subprocess.run(command(bids, out, *args), env=env(chunk), capture_output=True, text=True,
                          timeout=600, check=False)  # fmt: skip


def start(
    bids: Path, out: Path, *args: str | Path, chunk: int | None = CHUNK, tag: str = ""
) -> subprocess.Popen:
    """Start ``prfmap`` in the background, output to ``<out><tag>.stdout`` and ``.stderr`` next to ``out``."""
    log = out.parent / f"{out.name}{tag}.stdout"
    err = out.parent / f"{out.name}{tag}.stderr"
    return subprocess.Popen(command(bids, out, *args), env=env(chunk), stdout=log.open("w"),
                            stderr=err.open("w"), text=True)  # fmt: skip


def wait_for(
    condition: Callable[[], bool], proc: subprocess.Popen | None = None, timeout: float = 300
) -> None:
    """Poll ``condition`` until true; fail if ``proc`` ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"prfmap ended (exit {proc.returncode}) before the awaited state")
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting for the run to reach the awaited state")
        time.sleep(0.02)


def chunk_files(work: Path) -> list[Path]:
    """Finished checkpoint chunks under a work dir."""
    return sorted(work.glob("checkpoints/**/chunk-*.npz"))


def map_files(out: Path) -> list[Path]:
    """Every parameter map under an output dir (relative, sorted)."""
    return sorted(p.relative_to(out) for p in out.rglob("*_boldmap.*") if not p.name.endswith(".json"))


def map_bytes(out: Path) -> dict[str, bytes]:
    """The data bytes of every map, by relative path."""
    return {str(p): np.asarray(nib.load(out / p).dataobj).tobytes() for p in map_files(out)}


@pytest.fixture(scope="session")
def t1w_dataset(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small T1w synthetic dataset (one participant, one run, ~820 voxels) under a path with a
    space and non-ASCII characters."""
    root = tmp_path_factory.mktemp("rel") / "données BIDS ü"
    return make_synthetic_dataset(root, SynthConfig(space="T1w", small=True, runs=1, subjects=1))


@pytest.fixture(scope="session")
def reference(t1w_dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two uninterrupted runs of the same command (checkpointed chunks of 128 voxels), run at once."""
    base = tmp_path_factory.mktemp("reference")
    outs = [base / "out A", base / "out-B"]
    procs = [start(t1w_dataset, o, "--work-dir", base / f"work {i}") for i, o in enumerate(outs)]
    for proc, out in zip(procs, outs, strict=True):
        assert proc.wait(timeout=600) == 0, (out.parent / f"{out.name}.stderr").read_text()
    return outs[0], outs[1]
