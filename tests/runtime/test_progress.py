"""Progress: one display on a terminal, short periodic log lines otherwise."""

from __future__ import annotations

import io
import logging
import sys

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


def simulated_run(progress: Progress, clock: Clock, fits: int = 3, chunks: int = 2) -> list[float]:
    """The calls of a participant run: per fit its HRF preamble, then chunks of grid + refine."""
    seen = []
    progress("load runs", 2, 2)
    for _ in range(fits):
        progress("HRF grid", 1, 1)
        progress("chunks", 0, chunks)
        for chunk in range(chunks):
            for stage, steps in (("grid", 4), ("refine", 8)):
                for done in range(steps + 1):
                    clock.now += 1.0
                    progress(stage, done, steps)
                    seen.append(progress.fraction)
            progress("chunks", chunk + 1, chunks)
            seen.append(progress.fraction)
    return seen


def test_one_display_on_a_terminal(caplog: pytest.LogCaptureFixture) -> None:
    stream, clock = Terminal(), Clock()
    progress = Progress(stream=stream, clock=clock, title="sub-01", fits=3)
    with caplog.at_level(logging.INFO, logger="prfmap.runtime.progress"), progress:
        assert progress.terminal
        seen = simulated_run(progress, clock)
    assert seen == sorted(seen) and seen[-1] == 1.0
    # each fit is a third; the first fit's prelude (loading, HRF) half of it, each of its two chunks a
    # quarter; once the first chunk showed its stages (grid, refine), each is half a chunk: the second
    # chunk's grid ends at (1/2 + 1/4 + 1/8) / 3; the second fit's prelude is a third of it (one part
    # more than the two chunks the first fit had), its first chunk ends at (1 + 1/3 + 1/3) / 3
    per_chunk = 5 + 9 + 1
    assert seen[per_chunk - 1] == pytest.approx(0.75 / 3) and seen[2 * per_chunk - 1] == pytest.approx(1 / 3)
    assert seen[per_chunk + 4] == pytest.approx(0.875 / 3)
    assert seen[3 * per_chunk - 1] == pytest.approx(5 / 9)
    text = stream.getvalue()
    assert "sub-01 fit 1/3 · chunk 1/2 · grid" in text and "fit 3/3 · done 100%|" in text
    assert "elapsed" in text and " left" in text
    assert text.count("\n") == 1, "the display is redrawn in place and left once, at the end"
    assert progress._bar is None and not caplog.records


def test_the_fraction_moves_before_the_first_chunk() -> None:
    """Loading, the participant HRF and the noise model are counted: the display is not at 0 % for them."""
    progress = Progress(stream=Terminal(), clock=Clock(), fits=2)
    with progress:
        seen = []
        for stage, total in (("load runs", 2), ("HRF grid", 10), ("HRF refine", 5), ("noise", 3)):
            for done in range(total + 1):
                progress(stage, done, total)
                seen.append(progress.fraction)
        assert seen == sorted(seen) and 0.2 < seen[-1] < 0.25  # nearly all of the first fit's half
        progress("chunks", 0, 4)
        progress("grid", 1, 2)
        assert progress.fraction > seen[-1]


def test_log_lines_go_through_tqdm_while_the_display_is_up(monkeypatch) -> None:
    stream, log = Terminal(), logging.getLogger("prfmap")
    console = logging.StreamHandler(sys.stdout)
    console.setLevel(logging.INFO)
    monkeypatch.setattr(log, "handlers", [console])
    monkeypatch.setattr(log, "level", logging.DEBUG)
    writes = []
    monkeypatch.setattr(
        "prfmap.runtime.progress.tqdm.write", lambda text, file=None, **_: writes.append(text)
    )
    with make_progress(stream=stream, fits=1) as progress:
        progress("grid", 1, 2)
        assert console not in log.handlers
        log.info("a line")
        log.debug("below the console's level")
    assert writes == ["a line"]
    assert log.handlers == [console]


def test_disabled_is_silent(caplog: pytest.LogCaptureFixture) -> None:
    stream = Terminal()
    progress = make_progress(enabled=False, stream=stream)
    with caplog.at_level(logging.INFO, logger="prfmap.runtime.progress"):
        progress("grid", 1, 2)
    progress.close()
    assert stream.getvalue() == "" and not caplog.records


def test_after_the_fits_the_display_claims_no_time_left() -> None:
    """The outputs and the report are not measured by the bar: it says what runs, not "00:00 left"."""
    stream, clock = Terminal(), Clock()
    with Progress(stream=stream, clock=clock, title="sub-01", fits=1) as progress:
        simulated_run(progress, clock, fits=1)
        assert stream.getvalue().rstrip().endswith(" left")
        progress.finishing("writing the outputs and the report")
        last = stream.getvalue().split("\r")[-1]
    assert last.startswith("sub-01 writing the outputs and the report 100%|") and "left" not in last
    assert "elapsed" in last


def test_finishing_off_a_terminal_writes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="prfmap.runtime.progress"):
        Progress(stream=io.StringIO()).finishing("writing the outputs")
    assert not caplog.records
