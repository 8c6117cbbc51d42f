"""Issue 24, case 13: SIGINT or SIGTERM at any moment of a run's first seconds (importing, parsing,
validating, loading the framework, fitting) ends it with 130/143 and exactly one line on stderr: no
traceback, no crash of the interpreter, never ignored."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from helpers import chunked_env, map_files


def _startup_s() -> float:
    """How long this machine takes to start Python and import the console script's first module."""
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", "import prfmap.runtime.signals"], env=chunked_env(None), check=True)
    return time.monotonic() - start


@pytest.fixture(scope="module")
def startup_s() -> float:
    return max(_startup_s() for _ in range(2))


@pytest.mark.parametrize(
    ("signum", "after_s"),
    [
        (signal.SIGINT, 0.05),  # importing the command line
        (signal.SIGTERM, 0.4),  # parsing, validating
        (signal.SIGINT, 1.5),
        (signal.SIGTERM, 2.5),  # importing the framework
        (signal.SIGINT, 4.0),
        (signal.SIGTERM, 5.0),  # fitting
    ],
)
def test_a_stop_signal_in_the_first_seconds_is_one_line_and_its_code(
    t1w_dataset: Path, tmp_path: Path, startup_s: float, signum: int, after_s: float
) -> None:
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "prfmap.cli.console", t1w_dataset, out, "participant", "--nprocs", "1"]
    cmd += ["--no-report", "-w", tmp_path / "work"]
    proc = subprocess.Popen(
        list(map(str, cmd)), env=chunked_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    time.sleep(startup_s * 1.5 + after_s)
    assert proc.poll() is None, "the run ended before the signal"
    proc.send_signal(signum)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum, stderr
    (line,) = stderr.strip().splitlines()
    # a fast machine may have saved a first chunk by then: the line says so and how to resume
    stopped = f"prfmap: error: stopped by {signal.Signals(signum).name} "
    assert re.match(re.escape(stopped) + r"(while |after chunk \d+ of \d+ .*--work-dir)", line), line
    assert map_files(out) == []
