"""Non-finite frames (NaN, inf) of a run: repaired by interpolation where few and short, else refused."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_REPAIR_FRACTION = 0.05
"""A unit with non-finite frames is repaired when at most this fraction of its frames are..."""
MAX_REPAIR_GAP_S = 4.0
"""...and no stretch of consecutive non-finite frames is longer than this many seconds (less than
the HRF's 5-s width, so the interpolated frames lie on a response that changes little between
their neighbours); otherwise it is refused (NaN in every map)."""


@dataclass(frozen=True)
class FrameRepair:
    """What became of the units with some non-finite frames (NaN or inf) in one run.

    Units whose frames are all non-finite have no signal and are counted nowhere.

    Attributes
    ----------
    repaired_units, repaired_frames : int
        Units repaired by linear interpolation over time, and their interpolated frames.
    most_frames : int
        The most frames interpolated in one unit.
    refused_units : int
        Units with too many non-finite frames, or too long a gap: NaN rows.
    """

    repaired_units: int = 0
    repaired_frames: int = 0
    most_frames: int = 0
    refused_units: int = 0

    def __add__(self, other: FrameRepair) -> FrameRepair:
        return FrameRepair(
            self.repaired_units + other.repaired_units,
            self.repaired_frames + other.repaired_frames,
            max(self.most_frames, other.most_frames),
            self.refused_units + other.refused_units,
        )

    def message(self, run: str) -> str | None:
        """One line for the log and the report; None when no unit had non-finite frames.

        Parameters
        ----------
        run : str
            The run's name.

        Returns
        -------
        str or None
        """
        parts = []
        if self.repaired_units:
            parts.append(
                f"{self.repaired_units} unit(s) with non-finite frames repaired by linear "
                f"interpolation ({self.repaired_frames} frame(s) in all, at most {self.most_frames} "
                "in one unit)"
            )
        if self.refused_units:
            parts.append(
                f"{self.refused_units} unit(s) refused (NaN in every map): more than "
                f"{MAX_REPAIR_FRACTION:.0%} of their frames non-finite or a gap over "
                f"{MAX_REPAIR_GAP_S:g} s"
            )
        return f"{run}: " + "; ".join(parts) if parts else None


def repair_nonfinite(block: np.ndarray, tr: float) -> tuple[np.ndarray, FrameRepair]:
    """Interpolate a few non-finite frames of each unit, or refuse the unit.

    A unit (row) is repaired when at most :data:`MAX_REPAIR_FRACTION` of its frames are non-finite
    and no gap of consecutive ones lasts longer than :data:`MAX_REPAIR_GAP_S`: each such frame is
    linearly interpolated between its finite neighbours in time (the nearest finite value at the
    ends). Otherwise the unit is refused: its row becomes all NaN. Rows without a finite frame are
    left as they are (no signal).

    Parameters
    ----------
    block : ndarray
        (units, frames) raw BOLD.
    tr : float
        Repetition time, seconds.

    Returns
    -------
    tuple
        The repaired (units, frames) float64 array and the :class:`FrameRepair` counts.
    """
    y = np.asarray(block, dtype=np.float64)
    bad = ~np.isfinite(y)
    counts = bad.sum(axis=1)
    n = y.shape[1]
    partial = np.flatnonzero((counts > 0) & (counts < n))
    if partial.size == 0:
        return y, FrameRepair()
    y = y.copy()
    max_gap = max(1, int(np.floor(MAX_REPAIR_GAP_S / tr + 1e-9)))
    frames = np.arange(n)
    repaired: list[int] = []
    refused = 0
    for row in partial:
        missing = bad[row]
        if counts[row] > MAX_REPAIR_FRACTION * n or _longest_run(missing) > max_gap:
            y[row] = np.nan
            refused += 1
            continue
        y[row, missing] = np.interp(frames[missing], frames[~missing], y[row, ~missing])
        repaired.append(int(counts[row]))
    return y, FrameRepair(len(repaired), int(sum(repaired)), max(repaired, default=0), refused)


def _longest_run(mask: np.ndarray) -> int:
    """Length of the longest stretch of True in a 1-D bool array."""
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    starts, stops = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    return int((stops - starts).max(initial=0))
