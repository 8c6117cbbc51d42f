"""Atomic file writes: a temporary name in the target folder, then ``os.replace``."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; move it onto ``path`` if the block succeeds.

    The temporary name keeps the full file name as its ending (``.tmp-<id>-<name>``) so that
    writers choosing the format from the extension (nibabel) still do so. On an exception the
    temporary file is removed and ``path`` is left untouched; an ``OSError`` without a file name
    (a full disk seen by gzip or zipfile) gets ``path`` as its file name.

    Parameters
    ----------
    path : path-like
        The final file name. Its folder is created if needed.

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
