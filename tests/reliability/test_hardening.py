"""Issue 12 at the command line: outputs others can read, no writes into the raw dataset, a rerun
replaces its outputs as one set, clean errors on full disks and for a second identical run, and a stop
signal honoured within 2 s in every stage."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import (
    chunk_files,
    chunked_env,
    map_files,
    participant_command,
    run_participant,
    start_participant,
    stdout_of,
    wait_for,
)

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0, reason="needs root: another uid, a tmpfs mount")
OTHER_UID = 1234


@pytest.fixture
def shared_dir() -> Iterator[Path]:
    """A folder every uid may enter (pytest's own tmp folders are 0700)."""
    folder = Path(tempfile.mkdtemp(prefix="prfmap-shared-"))
    folder.chmod(0o777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def as_user(uid: int, umask: int):
    def switch() -> None:
        os.setgid(uid)
        os.setuid(uid)
        os.umask(umask)

    return switch


def user_env(home: Path) -> dict[str, str]:
    out = chunked_env(None)
    out.update(
        HOME=str(home),
        MPLCONFIGDIR=str(home / "mpl"),
        KERAS_HOME=str(home / "keras"),
        XDG_CACHE_HOME=str(home / "cache"),
    )
    # an interpreter under a private home (pyenv in /root) gets the system's of the same minor
    # version, with this environment's packages
    out["PYTHONPATH"] = os.pathsep.join([out["PYTHONPATH"], sysconfig.get_paths()["purelib"]])
    return out


def python_for(uid: int) -> str:
    """An interpreter that ``uid`` may run: this one, or the system's of the same version."""
    version = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for exe in (sys.executable, f"/usr/bin/{version}", f"/usr/local/bin/{version}"):
        try:
            if (
                exe
                and subprocess.run(
                    [exe, "-c", "import numpy"],
                    preexec_fn=as_user(uid, 0o022),
                    env=user_env(Path("/tmp")),
                    capture_output=True,
                ).returncode
                == 0
            ):
                return exe
        except PermissionError:
            continue
    pytest.fail(f"no Python interpreter that uid {uid} may run")


@ROOT_ONLY
def test_outputs_honour_the_umask_and_other_users_read_them(t1w_dataset: Path, shared_dir: Path) -> None:
    """Point 1: run as uid 1234 under umask 022, every output (maps, sidecars, report, figures,
    dataset files) is world-readable, and uid 4321 indexes the folder with pybids."""
    bids, out = shared_dir / "bids", shared_dir / "out"
    shutil.copytree(t1w_dataset, bids)
    home = shared_dir / "home"
    home.mkdir()
    home.chmod(0o777)  # mkdir's mode is masked by the umask
    cmd = [
        python_for(OTHER_UID),
        "-m",
        "prfmap.cli.run",
        str(bids),
        str(out),
        "participant",
        "--refine",
        "none",
        "--nprocs",
        "1",
    ]
    proc = subprocess.run(
        cmd,
        env=user_env(home),
        preexec_fn=as_user(OTHER_UID, 0o022),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    outputs = [p for p in out.rglob("*") if ".prfmap-" not in str(p.relative_to(out))]
    kinds = {p.name.split(".", 1)[-1] for p in outputs if p.is_file()}
    assert {"nii.gz", "json", "html", "png", "bidsignore"} <= kinds, kinds
    unreadable = [str(p.relative_to(out)) for p in outputs if not p.stat().st_mode & stat.S_IROTH]
    assert not unreadable, unreadable
    assert all(p.stat().st_uid == OTHER_UID for p in outputs)
    reader = (
        "import sys; from bids import BIDSLayout; from prfmap.derivatives import PYBIDS_CONFIG; "
        "layout = BIDSLayout(sys.argv[1], validate=False, is_derivative=True, "
        "config=['bids', 'derivatives', PYBIDS_CONFIG]); "
        "maps = layout.get(suffix='boldmap', extension='.nii.gz'); "
        "print(len(maps), maps[0].get_metadata()['Model'])"
    )
    read = subprocess.run(
        [python_for(4321), "-c", reader, str(out)],
        env=user_env(home),
        preexec_fn=as_user(4321, 0o022),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert read.returncode == 0, read.stderr
    assert int(read.stdout.split()[0]) >= 8 and read.stdout.split()[1] == "gauss"


@pytest.mark.parametrize("where", ["same via ..", "symlink", "inside raw", "fmriprep", "work inside raw"])
def test_outputs_never_go_into_the_datasets_read(t1w_dataset: Path, tmp_path: Path, where: str) -> None:
    """Point 2: output_dir and --work-dir are resolved before the checks: bids_dir itself (through
    `..` or a symlink), a folder of its raw tree and the derivatives being read are refused (exit 64)
    and nothing is written there."""
    bids = tmp_path / "ds"
    shutil.copytree(t1w_dataset, bids)
    before = sorted(str(p) for p in bids.rglob("*"))
    extra: list[str | Path] = []
    if where == "same via ..":
        out = bids / "sub-01" / ".." / ".." / bids.name
    elif where == "symlink":
        out = tmp_path / "link"
        out.symlink_to(bids, target_is_directory=True)
    elif where == "inside raw":
        out = bids / "sub-01" / "prfmap"
    elif where == "fmriprep":
        out = bids / "derivatives" / "fmriprep"
    else:
        out, extra = tmp_path / "out", ["--work-dir", bids / "sub-01" / "work"]
    proc = run_participant(bids, out, *extra, chunk=None)
    assert proc.returncode == 64, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert "inside" in line or "is bids_dir" in line, line
    assert sorted(str(p) for p in bids.rglob("*")) == before


def test_a_derivatives_subfolder_of_bids_dir_is_allowed(t1w_dataset: Path, tmp_path: Path) -> None:
    bids = tmp_path / "ds"
    shutil.copytree(t1w_dataset, bids)
    proc = run_participant(bids, bids / "derivatives" / "prfmap", "--refine", "none", chunk=None)
    assert proc.returncode == 0, proc.stderr
    assert map_files(bids / "derivatives" / "prfmap")


def test_a_rerun_replaces_the_participants_outputs_as_one_set(t1w_dataset: Path, tmp_path: Path) -> None:
    """Point 4: outputs of the earlier run that the new one does not write are gone, every sidecar
    is the new run's; staging folders a killed run left (committed or not) are finished or removed."""
    out = tmp_path / "out"
    first = run_participant(
        t1w_dataset, out, "--refine", "none", "--save-predictions", "--high-pass-hz", "0.01", chunk=None
    )
    assert first.returncode == 0, first.stderr
    assert list(out.rglob("*prediction_bold.*")) and list(out.rglob("*_desc-preproc_bold.*"))
    junk = out / ".prfmap-staging-sub-01-999999-0badc0de"
    (junk / "sub-01" / "func").mkdir(parents=True)
    (junk / "sub-01" / "func" / "half-written.nii.gz").write_bytes(b"\0" * 10)
    second = run_participant(t1w_dataset, out, "--refine", "none", "--high-pass-hz", "0.02", chunk=None)
    assert second.returncode == 0, second.stderr
    assert not list(out.rglob("*prediction_bold.*")) and not list(out.rglob("*_desc-preproc_bold.*"))
    sidecars = [json.loads(p.read_text()) for p in (out / "sub-01").rglob("*.json")]
    assert sidecars and {s["Preprocessing"]["HighPassHz"] for s in sidecars} == {0.02}
    assert not list(out.glob(".prfmap-staging-*")) and not list(out.rglob("half-written*"))


@pytest.fixture
def tiny_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """A real 600 kB tmpfs: room for the logs, not for a participant's outputs."""
    folder = tmp_path / "full"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@ROOT_ONLY
@pytest.mark.parametrize("full", ["output_dir", "work_dir"])
def test_a_full_disk_is_one_line_naming_the_folder(
    t1w_dataset: Path, tmp_path: Path, tiny_tmpfs: Path, full: str
) -> None:
    """Point 6: no space left → exit 73, the folder named and --work-dir suggested; no traceback."""
    if full == "output_dir":  # room for the logs (48 kB), not for the maps
        out, work = tiny_tmpfs / "out", tmp_path / "work"
        (tiny_tmpfs / "filler").write_bytes(b"\0" * (600 - 48) * 1024)
    else:  # room for nothing much: a chunk's checkpoint does not fit
        out, work = tmp_path / "out", tiny_tmpfs / "work"
        (tiny_tmpfs / "filler").write_bytes(b"\0" * (600 - 16) * 1024)
    proc = run_participant(t1w_dataset, out, "--refine", "none", "--work-dir", work, chunk=None)
    assert proc.returncode == 73, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("prfmap: error: no space left on the device writing ")
    assert str(tiny_tmpfs) in line and "--work-dir" in line
    assert "Traceback" not in proc.stderr


def test_two_identical_runs_started_together(t1w_dataset: Path, tmp_path: Path) -> None:
    """Point 6: one fits the participant, the other exits 75 saying another run holds it."""
    out, work = tmp_path / "out", tmp_path / "work"
    procs = [start_participant(t1w_dataset, out, "--work-dir", work, tag=str(i)) for i in range(2)]
    codes = sorted(p.wait(timeout=600) for p in procs)
    assert codes == [0, 75], codes
    stderr = [(tmp_path / f"out{i}.stderr").read_text() for i in range(2)]
    (line,) = [e for e in stderr if e.strip()][0].strip().splitlines()
    assert "sub-01 is being processed" in line and "another prfmap run (pid " in line
    assert map_files(out) and not list(out.glob(".prfmap-staging-*"))


STAGES = {
    "loading": lambda out, work: "run(s) in 1 fit(s)" in stdout_of(out),
    "fitting": lambda out, work: len(chunk_files(work)) >= 1,
    "report": lambda out, work: "wrote" in stdout_of(out) or "report" in stdout_of(out),
}


@pytest.mark.xdist_group("serial")
@pytest.mark.parametrize("stage", list(STAGES))
def test_sigterm_is_honoured_within_2_s_in_every_stage(t1w_dataset: Path, tmp_path: Path, stage: str) -> None:
    """Point 7: SIGTERM while loading, fitting or writing the report ends the run within 2 s with
    exit 143 and one line; the next run resumes from the saved chunks and finishes."""
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [c for c in participant_command(t1w_dataset, out, "--work-dir", work) if c != "--no-report"]
    log = (out.parent / f"{out.name}.stdout").open("w")
    err_path = out.parent / f"{out.name}.stderr"
    proc = subprocess.Popen(cmd, env=chunked_env(), stdout=log, stderr=err_path.open("w"))
    wait_for(lambda: STAGES[stage](out, work), proc)
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    code = proc.wait(timeout=60)
    elapsed = time.monotonic() - sent
    if code == 0:  # the stage ended before the signal came: nothing to check
        pytest.fail(f"the run finished before SIGTERM reached the {stage} stage")
    assert code == 143 and elapsed < 2.0, (code, elapsed)
    stderr = err_path.read_text()
    assert len(stderr.strip().splitlines()) == 1, f"not one line on stderr:\n{stderr}"
    (line,) = stderr.strip().splitlines()
    assert line.startswith("prfmap: error: stopped by SIGTERM") and "--work-dir" in line
    saved = len(chunk_files(work))
    again = subprocess.run(cmd, env=chunked_env(), capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr
    assert again.stdout.count("reused from checkpoint") == saved
    assert not list(out.glob(".prfmap-staging-*"))


# -- issue 24 -------------------------------------------------------------------------------------


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("prfmap: error: "), proc.stderr[-3000:]
    return lines[0]


@ROOT_ONLY
def test_a_disk_that_fills_while_logging_is_one_line_and_73(
    t1w_dataset: Path, tmp_path: Path, tiny_tmpfs: Path
) -> None:
    """Case 12: the run log fills the disk: exit 73 and one line naming the log file (before: exit 1
    and 1,127 lines of '--- Logging error ---' tracebacks); no staging folder, no maps."""
    out = tiny_tmpfs / "out"
    (tiny_tmpfs / "filler").write_bytes(b"\0" * (600 - 12) * 1024)  # room for 3 pages of logs
    proc = run_participant(t1w_dataset, out, "--refine", "none", "--work-dir", tmp_path / "work", chunk=None)
    assert proc.returncode == 73, proc.stderr[-3000:]
    line = _one_error_line(proc)
    assert line.startswith("prfmap: error: no space left on the device writing ") and ".log" in line
    assert str(out / "logs") in line and "Logging error" not in proc.stderr
    assert not list(out.glob(".prfmap-staging-*")) and not map_files(out)


@pytest.fixture
def read_only_tmpfs(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "ro"
    folder.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=16k", "tmpfs", str(folder)], check=True)
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=True)


@ROOT_ONLY
def test_a_read_only_output_dir_is_73(t1w_dataset: Path, read_only_tmpfs: Path) -> None:
    """Case 15: output_dir on a read-only file system: exit 73 as the README says (before: 64)."""
    proc = run_participant(t1w_dataset, read_only_tmpfs / "out", chunk=None)
    assert proc.returncode == 73, proc.stderr
    line = _one_error_line(proc)
    assert "read-only file system writing " in line and str(read_only_tmpfs) in line and ":ro" in line


def test_an_unwritable_output_dir_is_73(t1w_dataset: Path, shared_dir: Path) -> None:
    """Case 15: a folder this user may not write into (as root: run as another uid): exit 73 naming it."""
    bids, parent = shared_dir / "bids", shared_dir / "locked"
    shutil.copytree(t1w_dataset, bids)
    parent.mkdir()
    parent.chmod(0o555)
    command = [c for c in participant_command(bids, parent / "out") if c != sys.executable]
    if os.geteuid() == 0:
        home = shared_dir / "home"
        home.mkdir()
        home.chmod(0o777)
        proc = subprocess.run(
            [python_for(OTHER_UID), *command],
            env=user_env(home),
            capture_output=True,
            text=True,
            timeout=600,
            preexec_fn=as_user(OTHER_UID, 0o022),
        )
    else:
        proc = subprocess.run(
            [sys.executable, *command], env=chunked_env(None), capture_output=True, text=True, timeout=600
        )
    assert proc.returncode == 73, proc.stderr
    line = _one_error_line(proc)
    assert "permission denied writing " in line and str(parent) in line and "id -u" in line
