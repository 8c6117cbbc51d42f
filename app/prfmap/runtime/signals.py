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

The main thread, unwinding, and the watchdog, at its deadline, may both want to write the stop's line;
:data:`ERROR_LINE` lets exactly one of them write it. The process ends with :func:`end_process`, not
through Python's finalisation, which gives SIGTERM and SIGINT back their default action before it tears
the frameworks down: a signal in those tenths of a second killed the process with no line at all.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, NoReturn

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
ENDING = "while exiting, after the command had ended"
""":func:`exit_on_signal`'s ``where`` from the end of a command line's :func:`stop_on_signal` block."""
_requested: list[int] = []
_state: dict[str, object] = {"resume": DEFAULT_RESUME, "active": False, "where": STARTING, "deferred": False}


class ErrorLine:
    """The command's one error line on stderr: claimed by exactly one thread, whichever comes first."""

    def __init__(self) -> None:
        self._written = threading.Lock()

    def claim(self) -> bool:
        """True for the first caller since :meth:`reset` (who then writes the line), False after."""
        return self._written.acquire(blocking=False)

    def reset(self) -> None:
        """A new command: its error line is not written yet."""
        if self._written.locked():
            self._written.release()


ERROR_LINE = ErrorLine()
"""Claimed by the command line when it prints its error line and by the watchdog before it writes one."""


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


def _force_exit(signum: int, message: str, always_say: bool = False) -> NoReturn:
    """Leave now, saying why unless the command line already printed its error line.

    The watchdog calls it when the process is still alive at the deadline, :func:`exit_on_signal`'s
    handler at once (``always_say``: outside a command, whatever it printed).
    """
    for handler in logging.getLogger("prfmap").handlers:
        with contextlib.suppress(Exception):
            handler.flush()
    if ERROR_LINE.claim() or always_say:
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
    _state["where"] = where
    for s in STOP_SIGNALS:
        signal.signal(s, _leave)


def _leave(signum: int, frame: FrameType | None) -> None:
    """:func:`exit_on_signal`'s handler."""
    _force_exit(signum, f"stopped by {signal.Signals(signum).name} {_state['where']}", always_say=True)


def end_process(code: int) -> NoReturn:
    """End a command-line process with exit code ``code``, stop signals answered to its last instant.

    What Python's finalisation would do that matters runs here, with :func:`exit_on_signal`'s handler in
    place: the ``atexit`` functions (logging's flush, the frameworks' clean-up) and the flush of the
    standard streams. The rest of the finalisation (tearing down the modules, a few tenths of a second
    with JAX loaded) runs with SIGTERM's default action, so the process leaves without it.

    Parameters
    ----------
    code : int
        The command's exit code.
    """
    exit_on_signal(ENDED.format(code=code))
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _handler(signum: int, frame: FrameType | None) -> None:
    # No logging here: the signal can arrive while the main thread writes a log file, and a write
    # into the same buffered stream from the handler fails ("reentrant call"); the watchdog logs it.
    _requested.append(signum)
    if not _state["deferred"]:
        raise StopRequested(_stop_message(signum), signum)


@contextlib.contextmanager
def deferred_stop() -> Iterator[None]:
    """Within the block a stop signal is noted, not raised; it is raised when the block ends.

    For the import of a framework: an exception raised while a C++ extension initialises (jaxlib's
    nanobind modules) aborts the interpreter (SIGABRT or SIGSEGV) instead of unwinding. The watchdog
    still ends the process ``GRACE_S`` seconds after the signal if the block lasts longer. Outside
    :func:`stop_on_signal` it changes nothing.
    """
    outer = _state["deferred"]
    _state["deferred"] = True
    try:
        yield
    finally:
        _state["deferred"] = outer
    if _requested and not outer:
        raise StopRequested(_stop_message(_requested[0]), _requested[0])


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
            logger.warning("%s received: stopping now", signal.Signals(stops[0]).name)
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
        longer; and a stop that something inside caught and carried on from is raised when the block
        ends. For the command line; a caller that goes on after the stop must leave it off.

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
    _state.update(resume=how_to_resume, active=True)
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
        if _requested and exit_deadline:  # a library caught it on its way up and carried on
            raise StopRequested(_stop_message(_requested[0]), _requested[0])
    except Exception as err:
        if _requested and not isinstance(err, StopRequested):  # wrapped by a library on its way up
            raise StopRequested(_stop_message(_requested[0]), _requested[0]) from err
        raise
    finally:
        if exit_deadline:  # a command line's command has ended: a signal from here on says so
            _state["where"] = ENDING
        for s, handler in previous.items():
            signal.signal(s, handler)
        signal.set_wakeup_fd(previous_fd)
        sys.unraisablehook = previous_hook
        if not (_requested and exit_deadline):
            cancelled.set()
            os.close(write_fd)  # the watchdog reads the end of the pipe and returns
            watchdog.join()
            os.close(read_fd)
        _state.update(resume=DEFAULT_RESUME, active=False)
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
