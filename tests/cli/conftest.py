"""Fixtures of the command-line tests: a small synthetic dataset, and private copies of it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from helpers import synthesise


@pytest.fixture(scope="session")
def small_synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small fsaverage5 synthetic dataset (one participant, two runs), made once."""
    return synthesise(tmp_path_factory.mktemp("synth") / "bids", small=True)


@pytest.fixture
def bids_copy(small_synth: Path, tmp_path: Path) -> Path:
    """A private copy of :func:`small_synth` that a test may break."""
    dest = tmp_path / "bids"
    shutil.copytree(small_synth, dest)
    return dest
