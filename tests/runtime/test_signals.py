"""Stop signals where Python cannot raise them, and before or after the command (issue 24, case 13)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from helpers import chunked_env

pytestmark = pytest.mark.xdist_group("serial")  # signals timed against the program's states

IN_A_FINALIZER = """
import gc, logging, os, signal, time
from prfmap.runtime.signals import stop_on_signal

logging.getLogger("prfmap").addHandler(logging.NullHandler())  # as the command line's handlers

class Finalized:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler runs here, inside __del__, where its exception cannot propagate

with stop_on_signal("try again"):
    Finalized()
    gc.collect()
    time.sleep(30)
"""

OUTSIDE_THE_COMMAND = """
import os, signal, sys, time
from prfmap.runtime.signals import ENDED, exit_on_signal

exit_on_signal(ENDED.format(code=0))
os.kill(os.getpid(), signal.{name})
time.sleep(30)
"""

NESTED = """
import os, signal, time
from prfmap.runtime.signals import StopRequested, stop_on_signal

with stop_on_signal("outer"):
    with stop_on_signal("inner"):
        pass
    try:
        with stop_on_signal("inner"):
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)
    except StopRequested as err:
        print(err)
print(signal.getsignal(signal.SIGTERM) is signal.SIG_DFL)
"""


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=chunked_env(None), capture_output=True, text=True, timeout=60
    )


def test_a_stop_raised_inside_a_finalizer_prints_no_exception_ignored() -> None:
    """The stop cannot propagate from ``__del__`` (as from XLA's garbage-collector callback): no
    "Exception ignored" traceback, and the watchdog ends the run with the one line."""
    proc = _python(IN_A_FINALIZER)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "prfmap: error: stopped by SIGINT while running; the chunks saved so far are kept; try again"
    ]


@pytest.mark.parametrize(("name", "code"), [("SIGINT", 130), ("SIGTERM", 143)])
def test_a_signal_outside_the_command_ends_the_process_at_once(name: str, code: int) -> None:
    proc = _python(OUTSIDE_THE_COMMAND.format(name=name))
    assert proc.returncode == code
    assert proc.stderr.strip().splitlines() == [
        f"prfmap: error: stopped by {name} while exiting, after the command had ended with exit code 0"
    ]


def test_a_nested_block_changes_only_the_message() -> None:
    proc = _python(NESTED)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "stopped by SIGTERM while running; the chunks saved so far are kept; inner",
        "True",
    ]


MAIN_THREAD_AND_WATCHDOG = """
import logging, os, signal, sys, time
from prfmap.runtime.signals import ERROR_LINE, StopRequested, stop_on_signal

logging.getLogger("prfmap").addHandler(logging.NullHandler())  # as the command line's handlers

with stop_on_signal("try again", exit_deadline=True):
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    except StopRequested as err:
        if ERROR_LINE.claim():  # as the command line prints its error line
            print(f"prfmap: error: {err}", file=sys.stderr, flush=True)
        time.sleep(30)  # a slow exit: the watchdog ends the process at its deadline
"""


def test_the_main_thread_and_the_watchdog_write_one_line_between_them() -> None:
    """The line the main thread printed is not written again by the watchdog (CI saw two lines)."""
    proc = _python(MAIN_THREAD_AND_WATCHDOG)
    assert proc.returncode == 143, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "prfmap: error: stopped by SIGTERM while running; the chunks saved so far are kept; try again"
    ]


WHILE_LOGGING = """
import io, logging, os, signal, sys, time
from prfmap.io.logs import Console
from prfmap.runtime.signals import StopRequested, stop_on_signal


class Stream(io.StringIO):
    def write(self, text):
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)  # the handler raises here, inside the handler's emit
        return super().write(text)


logging.getLogger("prfmap").addHandler(logging.NullHandler())  # as the command line's handlers
logger = logging.getLogger("prfmap.test")
logger.addHandler({handler}(Stream()))
with stop_on_signal("try again"):
    try:
        logger.warning("a record")
        print("carried on")
    except StopRequested as err:
        print(err)
