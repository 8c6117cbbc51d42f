"""Progress of a participant run: one display on a terminal, periodic log lines elsewhere."""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

logger = logging.getLogger(__name__)
CHUNKS = "chunks"
"""The stage :func:`prfmap.checkpoint.fit_chunked` reports: ``(CHUNKS, 0, n)`` as a fit's chunk loop
starts, ``(CHUNKS, i, n)`` after its i-th chunk; every other stage in between is one of that chunk's."""
BAR_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {elapsed} elapsed, {remaining} left"
FINISHING_FORMAT = "{desc} {percentage:3.0f}%|{bar}| {elapsed} elapsed"
"""After the fits: no time left is claimed for the outputs and the report, which the bar does not
measure (a third of the demo participant's 30 s, shown as "00:00 left" before)."""
FALLBACK_COLUMNS = 100
REDRAW_S = 0.2


class Progress:
    """A ``progress(stage, done, total)`` callable, as the engine and the workflow call it.

    On a terminal, one display for the whole participant: its title, the fit (``fit 2/3``), the
    chunk and the stage being worked on, the overall fraction and an estimate of the time left
    (the time so far scaled by the fraction left), updated in place. Log lines written to the
    terminal meanwhile go through ``tqdm.write`` (tqdm's logging redirect), so they appear above
    the display and never break it.

    The overall fraction counts the announced ``fits`` (the main fit and each cross-validation
    fold) as equal parts; within a fit, what precedes its chunks (loading, the participant HRF,
    the noise model: its prelude) as one part more than the chunks the previous fit had (half the
    first fit), each prelude stage half of what is left of it; the chunks as equal parts of the
    rest; within a chunk, the stages (grid, refine, seed, ...) as equal parts of the sequence the
    first finished chunk went through. A fit without a prelude gives its chunks the whole fit.
    The fraction never decreases.

    Off a terminal, a log line (``<stage>: <done>/<total> (<pct>%)``) is written at the start of a
    stage, at its end, and at most every ``interval_s`` seconds in between, so container and SLURM
    logs stay short.

    Parameters
    ----------
    stream : file-like, optional
        Where the display goes (default ``sys.stderr``); its ``isatty()`` chooses the display or
        log lines.
    interval_s : float
        Least time between two log lines of one stage.
    enabled : bool
        ``False`` makes every call a no-op.
    clock : callable
        Seconds as a float (``time.monotonic``).
    title : str
        What the display is about, e.g. ``"sub-01"``.
    fits : int
        How many fits the run will make (each ends with ``(CHUNKS, n, n)``).
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        interval_s: float = 10.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
        title: str = "",
        fits: int = 1,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self.enabled = enabled
        self.clock = clock
        self.title = title
        self.fits = max(int(fits), 1)
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(callable(isatty) and isatty())
        self._stage: tuple[str, int] | None = None
        self._bar: Any = None
        self._redirect: contextlib.ExitStack | None = None
        self._last_log = -float("inf")
        self._last_done = -1
        self._last_draw, self._drawn_stage = -float("inf"), ""
        self._fits_done = 0
        self._chunks = self._chunks_done = 0
        self._sequence: list[str] = []
        self._learned: list[str] | None = None
        self._last_chunks = 1
        self._prelude: list[tuple[str, int]] = []
        self._prelude_share = 0.0
        self.fraction = 0.0

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Report that ``done`` of ``total`` steps of ``stage`` are finished."""
        if not self.enabled:
            return
        total = max(int(total), 0)
        done = min(max(int(done), 0), total) if total else int(done)
        if self.terminal:
            self._display(stage, done, total)
        else:
            self._log(stage, done, total)

    # --- off a terminal: log lines --------------------------------------------------------------
    def _log(self, stage: str, done: int, total: int) -> None:
        if self._stage != (stage, total):
            self._stage = (stage, total)
            self._last_log, self._last_done = -float("inf"), -1
        now = self.clock()
        if self._last_done < 0 or done >= total or now - self._last_log >= self.interval_s:
            if done != self._last_done:
                pct = f" ({100.0 * done / total:.0f}%)" if total else ""
                logger.info("%s: %d/%d%s", stage, done, total, pct)
                self._last_log = now
        self._last_done = done
        if total and done >= total:
            self._stage = None

    # --- on a terminal: one display -------------------------------------------------------------
    def _display(self, stage: str, done: int, total: int) -> None:
        if self._bar is None:
            self._open()
        fit = min(self._fits_done + 1, self.fits)
        where = self._advance(stage, done, total)
        title = f"{self.title} " if self.title else ""
        description = f"{title}fit {fit}/{self.fits} · {where}"
        self._bar.set_description_str(description, refresh=False)
        self._bar.n = round(1000 * self.fraction)
        now = self.clock()
        if now - self._last_draw >= REDRAW_S or stage != self._drawn_stage:
            self._bar.refresh()
            self._last_draw, self._drawn_stage = now, stage

    def _advance(self, stage: str, done: int, total: int) -> str:
        """Update the overall fraction from one report; returns where the run is, in words."""
        if stage == CHUNKS:
            if done == 0 or not self._chunks:
                self._chunks, self._chunks_done, self._sequence = total, 0, []
            if done > 0:
                self._chunks_done = done
                if self._learned is None and self._sequence:
                    self._learned = list(self._sequence)
                self._sequence, self._stage = [], None
            if total and done >= total:
                self._fits_done = min(self._fits_done + 1, self.fits)
                self._last_chunks, self._chunks, self._chunks_done = max(total, 1), 0, 0
                self._prelude, self._prelude_share = [], 0.0
                self._raise(self._fits_done / self.fits)
            else:
                self._raise(self._in_fit(done / total if self._chunks and total else 0.0))
            return f"chunk {done}/{total}" if total and done < total else "done"
        step = done / total if total else 0.0
        if not self._chunks:  # before the fit's chunks: loading, the participant HRF, the noise model
            if not self._prelude_share:
                self._prelude_share = 1.0 / (self._last_chunks + 1)
            if not self._prelude or self._prelude[-1] != (stage, total):
                self._prelude.append((stage, total))
            k = len(self._prelude) - 1
            within = 1.0 - 0.5**k * (1.0 - 0.5 * step)  # each stage takes half of what is left
            self._raise((self._fits_done + self._prelude_share * within) / self.fits)
            return f"{stage} {done}/{total}"
        if self._stage != (stage, total):
            self._stage = (stage, total)
            self._sequence.append(stage)
        k = len(self._sequence) - 1
        parts = len(self._learned) if self._learned and k < len(self._learned) else k + 2
        within = min((k + step) / parts, 1.0)
        self._raise(self._in_fit((self._chunks_done + within) / self._chunks))
        return f"chunk {self._chunks_done + 1}/{self._chunks} · {stage} {done}/{total}"

    def _in_fit(self, chunks_fraction: float) -> float:
        """The overall fraction when the current fit's chunks are ``chunks_fraction`` done."""
        share = self._prelude_share
        return (self._fits_done + share + (1.0 - share) * chunks_fraction) / self.fits

    def _raise(self, fraction: float) -> None:
        self.fraction = min(max(self.fraction, fraction), 1.0)

    def _open(self) -> None:
        """Start the display and route console log lines through ``tqdm.write`` while it is up."""
        self._redirect = contextlib.ExitStack()
        for log in (logging.getLogger("prfmap"), logging.getLogger()):
            console = [h for h in log.handlers if _is_console(h)]
            if console:
                self._redirect.enter_context(logging_redirect_tqdm([log]))
                redirected = log.handlers[-1]  # the redirect's handler keeps the console's level
                redirected.setLevel(min(h.level for h in console))
        columns = _columns(self.stream)
        self._bar = tqdm(
            total=1000,
            file=self.stream,
            bar_format=BAR_FORMAT,
            smoothing=0.0,
            mininterval=0.5,
            ncols=columns,
            dynamic_ncols=columns is None,
            leave=True,
        )

    def finishing(self, what: str) -> None:
        """Say that the fits are done and ``what`` (writing the outputs...) is under way.

        On a terminal the display keeps its 100 % and its elapsed time but says ``what`` instead of a
        time left; elsewhere nothing (the caller's log line says it).

        Parameters
        ----------
        what : str
            What the run does now, e.g. ``"writing the outputs and the report"``.
        """
        if not self.enabled:
            return
        if not self.terminal:
            return
        if self._bar is None:
            self._open()
        self._raise(1.0)
        self._bar.n = 1000
        self._bar.bar_format = FINISHING_FORMAT
        self._bar.set_description_str(f"{self.title} {what}".strip(), refresh=False)
        self._bar.refresh()

    def close(self) -> None:
        """End the display (its last state stays on screen) and restore the log handlers."""
        if self._bar is not None:
            self._bar.refresh()
            self._bar.close()
            self._bar = None
        if self._redirect is not None:
            self._redirect.close()
            self._redirect = None
        self._stage = None

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _is_console(handler: logging.Handler) -> bool:
    """A handler that writes to the terminal (stdout or stderr), as tqdm's redirect replaces."""
    return isinstance(handler, logging.StreamHandler) and handler.stream in (sys.stdout, sys.stderr)


