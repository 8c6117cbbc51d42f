"""A backend whose package is not installed: exit 64, the pip command to run, nothing written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import only_logs, run_prfmap


@pytest.mark.parametrize(("backend", "package"), [("torch", "torch"), ("tensorflow", "tensorflow")])
def test_backend_not_installed(tmp_path: Path, backend: str, package: str) -> None:
    bids = tmp_path / "bids"
    bids.mkdir()
    (bids / "dataset_description.json").write_text(json.dumps({"Name": "x", "BIDSVersion": "1.9.0"}))
    out = tmp_path / "out"
    proc = run_prfmap(bids, out, "participant", "--backend", backend, hide=(package,), tmp=tmp_path)
    assert proc.returncode == 64, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("prfmap: error: ")
    assert f"pip install {package} (prfmap's [{backend}] extra)" in lines[-1]
    assert only_logs(out)