"""


def test_a_stop_while_a_record_is_written_reaches_the_code_that_logged() -> None:
    """logging's own handlers print a traceback and swallow what ``emit`` raises; prfmap's let it through."""
    proc = _python(WHILE_LOGGING.format(handler="Console"))
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines() == [
        "stopped by SIGINT while running; the chunks saved so far are kept; try again"
    ]
    swallowed = _python(WHILE_LOGGING.format(handler="logging.StreamHandler"))
    assert "--- Logging error ---" in swallowed.stderr and swallowed.stdout.splitlines() == ["carried on"]


REENTRY = """
import io, logging, os, signal, threading, time
from prfmap.io.logs import Console
from prfmap.runtime.signals import StopRequested, stop_on_signal


class Stream(io.StringIO):
    busy = signalled = False

    def write(self, text):
        if self.busy:
            print("re-entered by", threading.current_thread().name)
        self.busy = True
        try:
            if not self.signalled:
                self.signalled = True
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(0.05)  # the handler runs here, inside the write
            return super().write(text)
        finally:
            self.busy = False


stream = Stream()
logging.getLogger("prfmap").addHandler(Console(stream))
logging.getLogger("prfmap").setLevel(logging.INFO)
with stop_on_signal("try again"):
    try:
        logging.getLogger("prfmap.test").warning("a record")
    except StopRequested:
        print("stopped")
    time.sleep(0.5)
print("logged:", "SIGTERM received: stopping now" in stream.getvalue())
"""


def test_the_signal_is_logged_without_writing_into_a_stream_being_written() -> None:
    """The handler used to log itself, into the log file the main thread was flushing: 'reentrant call'
    and a logging traceback on stderr (seen in CI, once in many runs); the watchdog logs it instead."""
    proc = _python(REENTRY)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.splitlines() == ["stopped", "logged: True"]


DEFERRED = """
import os, signal, time
from prfmap.runtime.signals import StopRequested, deferred_stop, stop_on_signal

with stop_on_signal("try again"):
    try:
        with deferred_stop():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            print("not raised inside the block")
    except StopRequested as err:
        print(err)
"""


def test_a_deferred_stop_is_raised_when_its_block_ends() -> None:
    """As while the framework's C++ extensions initialise, where a stop raised inside crashed JAX."""
    proc = _python(DEFERRED)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "not raised inside the block",
        "stopped by SIGTERM while running; the chunks saved so far are kept; try again",
    ]


AT_TEARDOWN = """
import os, signal, sys, time
from prfmap.runtime.signals import end_process


class TornDown:
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)


kept = TornDown()  # a module's global: deleted in the teardown, after Python resets SIGTERM's action
{end}(0)
"""


def test_the_process_ends_before_the_teardown_that_resets_the_stop_signals() -> None:
    """A SIGTERM in Python's teardown of the modules killed the process silently (-15, no line)."""
    assert _python(AT_TEARDOWN.format(end="sys.exit")).returncode == -signal.SIGTERM
    proc = _python(AT_TEARDOWN.format(end="end_process"))
    assert proc.returncode == 0 and proc.stderr == ""


WRAPPED_AND_UNRAISABLE = """
import os, signal, sys, time
from types import SimpleNamespace
from prfmap.runtime.signals import StopRequested, stop_on_signal

try:
    with stop_on_signal("outer"):
        with stop_on_signal("inner"):
            try:
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
            except StopRequested as err:
                raise RuntimeError("a library's own error") from err
except StopRequested as err:
    print("wrapped:", type(err.__cause__).__name__, err)
passed_on = []
sys.unraisablehook = lambda unraisable: passed_on.append(type(unraisable.exc_value).__name__)
with stop_on_signal("again"):
    sys.unraisablehook(SimpleNamespace(exc_value=StopRequested("stopped", 15), object="a finalizer"))
    sys.unraisablehook(SimpleNamespace(exc_value=ValueError("other"), object="a finalizer"))
print("passed on:", passed_on)
"""


def test_a_stop_wrapped_by_a_library_and_one_that_cannot_propagate() -> None:
    """A stop a library wraps in its own error comes out as the stop, with the inner block's message;
    the unraisable-exception hook drops a stop (the watchdog ends the run) and passes on the rest."""
    done = _python(WRAPPED_AND_UNRAISABLE)
    assert done.returncode == 0, done.stderr
    wrapped, passed_on = done.stdout.strip().splitlines()
    assert wrapped.startswith("wrapped: RuntimeError stopped by SIGTERM") and "inner" in wrapped, wrapped
    assert passed_on == "passed on: ['ValueError']", passed_on
