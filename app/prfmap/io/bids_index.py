"""The pybids index kept in the work directory and reused while the dataset is unchanged (issue 18).

pybids reads every file name and JSON sidecar of the raw dataset and its derivatives into an SQLite
database, seconds for a small dataset and minutes for a large one, on every call of prfmap. As
fMRIPrep's ``--bids-database-dir`` does, the database is kept (in ``--bids-database-dir``, else
``--work-dir/bids_db``) and the next call over the same dataset loads it instead. "The same" is checked,
not assumed: the index is keyed by every file's path, size and modification time under the roots (one
``os.walk``, far less than indexing) with pybids' version and the query's arguments, so any change
indexes again. Each process works on its own copy, so participants run at once can share a work
directory.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

COMPLETE = "COMPLETE"


def dataset_key(roots: Sequence[Path], options: str = "") -> str:
    """A digest of every file's path, size and mtime under ``roots``, pybids' version and ``options``.

    Parameters
    ----------
    roots : sequence of Path
        The raw dataset (its ``derivatives/`` left out, as pybids does) and the derivatives indexed.
    options : str
        The layout's arguments, as text.

    Returns
    -------
    str
    """
    digest = hashlib.blake2b(f"{version('pybids')}\n{options}\n".encode(), digest_size=16)
    for root in roots:
        root = Path(root)
        digest.update(f"root {root.resolve()}\n".encode())
        for folder, dirs, files in os.walk(root):
            # as pybids: a root's derivatives/ are not part of it (those indexed are roots themselves)
            dirs[:] = sorted(
                d for d in dirs if not d.startswith(".") and not (folder == str(root) and d == "derivatives")
            )
            for name in sorted(files):
                path = os.path.join(folder, name)
                try:
                    st = os.stat(path)
                except OSError:
                    continue
                digest.update(f"{os.path.relpath(path, root)}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def kept_index(folder: Path, key: str) -> Path:
    """Where the index of the dataset with ``key`` is kept in ``folder``.

    Parameters
    ----------
    folder : Path
        ``--bids-database-dir``, or ``--work-dir/bids_db``.
    key : str
        :func:`dataset_key` of the dataset.

    Returns
    -------
    Path
    """
    return Path(folder) / f"index-{key}"


def restore(folder: Path, key: str, database: Path) -> bool:
    """Copy the kept index of ``key`` into ``database`` (a fresh folder).

    Parameters
    ----------
    folder : Path
        Where indexes are kept (:func:`kept_index`).
    key : str
        :func:`dataset_key` of the dataset.
    database : Path
        The folder pybids will open.

    Returns
    -------
    bool
        Whether an index was kept (else pybids indexes the dataset).
    """
    kept = kept_index(folder, key)
    if not (kept / COMPLETE).exists():
        return False
    shutil.rmtree(database, ignore_errors=True)
    shutil.copytree(kept, database, ignore=shutil.ignore_patterns(COMPLETE))
    return True


def keep(folder: Path, key: str, database: Path) -> None:
    """Keep a copy of the freshly built index in ``database`` for the next call.

    Best effort: a full disk or another process keeping the same index at once leaves things as they
    were.

    Parameters
    ----------
    folder : Path
        Where indexes are kept (:func:`kept_index`).
    key : str
        :func:`dataset_key` of the dataset.
    database : Path
        The folder pybids indexed into.
    """
    kept = kept_index(folder, key)
    if (kept / COMPLETE).exists():
        return
    staging = kept.with_name(f"{kept.name}.tmp-{os.getpid()}")
    try:
        shutil.copytree(database, staging, dirs_exist_ok=True)
        (staging / COMPLETE).touch()
        os.replace(staging, kept)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
