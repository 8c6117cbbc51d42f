"""Progress: tqdm bars on a terminal, short periodic log lines otherwise."""

from __future__ import annotations

import io
import logging

import pytest

from prfmap.runtime.progress import Progress, make_progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    """Seconds advanced by hand, so the test does not sleep."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_log_lines_are_periodic_when_not_on_a_terminal(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    progress = Progress(stream=io.StringIO(), interval_s=10.0, clock=clock)
    assert not progress.terminal
    with caplog.at_level(logging.INFO, logger="prfmap.runtime.progress"):
        for done in range(101):
            clock.now = done * 1.0
            progress("grid", done, 100)
        progress("refine", 0, 30)
        progress("refine", 30, 30)
    lines = [r.getMessage() for r in caplog.records]
    grid = [line for line in lines if line.startswith("grid")]
    assert grid[0] == "grid: 0/100 (0%)" and grid[-1] == "grid: 100/100 (100%)"
    assert 10 <= len(grid) <= 12
    assert lines[-2:] == ["refine: 0/30 (0%)", "refine: 30/30 (100%)"]


def test_bar_on_a_terminal(caplog: pytest.LogCaptureFixture) -> None:
    stream = Terminal()
    with caplog.at_level(logging.INFO, logger="prfmap.runtime.progress"), make_progress(stream=stream) as p:
        assert p.terminal
        for done in range(5):
            p("load runs", done, 4)
        p("grid", 3, 10)
    text = stream.getvalue()
    assert "load runs" in text and "4/4" in text
    assert "grid" in text and "3/10" in text
    assert p._bar is None
    assert not caplog.records


def test_disabled_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    stream = Terminal()
    progress = make_progress(enabled=False, stream=stream)
    with caplog.at_level(logging.INFO, logger="prfmap.runtime.progress"):
        progress("grid", 1, 2)
    progress.close()
    assert stream.getvalue() == "" and not caplog.records
