"""Progress of long stages: a tqdm bar on a terminal, periodic log lines elsewhere."""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from tqdm import tqdm

logger = logging.getLogger(__name__)


class Progress:
    """A ``progress(stage, done, total)`` callable, as the engine and the workflow call it.

    A new ``stage`` name (or a new ``total``) starts a new bar or log sequence; ``done ==
    total`` finishes it. On a terminal each stage gets a tqdm bar; otherwise a log line
    (``<stage>: <done>/<total> (<pct>%)``) is written at the start of a stage, at its end, and
    at most every ``interval_s`` seconds in between, so container and SLURM logs stay short.

    Parameters
    ----------
    stream : file-like, optional
        Where bars go (default ``sys.stderr``); its ``isatty()`` chooses bars or log lines.
    interval_s : float
        Least time between two log lines of one stage.
    enabled : bool
        ``False`` makes every call a no-op.
    clock : callable
        Seconds as a float (``time.monotonic``).
    """

    def __init__(
        self,
        stream: IO[str] | None = None,
        interval_s: float = 10.0,
        enabled: bool = True,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.interval_s = interval_s
        self.enabled = enabled
        self.clock = clock
        isatty = getattr(self.stream, "isatty", None)
        self.terminal = bool(callable(isatty) and isatty())
        self._stage: tuple[str, int] | None = None
        self._bar: Any = None
        self._last_log = -float("inf")
        self._last_done = -1

    def __call__(self, stage: str, done: int, total: int) -> None:
        """Report that ``done`` of ``total`` steps of ``stage`` are finished."""
        if not self.enabled:
            return
        total = max(int(total), 0)
        done = min(max(int(done), 0), total) if total else int(done)
        if self._stage != (stage, total):
            self._finish()
            self._stage = (stage, total)
            self._start(stage, total)
        if self.terminal:
            self._bar.update(done - self._bar.n)
        else:
            now = self.clock()
            first = self._last_done < 0
            if first or done >= total or now - self._last_log >= self.interval_s:
                if done != self._last_done:
                    pct = f" ({100.0 * done / total:.0f}%)" if total else ""
                    logger.info("%s: %d/%d%s", stage, done, total, pct)
                    self._last_log = now
            self._last_done = done
        if total and done >= total:
            self._finish()

    def _start(self, stage: str, total: int) -> None:
        self._last_log = -float("inf")
        self._last_done = -1
        if self.terminal:
            self._bar = tqdm(total=total, desc=stage, file=self.stream, leave=True, dynamic_ncols=True)

    def _finish(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        self._stage = None

    def close(self) -> None:
        """End the current stage (close its bar)."""
        self._finish()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def make_progress(enabled: bool = True, stream: IO[str] | None = None, interval_s: float = 10.0) -> Progress:
    """The progress callable to pass as the engine's ``progress=`` and to use for loading runs.

    Parameters
    ----------
    enabled : bool
        ``False`` gives a silent callable.
    stream : file-like, optional
        Terminal stream for bars (default ``sys.stderr``).
    interval_s : float
        Least seconds between two log lines of a stage when not on a terminal.

    Returns
    -------
    Progress
        Call it as ``progress(stage, done, total)``; ``close()`` it (or use ``with``) at the end.
    """
    return Progress(stream=stream, interval_s=interval_s, enabled=enabled)
