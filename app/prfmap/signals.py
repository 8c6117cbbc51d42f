"""Stop cleanly on SIGTERM/SIGINT: finish the current chunk, keep the checkpoints, exit 143/130."""

from __future__ import annotations

import contextlib
import logging
import signal
import threading
from collections.abc import Iterator
from types import FrameType

from prfmap.errors import PrfmapError

logger = logging.getLogger(__name__)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
_requested: list[int] = []


class StopRequested(PrfmapError):
    """The run was asked to stop by a signal; exit code 128 + the signal number (143, 130)."""

    def __init__(self, message: str, signum: int) -> None:
        super().__init__(message, exit_code=128 + signum)  # type: ignore[arg-type]
        self.signum = signum


def stop_requested() -> int | None:
    """The number of the first stop signal received, or None."""
    return _requested[0] if _requested else None


def check_stop(where: str, how_to_resume: str) -> None:
    """Raise :class:`StopRequested` if a stop signal arrived.

    Parameters
    ----------
    where : str
        What was finished last, e.g. ``"after chunk 3 of 10 of task-prf_space-T1w"``.
    how_to_resume : str
        The sentence telling the user how to continue.
    """
    signum = stop_requested()
    if signum is not None:
        name = signal.Signals(signum).name
        raise StopRequested(f"stopped by {name} {where}; {how_to_resume}", signum)


def _handler(signum: int, frame: FrameType | None) -> None:
    if _requested:
        name = signal.Signals(signum).name
        raise StopRequested(
            f"stopped at once by a second {name}; the chunks saved so far are kept: run the same "
            "command again to resume",
            signum,
        )
    _requested.append(signum)
    logger.warning(
        "%s received: stopping after the current chunk (send it again to stop at once)",
        signal.Signals(signum).name,
    )


@contextlib.contextmanager
def stop_after_chunk() -> Iterator[None]:
    """Within the block, SIGTERM/SIGINT only request a stop that :func:`check_stop` acts on.

    A second signal raises :class:`StopRequested` at once. Outside the main thread nothing is installed.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {s: signal.signal(s, _handler) for s in STOP_SIGNALS}
    _requested.clear()
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        _requested.clear()
