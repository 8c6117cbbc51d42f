"""Stop promptly on SIGTERM/SIGINT, in every stage, keeping the checkpoints: exit 143/130 within 2 s.

Everything a run writes is safe to abandon at any moment (checkpoint chunks and outputs are written
atomically, a participant's outputs are published as one set, see :mod:`prfmap.io.publish`), so a stop
signal ends the run where it is: the handler raises :class:`StopRequested` in the main thread, which
unwinds (temporary files removed, the lock released) and prints one line. Python runs the handler
only between bytecodes, so a long compiled computation (a batch of the fit) would delay it; the
signal also reaches a watchdog thread at once (``signal.set_wakeup_fd``, written by the C-level
handler), which ends the process ``GRACE_S`` seconds later if it is still running, with the same
line and exit code. A SLURM job (30 s between SIGTERM and SIGKILL) therefore always stops by itself.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from types import FrameType

from prfmap.errors import PrfmapError

logger = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_S = 1.5
DEFAULT_RESUME = "run the same command again to resume from the saved chunks"
_requested: list[int] = []
_state: dict[str, object] = {"resume": DEFAULT_RESUME, "unwound": False}


class StopRequested(PrfmapError):
    """The run was asked to stop by a signal; exit code 128 + the signal number (143, 130)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message, exit_code=128 + signum)  # type: ignore[arg-type]
        self.signum = signum


def stop_requested() -> int | None:
    """The number of the first stop signal received, or None."""
    return _requested[0] if _requested else None


def check_stop(where: str, how_to_resume: str) -> None:
    """Raise :class:`StopRequested` if a stop signal arrived (for code that runs without the handler).

    Parameters
    ----------
    where : str
        What was finished last, e.g. ``"after chunk 3 of 10 of task-prf_space-T1w"``.
    how_to_resume : str
        The sentence telling the user how to continue.
    """
    signum = stop_requested()
    if signum is not None:
        raise StopRequested(_message(signum, where, how_to_resume), signum)


def _message(signum: int, where: str, how_to_resume: str) -> str:
    return f"stopped by {signal.Signals(signum).name} {where}; {how_to_resume}"


def _force_exit(signum: int, message: str) -> None:
    """The watchdog: the process is still alive at the deadline.

    Leave now (saying why, unless the main thread already unwound and the command line printed the line).
    """
    for handler in logging.getLogger("prfmap").handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    if not _state["unwound"]:
        with contextlib.suppress(OSError):
            os.write(2, f"prfmap: error: {message}\n".encode())
    os._exit(128 + signum)


def _stop_message(signum: int) -> str:
    return _message(signum, "while running; the chunks saved so far are kept", str(_state["resume"]))


def _handler(signum: int, frame: FrameType | None) -> None:
    if not _requested:
        logger.warning("%s received: stopping now", signal.Signals(signum).name)
    _requested.append(signum)
    raise StopRequested(_stop_message(signum), signum)


def _watch(read_fd: int, cancelled: threading.Event) -> None:
    """Wait for a stop signal's byte on the wake-up pipe, then give the run ``GRACE_S`` to end."""
    while True:
        try:
            data = os.read(read_fd, 64)
        except OSError:
            return
        if not data:
            return
        stops = [b for b in data if b in {int(s) for s in STOP_SIGNALS}]
        if stops:
            if not cancelled.wait(GRACE_S):
                _force_exit(stops[0], _stop_message(stops[0]))
            return


@contextlib.contextmanager
def stop_on_signal(how_to_resume: str = DEFAULT_RESUME, exit_deadline: bool = False) -> Iterator[None]:
    """Within the block, SIGTERM/SIGINT raise :class:`StopRequested` at once.

    They end the process ``GRACE_S`` seconds later if it has not unwound by then.

    Parameters
    ----------
    how_to_resume : str
        The sentence of the stop message telling the user how to continue.
    exit_deadline : bool
        Keep the watchdog running after the block: the process ends ``GRACE_S`` after the signal
        even if unwinding and the interpreter's shutdown (joining the frameworks' threads) take
        longer. For the command line; a caller that goes on after the stop must leave it off.

    Outside the main thread nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in STOP_SIGNALS}
    _requested.clear()
    _state.update(resume=how_to_resume, unwound=False)
    read_fd, write_fd = os.pipe()
    os.set_blocking(write_fd, False)
    previous_fd = signal.set_wakeup_fd(write_fd, warn_on_full_buffer=False)
    cancelled = threading.Event()
    watchdog = threading.Thread(
        target=_watch, args=(read_fd, cancelled), name="prfmap-stop-watchdog", daemon=True
    )
    watchdog.start()
    try:
        yield
    except Exception as err:
        if _requested and not isinstance(err, StopRequested):  # wrapped by a library on its way up
            signum = _requested[0]
            message = _message(signum, "while running; the chunks saved so far are kept", how_to_resume)
            raise StopRequested(message, signum) from err
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        if not (_requested and exit_deadline):
            cancelled.set()
            os.close(write_fd)  # the watchdog reads the end of the pipe and returns
            watchdog.join()
            os.close(read_fd)
        _state.update(resume=DEFAULT_RESUME, unwound=True)
        _requested.clear()
        sys.stderr.flush()
