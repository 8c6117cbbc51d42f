"""A participant run on a real pseudo-terminal draws one progress display, with the time left, and
its log lines stay whole above it (rendered by pyte, a VT100 terminal emulator)."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import sys
import termios
import time
from pathlib import Path

import pyte
import pytest

from helpers import subprocess_env, synthesise

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("serial")]  # a terminal of its own
ROWS, COLUMNS = 40, 120
ANY_BAR = re.compile(r"\d+%\|")  # a tqdm bar of any format
BAR = re.compile(r"fit (\d+)/(\d+) · .*?(\d+)%\|[^|]*\| (\d\d:\d\d) elapsed, (\S+) left")


def run_in_terminal(argv: list[str], env: dict[str, str], timeout: float) -> tuple[int, bytes]:
    """Run ``argv`` with stdin, stdout and stderr on a new pseudo-terminal of ROWS × COLUMNS."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: its terminal gets a size, as a terminal window has one
        fcntl.ioctl(1, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, COLUMNS, 0, 0))
        os.execve(argv[0], argv, env)
    output, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 1.0)
        if ready:
            try:
                data = os.read(fd, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            output += data
    else:
        os.kill(pid, 9)
    _, status = os.waitpid(pid, 0)
    os.close(fd)
    return os.waitstatus_to_exitcode(status), output


def screen_lines(output: bytes) -> list[str]:
    """Every row the terminal shows or scrolled away, COLUMNS characters each, as a terminal
    draws the bytes; empty rows left out."""
    screen = pyte.HistoryScreen(COLUMNS, ROWS, history=10_000)
    pyte.ByteStream(screen).feed(output)
    scrolled = ["".join(line[x].data for x in range(COLUMNS)) for line in screen.history.top]
    return [line for line in scrolled + list(screen.display) if line.strip()]


@pytest.fixture(scope="module")
def terminal_run(tmp_path_factory) -> tuple[int, bytes, Path]:
    root = tmp_path_factory.mktemp("pty")
    bids = synthesise(root / "bids", subjects=1, runs=2, space="T1w", small=True)
    env = subprocess_env("jax") | {"PRFMAP_CHUNK_UNITS": "256", "TERM": "xterm", "COLUMNS": str(COLUMNS)}
    argv = [
        sys.executable,
        "-m",
        "prfmap.cli.run",
        str(bids),
        str(root / "out"),
        "participant",
        "-w",
        str(root / "work"),
        "--skip-bids-validation",
        "--no-report",
    ]
    code, output = run_in_terminal(argv, env, timeout=900)
    return code, output, root


def test_one_display_with_the_time_left(terminal_run):
    code, output, _ = terminal_run
    lines = [line.rstrip() for line in screen_lines(output)]
    assert code == 0, "\n".join(lines[-30:])
    bars = [line for line in lines if ANY_BAR.search(line)]
    assert len(bars) == 1, f"{len(bars)} progress displays:\n" + "\n".join(bars)
    # It ends saying what runs after the fits, with no time left claimed for what it does not measure.
    assert re.fullmatch(r"sub-01 writing the outputs 100%\|[^|]*\| \d\d:\d\d elapsed", bars[0]), bars[0]
    # The display was redrawn in place all along: its fraction never went back, it went through the
    # main fit and the 2 folds, and while the run was under way it gave an estimate of the time left.
    drawn = [BAR.search(m.group(0)).groups() for m in BAR.finditer(output.decode(errors="replace"))]
    assert {(fit, fits) for fit, fits, *_ in drawn} == {("1", "3"), ("2", "3"), ("3", "3")}
    percents = [int(d[2]) for d in drawn]
    assert percents == sorted(percents) and len(set(percents)) >= 5, percents
    assert any(0 < int(p) < 100 and re.fullmatch(r"\d\d:\d\d", t) for _, _, p, _, t in drawn)
    assert any("chunk 2/" in m.group(0) for m in BAR.finditer(output.decode(errors="replace")))


def test_log_lines_are_whole_above_the_display(terminal_run):
    _, output, _ = terminal_run
    rows = screen_lines(output)
    text = "".join(rows)  # rows are COLUMNS wide: a wrapped line continues in the next one
    messages = re.findall(r"\d\d:\d\d:\d\d prfmap[^\r\n]*", output.decode(errors="replace"))
    assert any("fold 2/2" in m for m in messages) and any("chunk 1/" in m for m in messages)
    for message in messages:
        at = text.find(message)
        assert at >= 0, f"log line broken on screen: {message!r}"
        assert at % COLUMNS == 0, f"log line does not start a row: {rows[at // COLUMNS]!r}"
