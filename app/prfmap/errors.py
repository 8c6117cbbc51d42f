"""Errors that the command line turns into BIDS-Apps exit codes and one-line messages."""

from __future__ import annotations

import errno
import os
from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of the BIDS Apps 2.0 specification."""

    OK = 0
    UNEXPECTED = 1
    NOT_BIDS = 16
    UNKNOWN_LEVEL = 17
    NO_FILES_SELECTED = 18
    USAGE = 64
    BAD_DATA = 65
    MISSING_INPUT = 66
    CANNOT_WRITE = 73
    BUSY = 75


class PrfmapError(Exception):
    """An error the user can act on; ``str(err)`` is the one line printed to stderr."""

    exit_code: ExitCode = ExitCode.UNEXPECTED

    def __init__(self, message: str, exit_code: ExitCode | None = None) -> None:
        super().__init__(message)
        if exit_code is not None:
            self.exit_code = exit_code


class NotBIDSError(PrfmapError):
    """The input directory is not a BIDS dataset."""

    exit_code = ExitCode.NOT_BIDS


class NoFilesSelectedError(PrfmapError):
    """The filters (participants, sessions, tasks, runs, space) selected no files."""

    exit_code = ExitCode.NO_FILES_SELECTED


class UsageError(PrfmapError):
    """A command-line option is wrong or a backend is not installed."""

    exit_code = ExitCode.USAGE


class BadDataError(PrfmapError):
    """An input file exists but its content is unusable."""

    exit_code = ExitCode.BAD_DATA


class MissingInputError(PrfmapError):
    """A file the inputs refer to does not exist."""

    exit_code = ExitCode.MISSING_INPUT


def one_line(message: BaseException | str) -> str:
    """A message (or an exception's) on one line, as every user-facing error is printed."""
    return " ".join(str(message).split())


def why_missing(path: str | os.PathLike, folder: bool = False) -> str:
    """Why ``path`` is not the file (or, with ``folder``, the folder) a message expected there.

    Returns ``"does not exist"``, ``"is a folder, not a file"``, ``"is a file, not a folder"`` or
    ``"is not a regular file"`` (a device or a pipe), so that no message calls a folder missing.
    """
    if not os.path.exists(path):
        return "does not exist"
    if folder:
        return "is a file, not a folder" if not os.path.isdir(path) else "is a folder"
    if os.path.isdir(path):
        return "is a folder, not a file"
    return "is not a regular file" if not os.path.isfile(path) else "is a file"


class OutputError(PrfmapError):
    """An output or work file cannot be written: no space left, no permission, a read-only folder."""

    exit_code = ExitCode.CANNOT_WRITE


class BusyError(PrfmapError):
    """Another prfmap run is processing the same participant into the same folder."""

    exit_code = ExitCode.BUSY


_WRITE_ERRNOS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
}


def output_error(err: OSError) -> OutputError | None:
    """The one-line :class:`OutputError` for a full disk or a permission problem, else None.

    The message names the file and its folder (when the OS gave one) and what to do.
    """
    what = _WRITE_ERRNOS.get(err.errno or 0)
    if what is None:
        return None
    path = err.filename
    where = f" writing {path} (in {os.path.dirname(os.fspath(path)) or '.'})" if path else ""
    if err.errno in (errno.ENOSPC, errno.EDQUOT):
        hint = (
            "free space there, or give --work-dir a folder on a disk with room for the "
            "checkpoints (and output_dir one for the maps and reports)"
        )
    elif err.errno == errno.EROFS:
        hint = "give a folder on a writable disk (in a container, bind it without :ro)"
    else:
        hint = (
            "make sure this user may write there (in a container, run it as yourself: "
            'docker run -u "$(id -u):$(id -g)")'
        )
    return OutputError(f"{what}{where}; {hint}")
