"""Issue 24, case 13: SIGINT or SIGTERM at any moment of a run's first seconds (importing, parsing,
validating, loading the framework, loading the data, fitting) ends it with 130/143 and exactly one line
on stderr: no traceback, no crash of the interpreter, never ignored.

Each signal is sent when the run has reached a state it reports (its signal handler installed, a line
of its log, a saved chunk), never after a fixed sleep, so the moments are the same on a fast and on a
loaded machine.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import catches_stop_signals, chunk_files, chunked_env, map_files, stdout_of, wait_for

pytestmark = pytest.mark.xdist_group("serial")  # signals timed against the program's states


def _logged(text: str) -> Callable[[subprocess.Popen, Path, Path], bool]:
    return lambda proc, out, work: text in stdout_of(out)


STATES: dict[str, Callable[[subprocess.Popen, Path, Path], bool]] = {
    # the console script's first statement ran; the command line's modules are being imported
    "importing the command line": lambda proc, out, work: catches_stop_signals(proc.pid),
    # the configuration is built; the BIDS validator and the framework's import run side by side
    "validating": _logged("prfmap.cli.run INFO: prfmap "),
    "importing the framework": _logged("passes the BIDS validator"),
    "loading the data": _logged("run(s) in 1 fit(s)"),
    "estimating the HRF": _logged("HRF grid"),
    "fitting": lambda proc, out, work: len(chunk_files(work)) >= 1,
}
CASES = [
    (signal.SIGINT, "importing the command line"),
    (signal.SIGTERM, "importing the command line"),
    (signal.SIGTERM, "validating"),
    (signal.SIGINT, "importing the framework"),
    (signal.SIGTERM, "loading the data"),
    (signal.SIGINT, "estimating the HRF"),
    (signal.SIGTERM, "fitting"),
]


@pytest.mark.parametrize(("signum", "state"), CASES)
def test_a_stop_signal_in_the_first_seconds_is_one_line_and_its_code(
    t1w_dataset: Path, tmp_path: Path, signum: int, state: str
) -> None:
    out, work = tmp_path / "out", tmp_path / "work"
    cmd = [sys.executable, "-m", "prfmap.cli.console", t1w_dataset, out, "participant", "--nprocs", "1"]
    cmd += ["--no-report", "-w", work]
    stdout = (tmp_path / "out.stdout").open("w")
    proc = subprocess.Popen(
        list(map(str, cmd)), env=chunked_env(), stdout=stdout, stderr=subprocess.PIPE, text=True
    )
    wait_for(lambda: STATES[state](proc, out, work), proc)
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"{len(lines)} lines on stderr:\n{stderr}"
    (line,) = lines
    assert line.startswith(f"prfmap: error: stopped by {signal.Signals(signum).name} "), line
    assert map_files(out) == []
