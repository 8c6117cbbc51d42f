"""Several participants fitted at once into one output_dir (a SLURM array) share it correctly."""

from __future__ import annotations

import json
import re
from pathlib import Path

from helpers import map_files, start_participant
from prfmap.derivatives import BIDSIGNORE_LINES
from prfmap.synth import SynthConfig, make_synthetic_dataset

SUBJECTS = ("01", "02", "03")


def test_participants_in_parallel_share_one_output_dir(tmp_path: Path) -> None:
    bids = make_synthetic_dataset(
        tmp_path / "bids", SynthConfig(space="T1w", small=True, runs=1, subjects=len(SUBJECTS))
    )
    out, work = tmp_path / "out", tmp_path / "shared work"
    procs = [
        start_participant(
            bids,
            out,
            "--participant-label",
            s,
            "--refine",
            "none",
            "--work-dir",
            work,
            chunk=None,
            tag=f"-{s}",
        )
        for s in SUBJECTS
    ]
    codes = [p.wait(timeout=600) for p in procs]
    assert codes == [0, 0, 0], [(tmp_path / f"out-{s}.stderr").read_text() for s in SUBJECTS]

    description = json.loads((out / "dataset_description.json").read_text())
    assert description["DatasetType"] == "derivative"
    assert description["GeneratedBy"][0]["Name"] == "prfmap"
    assert (out / ".bidsignore").read_text().splitlines() == list(BIDSIGNORE_LINES)
    maps = [str(p) for p in map_files(out)]
    for s in SUBJECTS:
        mine = [m for m in maps if m.startswith(f"sub-{s}/func/sub-{s}_")]
        assert len(mine) == 9 + 8, maps  # 8 parameter maps and the status; 8 maps of their statistics
        sidecars = [re.sub(r"_stat-[a-zA-Z0-9]+", "", Path(m).name.split(".")[0]) + ".json" for m in mine]
        assert all((out / m).with_name(name).is_file() for m, name in zip(mine, sidecars, strict=True))
    leftovers = [p.name for p in out.rglob("*") if p.name.startswith((".tmp", ".prfmap-"))]
    assert leftovers == []
    assert sorted(p.name for p in (out / "logs").glob("sub-*.log"))[0].startswith("sub-01_")
