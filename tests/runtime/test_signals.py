"""Stop signals where Python cannot raise them, and before or after the command (issue 24, case 13)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import chunked_env

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
