"""The documented SLURM scripts (docs/examples/slurm_array.sh, slurm_group.sh) on a real cluster.

Debian's slurm-wlm and munge (``make test`` installs them as root) run a private one-node cluster
here: munged on its own socket and key, slurmctld and slurmd on free ports, everything under a
temporary folder. The array fits three ``prfmap-synth --small`` participants at once, one task is
stopped mid-fit with ``scancel --signal=TERM`` and requeues itself, the group job waits on
``--dependency=afterok``. Only the scripts' container line changes: it runs the installed prfmap.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import APP_DIR, REPO
from prfmap.engine import catalog
from prfmap.io.bold import read_dscalar
from prfmap.synth import SynthConfig, make_synthetic_dataset

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serial")]  # a cluster of its own
PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
MARK = "# PRFMAP-COMMAND"
"""The end of the line of each script that names prfmap's container."""
SUBJECTS = ("01", "02", "03")
STOPPED = "2"
"""The array task that is stopped mid-fit."""
REQUEUE_WAIT_S = 15
"""How long a requeued job waits before it starts again (SLURM's cred_expire, 120 s by default)."""


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _config(root: Path, host: str) -> str:
    ports = _free_port(), _free_port()
    return f"""ClusterName=prfmaptest
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmctldPort={ports[0]}
SlurmdPort={ports[1]}
AuthType=auth/munge
AuthInfo=socket={root}/munge/socket,cred_expire={REQUEUE_WAIT_S}
CredType=cred/munge
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/slurmctld.log
SlurmdLogFile={root}/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
ReturnToService=2
JobRequeue=1
MinJobAge=3600
GresTypes=gpu
NodeName={host} NodeAddr=127.0.0.1 CPUs=12 RealMemory=65536 Gres=gpu:3 State=UNKNOWN
PartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP
"""


# Three character devices stand in for the GPUs the documented script asks for (--gres=gpu:1):
# without cgroups nothing is bound to them; SLURM only counts them.
GRES = "".join(f"NodeName={{host}} Name=gpu File={dev}\n" for dev in ("/dev/null", "/dev/zero", "/dev/full"))


def _wait(
    condition: Callable[[], bool], what: str, timeout: float, logs: Path | None = None, poll: float = 0.2
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            found = sorted(logs.glob("*.log")) if logs else []
            shown = "".join(f"\n== {p.name}\n{p.read_text()[-1500:]}" for p in found)
            pytest.fail(f"timed out waiting for {what}{shown}")
        time.sleep(poll)


def _prfmap_pid(out: Path, subject: str) -> int | None:
    """The pid of the prfmap process (not srun's, not the batch shell's) fitting ``subject`` into ``out``."""
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if Path(args[0].decode(errors="replace")).name.startswith("python") and {
            str(out).encode(),
            b"--participant-label",
            subject.encode(),
        } <= set(args):
            return int(cmdline.parent.name)
    return None


def _pending(pid: int, signum: int) -> bool:
    """Whether ``signum`` is pending for process ``pid`` (its own or its thread group's)."""
    status = Path(f"/proc/{pid}/status").read_text()
    masks = re.findall(r"^(?:SigPnd|ShdPnd):\s*([0-9a-f]+)$", status, re.MULTILINE)
    return any(int(mask, 16) >> (signum - 1) & 1 for mask in masks)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """The environment (``SLURM_CONF``) of a running one-node cluster, stopped afterwards."""
    if os.geteuid() != 0:
        pytest.skip("munged, slurmctld and slurmd of a private cluster must start as root")
    missing = [p for p in PROGRAMS if shutil.which(p) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} not installed: `make test` installs Debian's slurm-wlm and munge")
    root = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    for folder in ("munge", "state", "spool"):
        (root / folder).mkdir()
    (root / "munge").chmod(0o755)
    key = root / "munge" / "key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o600)
    (root / "slurm.conf").write_text(_config(root, host))
    (root / "gres.conf").write_text(GRES.format(host=host))
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    pids = [root / "munge" / "pid", root / "slurmctld.pid", root / "slurmd.pid"]
    try:
        subprocess.run(
            [
                "munged",
                "--force",
                f"--socket={root}/munge/socket",
                f"--key-file={key}",
                f"--log-file={root}/munged.log",
                f"--pid-file={pids[0]}",
                f"--seed-file={root}/munge/seed",
            ],
            check=True,
            env=env,
        )
        subprocess.run(["slurmctld"], check=True, env=env)
        subprocess.run(["slurmd", "-N", host], check=True, env=env)
        _wait(lambda: _node_state(env) == "idle", "the node to be idle", 60, root)
        yield env
    finally:
        subprocess.run(["scancel", "--full", "--user=root"], env=env, capture_output=True)
        for pid in reversed(pids):  # the daemons this fixture started, by their pid files
            if pid.is_file():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid.read_text().split()[0]), signal.SIGTERM)


def _node_state(env: dict[str, str]) -> str:
    done = subprocess.run(["sinfo", "-h", "-o", "%T"], env=env, capture_output=True, text=True)
    return done.stdout.strip()


def _script(name: str, folder: Path) -> Path:
    """A documented script with its container line running this checkout's prfmap."""
    text = (REPO / "docs" / "examples" / name).read_text()
    lines = [line for line in text.splitlines() if line.rstrip().endswith(MARK)]
    assert len(lines) == 1 and lines[0].startswith("PRFMAP=(apptainer run "), lines
    installed = Path(sys.executable).with_name("prfmap")
    command = f"'{installed}'" if installed.is_file() else f"'{sys.executable}' -m prfmap.cli.run"
    path = folder / name
    path.write_text(text.replace(lines[0], f"PRFMAP=({command})"))
    return path


