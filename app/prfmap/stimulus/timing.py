"""From frames on the screen to one aperture per volume: time-weighted averaging.

A frame on the screen from ``start`` to ``stop`` seconds contributes to volume ``v`` (``v·TR`` to
``(v+1)·TR``) in proportion to the time the two overlap, so a 60 Hz recording averaged to a TR of
1.5 s weighs 90 frames equally, and a 59.94 Hz one or a recording with dropped frames is weighed by its
own clock. Each finished volume is kept as uint8 (0–255, the fraction of the TR a pixel was stimulus),
which keeps long recordings in memory at a byte per pixel and volume.
"""

from __future__ import annotations

import math

import numpy as np

from prfmap.errors import BadDataError

COVERED = 0.95


class VolumeAccumulator:
    """Collects stimulus masks into volumes.

    Parameters
    ----------
    shape : tuple of int
        (rows, cols) of a mask.
    tr : float or None
        Seconds per volume; None when every frame is one volume.
    volumes : int, optional
        How many volumes to keep (default: every volume the frames cover).
    """

    def __init__(self, shape: tuple[int, int], tr: float | None, volumes: int | None = None):
        self.shape, self.tr, self.volumes = shape, tr, volumes
        self.done: list[np.ndarray] = []
        self.open: dict[int, list] = {}
        self.end = 0.0
        self.frames = 0

    def add(self, mask: np.ndarray, start: float | None = None, stop: float | None = None) -> None:
        """Add one frame's mask (bool or [0, 1]) shown from ``start`` to ``stop`` seconds."""
        self.frames += 1
        if self.tr is None:
            self.done.append(np.asarray(mask, dtype=np.uint8) * np.uint8(255))
            return
        if stop <= 0 or (self.volumes is not None and start >= self.volumes * self.tr):
            return
        tr = self.tr
        for v in range(max(0, math.floor(start / tr)), math.ceil(stop / tr)):
            weight = min(stop, (v + 1) * tr) - max(start, v * tr)
            if weight <= 0 or v < len(self.done):
                continue
            entry = self.open.setdefault(v, [np.zeros(self.shape, dtype=np.float32), 0.0])
            entry[0] += np.float32(weight) * mask
            entry[1] += weight
        self.end = max(self.end, stop)
        self._close_before(start)

    def _close_before(self, time: float) -> None:
        """Finish the volumes that end before ``time`` (frames arrive in order)."""
        while self.open and min(self.open) == len(self.done) and (len(self.done) + 1) * self.tr <= time:
            self._finish(len(self.done))

    def _finish(self, v: int) -> None:
        total, weight = self.open.pop(v, [np.zeros(self.shape, dtype=np.float32), 0.0])
        if weight < 0.5 * self.tr:
            raise BadDataError(
                f"the frames cover only {weight:.2f} s of volume {v + 1} ({self.tr:g} s); check "
                "--start-time, --tr and --frame-rate"
            )
        self.done.append(np.clip(np.rint(total * np.float32(255.0 / weight)), 0, 255).astype(np.uint8))

    def finish(self) -> np.ndarray:
        """Every volume: uint8 (volumes, rows, cols), 255 = stimulus during the whole volume.

        Raises
        ------
        BadDataError
            No volume, or fewer covered volumes than ``volumes`` asks for.
        """
        if self.tr is not None:
            covered = math.floor(self.end / self.tr + (1 - COVERED))
            wanted = covered if self.volumes is None else self.volumes
            if wanted > covered:
                raise BadDataError(
                    f"the frames cover {self.end:.2f} s, {covered} volume(s) of {self.tr:g} s, fewer "
                    f"than the {wanted} asked for; check --volumes, --tr and --frame-rate"
                )
            for v in range(len(self.done), wanted):
                self._finish(v)
            del self.done[wanted:]
        if not self.done:
            raise BadDataError(
                f"no frames: the {self.frames} frame(s) read fill no volume; check --tr and --start-time"
            )
        return np.stack(self.done)
