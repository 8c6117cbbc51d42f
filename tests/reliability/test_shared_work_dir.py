"""Issue 24, case 1 (Must show 2): a finished run removes only the checkpoints of its own fits; an
interrupted run sharing the work dir keeps its saved chunks and resumes from them."""

from __future__ import annotations

import signal
from pathlib import Path

from helpers import chunk_files, map_files, run_participant, start_participant, wait_for

N_CHUNKS = 7  # 824 voxels in chunks of 128


def test_a_finished_run_leaves_other_fits_checkpoints(t1w_dataset: Path, tmp_path: Path) -> None:
    work = tmp_path / "shared work"
    other = ("--refine", "none", "--high-pass-hz", "0.02")  # the same fit's folder, another key
    killed = start_participant(t1w_dataset, tmp_path / "out A", "--work-dir", work, *other)
    wait_for(lambda: len(chunk_files(work)) >= 1, killed)
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(timeout=60) == -signal.SIGKILL
    saved = chunk_files(work)
    assert 1 <= len(saved) < N_CHUNKS
    mine = work / "checkpoints" / "sub-01" / "notes.txt"
    mine.write_text("a file a user put there\n")

    finished = run_participant(t1w_dataset, tmp_path / "out B", "--work-dir", work, "--refine", "none")
    assert finished.returncode == 0, finished.stderr
    assert f"{N_CHUNKS} chunk(s) fitted, 0 reused" in finished.stdout
    assert chunk_files(work) == saved, "the finished run removed checkpoints it did not own"
    assert mine.read_text() == "a file a user put there\n"
    assert "kept 1 checkpoint folder(s) of other fits or arguments" in finished.stdout
    assert map_files(tmp_path / "out B")

    resumed = run_participant(t1w_dataset, tmp_path / "out A", "--work-dir", work, *other)
    assert resumed.returncode == 0, resumed.stderr
    assert resumed.stdout.count("reused from checkpoint") == len(saved)
    assert chunk_files(work) == [] and mine.exists()
    assert sorted(p.name for p in (work / "checkpoints").rglob("*")) == ["notes.txt", "sub-01"]
