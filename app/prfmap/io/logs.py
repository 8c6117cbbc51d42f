"""Log files that fail as prfmap's other outputs do: one :class:`~prfmap.errors.OutputError`.

:class:`logging.FileHandler` prints a ``--- Logging error ---`` traceback on stderr for every record
it cannot write (a full disk, a quota, a folder made read-only) and carries on. A run's log is one
of its outputs: the first record the disk refuses closes the file and raises an ``OutputError``
(exit 73, one line naming the file) in the main thread, as a stop signal would; the records of
other threads are dropped. Later records are not written, so the error is raised once.

A prfmap error raised while a record is written (a stop signal's, raised between two bytecodes of
``emit``) is no logging error: every handler here lets it through to the code that logged, where
:class:`logging.Handler` would print a traceback and swallow it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading

from prfmap.errors import OutputError, PrfmapError, output_error

LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s: %(message)s"
"""The format of every prfmap log line (the run log, the participant logs, the console)."""


class PassesStops(logging.Handler):
    """A handler that lets a :class:`~prfmap.errors.PrfmapError` raised during ``emit`` through."""

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        """Re-raise a prfmap error (a stop signal's), report the rest as logging does.

        Parameters
        ----------
        record : logging.LogRecord
            The record that could not be written.
        """
        if isinstance(sys.exc_info()[1], PrfmapError):
            raise  # handleError runs inside emit's except block: the stop itself
        super().handleError(record)


class Console(PassesStops, logging.StreamHandler):
    """The console's handler: a :class:`logging.StreamHandler` that lets stop signals through."""


class Forward(logging.Handler):
    """Hand a library's records to another logger's handlers (prfmap's console and log files).

    nibabel reports the header problems it repairs (``pixdim[1,2,3] should be non-zero``) through
    its ``nibabel.global`` logger, whose own handler prints on stderr; forwarded, they reach the
    log as warnings, and stderr keeps only prfmap's one error line.
    """

    def __init__(self, target: logging.Logger, highest: int = logging.WARNING) -> None:
        super().__init__()
        self.target, self.highest = target, highest

    def emit(self, record: logging.LogRecord) -> None:
        """Pass the record on, at most at level ``highest``.

        Parameters
        ----------
        record : logging.LogRecord
            The library's record.
        """
        if record.levelno > self.highest:
            record.levelno, record.levelname = self.highest, logging.getLevelName(self.highest)
        self.target.handle(record)


class LogFile(PassesStops, logging.FileHandler):
    """A log file (UTF-8, every level, :data:`LOG_FORMAT`) whose write errors are output errors.

    Parameters
    ----------
    path : path-like
        The file, created (or appended to).
    name : str, optional
        The handler's name (``logging.Handler.set_name``).

    Attributes
    ----------
    failure : OutputError or None
        Why the file stopped taking records, once it did.
    """

    def __init__(self, path: str | os.PathLike, name: str | None = None) -> None:
        super().__init__(path, encoding="utf-8")
        self.setLevel(logging.DEBUG)
        self.setFormatter(logging.Formatter(LOG_FORMAT))
        if name is not None:
            self.set_name(name)
        self.failure: OutputError | None = None

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record, unless an earlier one failed.

        Parameters
        ----------
        record : logging.LogRecord
            The record to write.
        """
        if self.failure is None:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 - logging's name
        """A disk or permission error stops the file and, in the main thread, the run.

        Parameters
        ----------
        record : logging.LogRecord
            The record that could not be written.

        Raises
        ------
        OutputError
            In the main thread, for the first record a full disk or a permission refused.
        """
        err = sys.exc_info()[1]
        if not isinstance(err, OSError) or not self._fail(err):  # a stop, or logging's own error
            super().handleError(record)
            return
        if threading.current_thread() is threading.main_thread():
            raise self.failure from None

    def close(self) -> None:
        """Close the file; records it could not flush any more make it fail, quietly."""
        try:
            super().close()
        except OSError as err:
            self._fail(err)

    def _fail(self, err: OSError) -> bool:
        """Record ``err`` as the failure and drop the stream; False when it is no output error."""
        if err.filename is None:
            err.filename = self.baseFilename
        mapped = output_error(err)
        if mapped is None:
            return False
        if self.failure is None:
            self.failure = mapped
        stream, self.stream = self.stream, None
        if stream is not None:
            with contextlib.suppress(OSError, ValueError):
                stream.close()  # its buffer cannot be flushed; the descriptor is closed all the same
        return True
