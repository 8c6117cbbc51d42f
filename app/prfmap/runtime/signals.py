"""Stop promptly on SIGTERM/SIGINT, in every stage, keeping the checkpoints: exit 143/130 within 2 s.

Everything a run writes is safe to abandon at any moment (checkpoint chunks and outputs are written
atomically, a participant's outputs are published as one set, see :mod:`prfmap.io.publish`), so a stop
signal ends the run where it is: the handler raises :class:`StopRequested` in the main thread, which
unwinds (temporary files removed, the lock released) and prints one line. Python runs the handler
only between bytecodes, so a long compiled computation (a batch of the fit) would delay it; the
signal also reaches a watchdog thread at once (``signal.set_wakeup_fd``, written by the C-level
handler), which ends the process ``GRACE_S`` seconds later if it is still running, with the same
line and exit code. A SLURM job (30 s between SIGTERM and SIGKILL) therefore always stops by itself.

The command line covers the whole process: :func:`exit_on_signal` (installed first by the console
script, before the heavy imports, and again once the command is done) ends it at once with the same
line and exit code, and ``prfmap.cli.run.main`` runs inside :func:`stop_on_signal`; a block nested
in another only changes the stop message. A stop that arrives where Python cannot raise it (a
garbage-collector callback, a ``__del__``) is not printed as "Exception ignored": the watchdog ends the
run ``GRACE_S`` seconds later.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

from prfmap.errors import PrfmapError

logger = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
GRACE_S = 1.5
DEFAULT_RESUME = "run the same command again to resume from the saved chunks"
WHILE_RUNNING = "while running; the chunks saved so far are kept"
STARTING = "while starting; nothing was written; run the same command again"
""":func:`exit_on_signal`'s ``where`` before a command line's command runs."""
ENDED = "while exiting, after the command had ended with exit code {code}"
""":func:`exit_on_signal`'s ``where`` after it returned ``code``."""
_requested: list[int] = []
_state: dict[str, object] = {"resume": DEFAULT_RESUME, "unwound": False, "active": False}


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


def _force_exit(signum: int, message: str, always_say: bool = False) -> None:
    """Leave now, saying why unless the main thread already unwound and the command line printed the line.

    The watchdog calls it when the process is still alive at the deadline, :func:`exit_on_signal`'s
    handler at once.
    """
    for handler in logging.getLogger("prfmap").handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    if always_say or not _state["unwound"]:
        with contextlib.suppress(OSError):
            os.write(2, f"prfmap: error: {message}\n".encode())
    os._exit(128 + signum)


def _stop_message(signum: int) -> str:
    return _message(signum, WHILE_RUNNING, str(_state["resume"]))


def exit_on_signal(where: str) -> None:
    """From now on (outside :func:`stop_on_signal`), SIGTERM/SIGINT end the process at once.

    With one line, ``prfmap: error: stopped by <SIGNAL> <where>``, and exit code 128 + the signal
    number. For a command-line process before its command starts (nothing is written yet) and after
    it ended (everything is written): Python's own handlers would print a ``KeyboardInterrupt``
    traceback or die silently of SIGTERM, and an interrupted import or shutdown of a framework can
    crash the interpreter. Call it again to change ``where``.

    Parameters
    ----------
    where : str
        What the process was doing, e.g. ``"while starting; nothing was written"``.
    """

    def leave(signum: int, frame: FrameType | None) -> None:
        _force_exit(signum, f"stopped by {signal.Signals(signum).name} {where}", always_say=True)

    for s in STOP_SIGNALS:
        signal.signal(s, leave)


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

    Outside the main thread nothing is installed; inside another block only the message changes.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    if _state["active"]:
        with _nested(how_to_resume):
            yield
        return
    previous = {s: signal.signal(s, _handler) for s in STOP_SIGNALS}
    _requested.clear()
    _state.update(resume=how_to_resume, unwound=False, active=True)
    previous_hook = sys.unraisablehook
    sys.unraisablehook = _unraisable(previous_hook)
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
            raise StopRequested(_message(signum, WHILE_RUNNING, str(_state["resume"])), signum) from err
        raise
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        sys.unraisablehook = previous_hook
        if not (_requested and exit_deadline):
            cancelled.set()
            os.close(write_fd)  # the watchdog reads the end of the pipe and returns
            watchdog.join()
            os.close(read_fd)
        _state.update(resume=DEFAULT_RESUME, unwound=True, active=False)
        _requested.clear()
        sys.stderr.flush()


@contextlib.contextmanager
def _nested(how_to_resume: str) -> Iterator[None]:
    """A block inside another: the outer one's handlers stay; the stop message says ``how_to_resume``."""
    outer = _state["resume"]
    _state["resume"] = how_to_resume
    try:
        yield
    except Exception as err:
        if _requested and not isinstance(err, StopRequested):
            raise StopRequested(_message(_requested[0], WHILE_RUNNING, how_to_resume), _requested[0]) from err
        raise
    finally:
        _state["resume"] = outer


def _unraisable(previous: Callable[[Any], object]) -> Callable[[Any], object]:
    """An unraisable-exception hook that drops the stop (the watchdog ends the run) and passes on the rest."""

    def hook(unraisable: Any) -> None:
        if isinstance(unraisable.exc_value, StopRequested | KeyboardInterrupt):
            logger.debug(
                "stop raised where it cannot propagate (%s); the watchdog ends the run", unraisable.object
            )
            return
        previous(unraisable)

    return hook
