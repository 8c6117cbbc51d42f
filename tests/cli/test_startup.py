"""``--help`` of every entry point imports none of the heavy libraries the work needs (issue: help in a
second): no backend, no nilearn, no pybids. The times are measured by tests/benchmarks/bench_startup.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import REPO

HEAVY = ("bids", "imageio", "jax", "keras", "matplotlib", "nilearn", "pandas", "tensorflow", "torch")

PROBE = """
import json, sys
from importlib import import_module
try:
    import_module(sys.argv[1]).main([sys.argv[2]])
except SystemExit as done:
    assert done.code in (0, None), done.code
sys.stdout.flush()
print(json.dumps(sorted(m for m in sys.argv[3:] if m in sys.modules)), file=sys.stderr)
"""


@pytest.mark.parametrize(
    ("module", "flag"),
    [
        ("prfmap.cli.run", "--help"),
        ("prfmap.cli.synth", "--help"),
        ("prfmap.cli.stimulus", "--help"),
        ("prfmap_docker.cli", "--launcher-help"),  # its --help is prfmap's own, from the image
    ],
)
def test_help_imports_no_heavy_library(module: str, flag: str) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, module, flag, *HEAVY],
        capture_output=True,
        text=True,
        check=True,
        cwd=REPO,
    )
    assert "usage:" in done.stdout
    assert json.loads(done.stderr.strip().splitlines()[-1]) == []
