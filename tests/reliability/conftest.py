"""Fixtures of the reliability tests: a small T1w dataset and two uninterrupted reference runs."""

from __future__ import annotations

from pathlib import Path

import pytest

from helpers import start_participant
from prfmap.synth import SynthConfig, make_synthetic_dataset


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
    procs = [start_participant(t1w_dataset, o, "--work-dir", base / f"work {i}") for i, o in enumerate(outs)]
    for proc, out in zip(procs, outs, strict=True):
        assert proc.wait(timeout=600) == 0, (out.parent / f"{out.name}.stderr").read_text()
    return outs[0], outs[1]


@pytest.fixture(scope="session")
def two_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small T1w dataset: one participant, two runs of the same stimulus."""
    root = tmp_path_factory.mktemp("runs") / "bids"
    return make_synthetic_dataset(root, SynthConfig(space="T1w", small=True, runs=2))