def _columns(stream: IO[str]) -> int | None:
    """The display's width: ``None`` (follow the terminal) where the terminal has one.

    Else a fixed width: a pseudo-terminal whose size was never set reports 0 columns, where tqdm would
    draw nothing.
    """
    try:
        return None if os.get_terminal_size(stream.fileno()).columns > 0 else FALLBACK_COLUMNS
    except (OSError, ValueError, AttributeError):
        return FALLBACK_COLUMNS


def make_progress(
    enabled: bool = True,
    stream: IO[str] | None = None,
    interval_s: float = 10.0,
    title: str = "",
    fits: int = 1,
) -> Progress:
    """The progress callable to pass as the engine's ``progress=`` and to use for loading runs.

    Parameters
    ----------
    enabled : bool
        ``False`` gives a silent callable.
    stream : file-like, optional
        Terminal stream for the display (default ``sys.stderr``).
    interval_s : float
        Least seconds between two log lines of a stage when not on a terminal.
    title : str
        What the display is about (the participant).
    fits : int
        How many fits the run makes (main fits and cross-validation folds).

    Returns
    -------
    Progress
        Call it as ``progress(stage, done, total)``; ``close()`` it (or use ``with``) at the end.
    """
    return Progress(stream=stream, interval_s=interval_s, enabled=enabled, title=title, fits=fits)
