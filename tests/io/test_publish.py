"""Issue 12, points 4-6: a participant's outputs are replaced as one set, a kill never tears them, the
next run finishes or discards what a killed run left, and a second run of the same participant waits
for nobody: it exits 75 while the first holds the lock."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers import chunked_env
from prfmap.errors import BusyError, ExitCode
from prfmap.io.publish import (
    STAGING_PREFIX,
    new_staging,
    participant_lock,
    publish_participant,
    recover_staging,
)

SUBJECT = "01"
N_FILES = 400
KILLS = 24


def write_set(root: Path, tag: str, tasks=("a",), n: int = N_FILES) -> dict[str, str]:
    """A participant's outputs under ``root``: maps and sidecars per task, figures and the page."""
    files = {}
    for task in tasks:
        for i in range(n // len(tasks)):
            files[f"sub-{SUBJECT}/func/sub-{SUBJECT}_task-{task}_model-gauss_param-p{i}_boldmap.json"] = tag
    files[f"sub-{SUBJECT}/figures/sub-{SUBJECT}_fov.png"] = tag
    files[f"sub-{SUBJECT}.html"] = tag
    for rel, content in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(content)
    return files


def published(out: Path) -> dict[str, str]:
    """The participant's files in ``out`` and their content."""
    folder = out / f"sub-{SUBJECT}"
    found = {str(p.relative_to(out)): p.read_text() for p in folder.rglob("*") if p.is_file()}
    page = out / f"sub-{SUBJECT}.html"
    if page.exists():
        found[page.name] = page.read_text()
    return found


def maps_only(files: dict[str, str]) -> dict[str, str]:
    return {k: v for k, v in files.items() if k.startswith(f"sub-{SUBJECT}/")}


def test_a_rerun_replaces_its_fits_and_keeps_the_others(tmp_path: Path) -> None:
    out = tmp_path / "out"
    old = write_set(out, "old", tasks=("a", "b"), n=6)
    stage = new_staging(out, SUBJECT)
    new = write_set(stage, "new", tasks=("a",), n=2)
    files = publish_participant(
        stage, out, SUBJECT, replaced=lambda rel: "_task-a_" in rel.name or "figures" in rel.parts
    )
    kept = {k: v for k, v in old.items() if "_task-b_" in k}
    assert published(out) == {**kept, **new}
    assert sorted(files) == sorted(out / k for k in {**kept, **new})
    assert not list(out.glob(f"{STAGING_PREFIX}*"))
    stage = new_staging(out, SUBJECT)
    whole = write_set(stage, "whole", tasks=("c",), n=2)
    publish_participant(stage, out, SUBJECT)
    assert published(out) == whole


CHILD = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from prfmap.io.publish import publish_participant
    stage, out, kill_at = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
    calls = 0

    def counted(call):
        def counting(*args, **kwargs):
            global calls
            if calls == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
            calls += 1
            return call(*args, **kwargs)
        return counting

    for name in FILE_SYSTEM_CALLS:
        setattr(os, name, counted(getattr(os, name)))
    publish_participant(stage, out, "01")
    print(calls, flush=True)
""").replace(
    "FILE_SYSTEM_CALLS", repr(("open", "mkdir", "link", "rename", "replace", "unlink", "rmdir", "fsync"))
)
"""A publish that SIGKILLs itself just before its ``kill_at``-th file-system call (none when -1) and
otherwise prints how many it made."""


def run_publish(stage: Path, out: Path, kill_at: int = -1) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, str(stage), str(out), str(kill_at)],
        env=chunked_env(None),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_sigkill_at_every_step_of_publishing_never_tears_the_set(tmp_path: Path) -> None:
    """24 SIGKILLs over the publish step, each just before one of its file-system calls (every one of the
    first 12, which reach past the commit, then 12 spread over the rest): after each, the folder holds
    no maps or one whole set; the next run (recovery) leaves one whole set, the new one if the kill came
    after the commit, and no staging folder."""
    out = tmp_path / "out"
    sets = {"set-0": write_set(out, "set-0")}
    stage = new_staging(out, SUBJECT)
    sets["set-1"] = write_set(stage, "set-1")
    whole = run_publish(stage, out)
    assert whole.returncode == 0 and published(out) == sets["set-1"], whole.stderr
    calls = int(whole.stdout)
    moments = sorted(set(range(12)) | {int(k) for k in np.linspace(12, calls - 1, KILLS - 12)})
    current, outcomes = "set-1", {"old": 0, "new": 0, "none": 0}
    for i, kill_at in enumerate(moments):
        tag = f"set-{i + 2}"
        stage = new_staging(out, SUBJECT)
        sets[tag] = write_set(stage, tag)
        assert run_publish(stage, out, kill_at).returncode == -signal.SIGKILL
        seen = maps_only(published(out))
        if not seen:
            outcomes["none"] += 1
        else:
            assert seen in (maps_only(sets[current]), maps_only(sets[tag])), f"kill {i}: a torn set"
            outcomes["old" if seen == maps_only(sets[current]) else "new"] += 1
        # the staging folder's removal, the last step, deletes the commit mark before the folder
        committed = (stage / "COMMIT").exists() or not stage.exists() or seen == maps_only(sets[tag])
        recover_staging(out)
        assert not list(out.glob(f"{STAGING_PREFIX}*")), f"kill {i}: a staging folder was left"
        current = tag if committed else current
        assert published(out) == sets[current], f"kill {i}: not one whole set after recovery"
    assert outcomes["old"] and outcomes["new"], outcomes  # the kills hit both sides of the commit


def test_a_second_run_of_the_same_participant_is_refused(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with participant_lock(out, SUBJECT):
        with pytest.raises(BusyError) as info, participant_lock(out, SUBJECT):
            pass
        assert info.value.exit_code == ExitCode.BUSY == 75
        assert f"pid {os.getpid()}" in str(info.value) and "sub-01" in str(info.value)
        with participant_lock(out, "02"):
            pass
        stage = new_staging(out, SUBJECT)
        assert recover_staging(out) == []  # a live run's staging folder is left alone
        assert stage.exists()
    assert recover_staging(out) and not stage.exists()
