"""Killed runs resume from their checkpoints to the same maps; repeated runs give the same bytes."""

from __future__ import annotations

import re
import signal
from pathlib import Path

import pytest

from helpers import chunk_files, map_bytes, map_files, run_participant, start_participant, wait_for

N_CHUNKS = 7  # 824 voxels in chunks of 128


def test_same_inputs_give_identical_maps(reference: tuple[Path, Path]) -> None:
    first, second = map_bytes(reference[0]), map_bytes(reference[1])
    assert (
        len(first) == 10 + 8 and first.keys() == second.keys()
    )  # 10 maps (hrfdelay: --delay-prior), 8 statistics
    assert all(first[k] == second[k] for k in first), "maps differ between identical runs"


def test_sigkill_then_restart_redoes_only_unfinished_chunks(
    t1w_dataset: Path, reference: tuple[Path, Path], tmp_path: Path
) -> None:
    out, work = tmp_path / "out", tmp_path / "wörk dir"
    proc = start_participant(t1w_dataset, out, "--work-dir", work)
    wait_for(lambda: len(chunk_files(work)) >= 1, proc)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    done = len(chunk_files(work))
    assert 1 <= done < N_CHUNKS
    assert map_files(out) == []

    again = run_participant(t1w_dataset, out, "--work-dir", work)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("reused from checkpoint") == done
    assert again.stdout.count("fitted in") == N_CHUNKS - done
    assert f"{N_CHUNKS - done} chunk(s) fitted, {done} reused" in again.stdout
    expected = map_bytes(reference[0])
    assert map_bytes(out) == expected
    assert chunk_files(work) == [], "checkpoints are removed once the participant is written"


def test_changed_argument_ignores_old_checkpoints(t1w_dataset: Path, tmp_path: Path) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    proc = start_participant(t1w_dataset, out, "--work-dir", work, "--refine", "none")
    wait_for(lambda: len(chunk_files(work)) >= 1, proc)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)
    assert chunk_files(work)
    changed = run_participant(
        t1w_dataset, out, "--work-dir", work, "--refine", "none", "--high-pass-hz", "0.02"
    )
    assert changed.returncode == 0, changed.stderr
    assert "reused from checkpoint" not in changed.stdout
    assert f"{N_CHUNKS} chunk(s) fitted, 0 reused" in changed.stdout


@pytest.mark.xdist_group("serial")
@pytest.mark.parametrize(("signum", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_signal_stops_at_once_and_says_how_to_resume(
    t1w_dataset: Path, reference: tuple[Path, Path], tmp_path: Path, signum: int, code: int
) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    proc = start_participant(t1w_dataset, out, "--work-dir", work)
    wait_for(lambda: len(chunk_files(work)) >= 1, proc)
    proc.send_signal(signum)
    assert proc.wait(timeout=120) == code
    stderr = (tmp_path / "out.stderr").read_text()
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in stderr, stderr
    name = signal.Signals(signum).name
    # Both outcomes are the design: a signal that lands while a chunk is being saved is deferred until
    # it is on disk, then reported after that chunk; one that lands later stops the running chunk.
    assert f"stopped by {name} while running; the chunks saved so far are kept" in lines[0] or re.search(
        rf"stopped by {name} after chunk \d+ of {N_CHUNKS} of .*\(saved in ", lines[0]
    ), lines[0]
    assert "run the same command again with the same --work-dir to resume" in lines[0]
    assert map_files(out) == []
    assert not list(out.glob(".prfmap-staging-*"))
    stopped_at = len(chunk_files(work))
    assert 1 <= stopped_at < N_CHUNKS
    if signum == signal.SIGTERM:
        again = run_participant(t1w_dataset, out, "--work-dir", work)
        assert again.returncode == 0, again.stderr
        assert again.stdout.count("reused from checkpoint") == stopped_at
        assert map_bytes(out) == map_bytes(reference[0])
