"""Atomic file writes: a temporary name in the target folder, then ``os.replace``.

Every file prfmap writes goes through this module (maps, sidecars, reports, figures, checkpoints,
the configuration), so a process killed half-way leaves the previous file or none, never a
truncated one.
"""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(path: str | os.PathLike[str], *, fsync: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` if the block succeeds.

    The temporary name keeps the full file name as its ending (``.tmp-<id>-<name>``) so that
    writers choosing the format from the extension (nibabel) still do so. On an exception the
    temporary file is removed and ``path`` is left untouched; an ``OSError`` without a file name
    (a full disk seen by gzip or zipfile) gets ``path`` as its file name.

    Parameters
    ----------
    path : path-like
        The final file name. Its folder is created if needed.
    fsync : bool
        Flush the temporary file to the disk before the rename (for files a resumed run relies
        on, such as checkpoints).

    Yields
    ------
    pathlib.Path
        The temporary file name to write to.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".tmp-{uuid.uuid4().hex[:12]}-{final.name}")
    try:
        yield tmp
        if fsync:
            with open(tmp, "rb+") as fh:
                os.fsync(fh.fileno())
        os.replace(tmp, final)
    except OSError as err:
        if err.filename is None:  # writers (gzip, zipfile, nibabel) often drop the file name
            raise OSError(err.errno, err.strerror, str(final)) from err
        raise
    finally:
        if tmp.exists():
            tmp.unlink()


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` to ``path`` atomically (UTF-8).

    Parameters
    ----------
    path : path-like
        Destination file.
    text : str
        Content.

    Returns
    -------
    pathlib.Path
        The written path.
    """
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json_atomic(path: str | os.PathLike[str], content: Mapping[str, Any]) -> Path:
    """Write ``content`` as indented JSON, atomically (see :func:`jsonable` for the conversions).

    Parameters
    ----------
    path : path-like
        Destination file.
    content : mapping
        What to write.

    Returns
    -------
    pathlib.Path
        The written path.
    """
    text = json.dumps(jsonable(content), indent=2, sort_keys=False) + "\n"
    return write_text_atomic(path, text)


def write_if_absent(path: str | os.PathLike[str], text: str) -> bool:
    """Create ``path`` with ``text`` unless it exists; safe when several processes race.

    The content is written to a temporary file and hard-linked into place, so the file appears
    complete or not at all and only the first process's version survives.

    Parameters
    ----------
    path : path-like
        The file.
    text : str
        Its content.

    Returns
    -------
    bool
        True when this call created the file.
    """
    path = Path(path)
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex[:12]}-{path.name}")
    try:
        tmp.write_text(text, encoding="utf-8")
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:  # a file system without hard links
            if path.exists():
                return False
            os.replace(tmp, path)
        return True
    finally:
        with suppress(FileNotFoundError):
            tmp.unlink()


def jsonable(value: Any) -> Any:
    """``value`` with NumPy scalars, paths, tuples and sets turned into JSON types.

    Anything else that JSON does not know, such as a NumPy array of several values, becomes its string.

    Parameters
    ----------
    value : object
        Anything a sidecar holds.

    Returns
    -------
    object
        Dicts, lists, strings, numbers, booleans or None.
    """
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except (ValueError, TypeError):
            return str(value)
    if isinstance(value, float | int | str | bool) or value is None:
        return value
    return str(value)
