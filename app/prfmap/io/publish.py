"""A participant's outputs published as one set, a lock per participant, and recovery after a kill.

Every file of participant ``<label>`` lies under ``output_dir/sub-<label>/`` (maps, sidecars, time
series, report figures), except its report page ``output_dir/sub-<label>.html``. A run writes the new
set into a staging folder ``output_dir/.prfmap-staging-sub-<label>-<pid>-<id>/`` and publishes it:

1. the old files the run does not replace (other fits of the participant) are hard-linked into the
   staging folder, so the staged ``sub-<label>/`` is the whole new set;
2. a ``COMMIT`` file is written (atomically): from here on the new set wins, whatever happens;
3. the old ``sub-<label>/`` is renamed into the staging folder and the new one renamed into place
   (two atomic renames: a reader sees the old set, briefly no set, or the new set — never a mix);
4. the report page is moved into place and the staging folder, holding the old set, deleted.

A run killed at any moment leaves a staging folder. The next run that takes the participant's lock
finishes a committed one (steps 3–4) and deletes an uncommitted one: the old set was never touched.
The lock (``output_dir/.prfmap-locks/sub-<label>.lock``, ``flock``) is released by the kernel when
its process dies, so a stale staging folder is one whose participant lock can be taken.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import re
import shutil
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from prfmap.errors import BusyError
from prfmap.io.atomic import write_text_atomic

logger = logging.getLogger(__name__)
STAGING_PREFIX = ".prfmap-staging-"
LOCK_DIR = ".prfmap-locks"
COMMIT = "COMMIT"
_STAGING = re.compile(rf"^{re.escape(STAGING_PREFIX)}sub-([A-Za-z0-9]+)-\d+-[0-9a-f]+$")


@contextlib.contextmanager
def participant_lock(output_dir: Path, subject: str) -> Iterator[Path]:
    """Hold the lock of participant ``subject`` in ``output_dir`` for the block.

    The lock file is deleted on release (and ``.prfmap-locks/`` once empty), so a finished or
    failed run leaves nothing behind; a lock taken on a file that another run deleted meanwhile is
    retried on the current file.

    Parameters
    ----------
    output_dir : Path
        The output folder.
    subject : str
        The participant's label.

    Yields
    ------
    Path
        The lock file.

    Raises
    ------
    BusyError
        Another process holds it (exit 75): an identical run is writing the same participant.
    """
    folder = Path(output_dir) / LOCK_DIR
    path = folder / f"sub-{subject}.lock"
    fd = _acquire(folder, path, subject, output_dir)
    try:
        os.pwrite(
            fd,
            f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{time.strftime('%Y-%m-%d %H:%M:%S')}".encode(),
            0,
        )
        yield path
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        os.close(fd)  # releases the lock
        with contextlib.suppress(OSError):
            folder.rmdir()


def _acquire(folder: Path, path: Path, subject: str, output_dir: Path) -> int:
    while True:
        folder.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
        except FileNotFoundError:  # the folder was removed by a run that just ended
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").strip() or "unknown"
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise
            raise BusyError(
                f"sub-{subject} is being processed into {output_dir} by another prfmap run ({holder}); "
                "wait until it ends, or stop it, and run again"
            ) from None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            os.ftruncate(fd, 0)
            return fd
        os.close(fd)  # locked a file its holder deleted on release: take the current one


def new_staging(output_dir: Path, subject: str) -> Path:
    """Create and return a staging folder for participant ``subject``.

    Parameters
    ----------
    output_dir : Path
        The output folder.
    subject : str
        The participant's label.

    Returns
    -------
    Path
    """
    folder = Path(output_dir) / f"{STAGING_PREFIX}sub-{subject}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    return folder


def publish_participant(
    stage: Path,
    output_dir: Path,
    subject: str,
    replaced: Callable[[Path], bool] = lambda rel: True,
    remove_page: bool = False,
) -> list[Path]:
    """Publish the set staged in ``stage`` as participant ``subject``'s outputs (see the module).

    Parameters
    ----------
    stage : Path
        A folder from :func:`new_staging` holding ``sub-<label>/...`` and optionally
        ``sub-<label>.html``.
    output_dir : Path
        The derivatives folder.
    subject : str
        Participant label.
    replaced : callable
        Called with each old file's path relative to ``output_dir`` that the new set does not hold;
        True removes it with the old set, False keeps it in the new one. Default: the new set
        replaces the participant's outputs whole.
    remove_page : bool
        Delete an earlier ``sub-<label>.html`` when the new set has none.

    Returns
    -------
    list of Path
        The files of the new set, under ``output_dir``.
    """
    stage, output_dir = Path(stage), Path(output_dir)
    name = f"sub-{subject}"
    new, old = stage / name, output_dir / name
    new.mkdir(exist_ok=True)
    if old.is_dir():
        for path in sorted(p for p in old.rglob("*") if p.is_file()):
            rel = path.relative_to(output_dir)
            target = stage / rel
            if target.exists() or replaced(rel):
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(path, target)
            except OSError:
                shutil.copy2(path, target)
    files = sorted(output_dir / p.relative_to(stage) for p in new.rglob("*") if p.is_file())
    if (stage / f"{name}.html").is_file():
        files.append(output_dir / f"{name}.html")
    commit = {"subject": subject, "files": len(files), "remove_page": remove_page}
    write_text_atomic(stage / COMMIT, json.dumps(commit) + "\n")
    _roll_forward(stage, output_dir, subject)
    return files


def _roll_forward(stage: Path, output_dir: Path, subject: str) -> None:
    """Steps 3–4 of a committed publish; each step is skipped when a killed run already did it."""
    name = f"sub-{subject}"
    new, old, parked = stage / name, output_dir / name, stage / f".old-{name}"
    if new.is_dir():
        if old.exists() and not parked.exists():
            os.rename(old, parked)
        os.rename(new, old)
    page = stage / f"{name}.html"
    if page.is_file():
        os.replace(page, output_dir / f"{name}.html")
    elif json.loads((stage / COMMIT).read_text()).get("remove_page"):
        with contextlib.suppress(FileNotFoundError):
            (output_dir / f"{name}.html").unlink()
    shutil.rmtree(stage)


def recover_staging(output_dir: Path, subject: str | None = None) -> list[str]:
    """Finish or discard the staging folders of runs that died (all participants, or one).

    A folder is left alone while its participant's lock is held by a live run. Call it while
    holding ``subject``'s own lock to recover that participant's folders.

    Parameters
    ----------
    output_dir : Path
        The output folder.
    subject : str, optional
        Only this participant's folders.

    Returns
    -------
    list of str
        What was done, one line per folder (for the log).
    """
    done = []
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return done
    for stage in sorted(output_dir.glob(f"{STAGING_PREFIX}*")):
        match = _STAGING.match(stage.name)
        if not match or (subject is not None and match.group(1) != subject):
            continue
        label = match.group(1)
        lock = contextlib.nullcontext() if label == subject else participant_lock(output_dir, label)
        try:
            with lock:
                if not stage.exists():
                    continue
                if (stage / COMMIT).is_file():
                    _roll_forward(stage, output_dir, label)
                    done.append(f"completed the interrupted publication of sub-{label} ({stage.name})")
                else:
                    shutil.rmtree(stage)
                    done.append(f"removed the unfinished outputs of sub-{label} ({stage.name})")
        except BusyError:
            continue
    for line in done:
        logger.info("%s", line)
    return done
