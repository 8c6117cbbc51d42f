"""Errors that the command line turns into BIDS-Apps exit codes and one-line messages."""

from __future__ import annotations

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
