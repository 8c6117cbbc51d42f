"""The participant report shows every fit of the participant on disk, not only the last run's."""

from __future__ import annotations

import re
from pathlib import Path

from prfmap.cli.run import main

FAST = ("--no-cvr2", "--refine", "none", "--hrf", "canonical", "--skip-bids-validation")


def _sections(out: Path) -> list[str]:
    return re.findall(r'<section[^>]* id="(task-[^"]+)"', (out / "sub-01.html").read_text())


def test_a_second_model_joins_the_first_in_the_report(small_synth: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    common = [str(small_synth), str(out), "participant", "--work-dir", str(tmp_path / "work"), *FAST]
    assert main([*common, "--model", "css", "--no-report"]) == 0
    assert main([*common, "--model", "gauss", "--no-report"]) == 0
    assert main([*common, "--model", "css"]) == 0
    # the Gaussian fit of the earlier run first (the catalogue's order), this run's CSS fit once
    assert _sections(out) == ["task-prf_space-fsaverage5_model-gauss", "task-prf_space-fsaverage5_model-css"]