def _job(env: dict[str, str], job: str) -> dict[str, str]:
    done = subprocess.run(["scontrol", "-o", "show", "job", job], env=env, capture_output=True, text=True)
    return dict(re.findall(r"(\w+)=(\S*)", done.stdout.splitlines()[0])) if done.stdout else {}


def test_array_with_a_requeued_task_then_the_group_level(cluster: dict[str, str], tmp_path: Path) -> None:
    """Every participant is published once and complete, the stopped task resumed from its chunks,
    the group level ran after the array (afterok), and no staging, lock or checkpoint is left."""
    config = SynthConfig(subjects=len(SUBJECTS), runs=1, small=True, space="fsLR")
    bids = make_synthetic_dataset(tmp_path / "bids", config)
    out, work, logs = tmp_path / "out", tmp_path / "work", tmp_path / "logs"
    logs.mkdir()  # sbatch's --output folder must exist
    env = {
        **cluster,
        "BIDS": str(bids),
        "OUT": str(out),
        "WORK": str(work),
        "KERAS_BACKEND": "jax",
        "PRFMAP_CHUNK_UNITS": "64",  # 10 chunks of the 640 grayordinates
        "PYTHONPATH": str(APP_DIR),
        "PRFMAP_OPTIONS": "--no-report",
    }  # fmt: skip  (the reports are tested elsewhere)
    array_script, group_script = _script("slurm_array.sh", tmp_path), _script("slurm_group.sh", tmp_path)

    def sbatch(*args: str) -> str:
        done = subprocess.run(
            ["sbatch", "--parsable", *args], env=env, cwd=tmp_path, capture_output=True, text=True, check=True
        )
        return done.stdout.strip().split(";")[0]

    array = sbatch(f"--array=1-{len(SUBJECTS)}", str(array_script))
    group = sbatch(f"--dependency=afterok:{array}", str(group_script))
    stopped_log = logs / f"prfmap_{array}_{STOPPED}.log"
    checkpoints = work / "checkpoints" / f"sub-{SUBJECTS[int(STOPPED) - 1]}"

    def saved() -> bool:
        return any(checkpoints.glob("**/chunk-*.npz"))

    def ended() -> bool:
        state = _job(env, group)
        return state.get("JobState") == "COMPLETED" or state.get("Reason") == "DependencyNeverSatisfied"

    # scancel's SIGTERM travels through slurmctld and slurmd, while a warm fit saves its chunks in tens
    # of milliseconds: the task is held (SIGSTOP) once its first chunk is saved, scancel's SIGTERM waits
    # for it as a pending signal, and the task resumes (SIGCONT) into it, whatever the machine's speed.
    # Until then the task runs in steps of a few milliseconds between stops, so a test starved of the
    # CPU (a loaded machine) cannot miss the chunks: the task does not run while the test waits.
    found: list[int] = []

    def started() -> bool:
        pid = _prfmap_pid(out, SUBJECTS[int(STOPPED) - 1])
        if pid:
            os.kill(pid, signal.SIGSTOP)
            found.append(pid)
        return bool(found)

    _wait(started, "the stopped task's prfmap process", 300, logs, poll=0.01)
    pid = found[0]

    def stepped_to_a_saved_chunk() -> bool:
        if saved():
            return True
        os.kill(pid, signal.SIGCONT)
        time.sleep(0.005)
        os.kill(pid, signal.SIGSTOP)
        return False

    _wait(stepped_to_a_saved_chunk, "a saved chunk", 600, logs, poll=0.0)
    subprocess.run(["scancel", "--signal=TERM", f"{array}_{STOPPED}"], env=env, check=True)
    _wait(lambda: _pending(pid, signal.SIGTERM), "scancel's SIGTERM to reach the task", 60, logs, poll=0.01)
    os.kill(pid, signal.SIGCONT)
    _wait(ended, "the group job", 600, logs)

    for task in range(1, len(SUBJECTS) + 1):
        info = _job(env, f"{array}_{task}")
        assert info["JobState"] == "COMPLETED" and info["ExitCode"] == "0:0", info
    assert _job(env, f"{array}_{STOPPED}")["Restarts"] == "1"
    assert _job(env, group)["JobState"] == "COMPLETED", (logs / f"prfmap-group_{group}.log").read_text()

    text = stopped_log.read_text()
    assert "stopped by SIGTERM" in text and "requeueing job" in text, text[-3000:]
    reused = [int(n) for n in re.findall(r"chunk\(s\) fitted, (\d+) reused", text)]
    assert reused and reused[-1] >= 1, text[-3000:]  # the requeued run reused the chunks saved before
    task_logs = "".join((logs / f"prfmap_{array}_{t}.log").read_text() for t in range(1, 4))
    labels = {catalog.PARAMETERS[k].label for k in (*catalog.MODELS["gauss"].parameters, *catalog.DERIVED)}
    for subject in SUBJECTS:
        assert task_logs.count(f"sub-{subject}: published ") == 1
        (maps_file,) = (out / f"sub-{subject}" / "func").glob("*_model-gauss_boldmap.dscalar.nii")
        maps, _ = read_dscalar(maps_file)
        assert labels <= set(maps)
    assert "written for 3 participants" in (logs / f"prfmap-group_{group}.log").read_text()
    assert list((out / "group").glob("*_stat-median_desc-sigma_boldmap.*")) and (out / "group.html").is_file()
    assert not list(out.glob(".prfmap-staging-*")) and not (out / ".prfmap-locks").exists()
    assert not list(work.rglob("*.npz"))
