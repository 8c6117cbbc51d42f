"""The stimulus apertures and the visual-field coordinates of their pixels; the tensors the kernels read."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, NamedTuple

import numpy as np


@dataclass(frozen=True)
class Stimulus:
    """Binary or graded stimulus apertures on a square pixel grid.

    Parameters
    ----------
    design : ndarray, shape (frames, rows, cols)
        Aperture per frame (one frame per TR), values in [0, 1]; row 0 is the top of the screen and column 0
        its left edge.
    fov_deg : float
        Full width of the aperture in degrees of visual angle; pixel centres lie at
        ``linspace(-fov_deg / 2, fov_deg / 2, cols)`` (x to the right, y up).
    run_lengths : sequence of int, optional
        Frames per run when several runs with different stimuli are concatenated; the HRF convolution
        restarts at each run. Defaults to one run.
    """

    design: np.ndarray
    fov_deg: float
    run_lengths: tuple[int, ...] = field(default=())

    def __post_init__(self) -> None:
        design = np.asarray(self.design, dtype=np.float32)
        if design.ndim != 3:
            raise ValueError(f"design must be (frames, rows, cols), got shape {design.shape}")
        if not np.all(np.isfinite(design)) or design.min() < 0 or design.max() > 1:
            raise ValueError("design values must be finite and within [0, 1]")
        if not self.fov_deg > 0:
            raise ValueError(f"fov_deg must be positive, got {self.fov_deg}")
        run_lengths = tuple(int(n) for n in self.run_lengths) or (design.shape[0],)
        if sum(run_lengths) != design.shape[0]:
            raise ValueError(
                f"run_lengths add up to {sum(run_lengths)} frames, the design has {design.shape[0]}"
            )
        object.__setattr__(self, "design", design)
        object.__setattr__(self, "run_lengths", run_lengths)

    @property
    def n_frames(self) -> int:
        """Number of frames (TRs)."""
        return self.design.shape[0]

    @property
    def pixel_size(self) -> float:
        """Distance between neighbouring pixel centres in degrees."""
        return self.fov_deg / (self.design.shape[2] - 1)

    @property
    def extent_deg(self) -> float:
        """Radius of the largest circle inside the aperture, in degrees."""
        rows, cols = self.design.shape[1:]
        return 0.5 * self.pixel_size * (min(rows, cols) - 1)

    @cached_property
    def coordinates(self) -> tuple[np.ndarray, np.ndarray]:
        """Visual-field coordinates ``(x, y)`` of every pixel centre, each (rows, cols), in degrees."""
        rows, cols = self.design.shape[1:]
        half_w = 0.5 * self.pixel_size * (cols - 1)
        half_h = 0.5 * self.pixel_size * (rows - 1)
        x = np.linspace(-half_w, half_w, cols)
        y = np.linspace(half_h, -half_h, rows)
        return np.meshgrid(x, y)

    @cached_property
    def stimulated(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Design restricted to pixels that are ever stimulated.

        Returns
        -------
        design : ndarray, shape (frames, pixels)
        x, y : ndarray, shape (pixels,)
        """
        flat = self.design.reshape(self.n_frames, -1)
        used = flat.max(axis=0) > 0
        x, y = self.coordinates
        return flat[:, used], x.ravel()[used], y.ravel()[used]

    @cached_property
    def scales(self) -> dict[str, float]:
        """The quantities parameter bounds refer to (:data:`prfmap.engine.catalog.STIMULUS_SCALES`).

        ``radius``: the largest eccentricity of a pixel ever stimulated; ``fov``: ``fov_deg``;
        ``pixel``: :attr:`pixel_size`; all in degrees.
        """
        _, x, y = self.stimulated
        radius = float(np.hypot(x, y).max()) if x.size else 0.0
        return {"radius": radius, "fov": float(self.fov_deg), "pixel": float(self.pixel_size)}


class StimulusTensors(NamedTuple):
    """The stimulated pixels of a :class:`Stimulus` as backend tensors: what every model kernel reads.

    A ``NamedTuple``, so compiled functions and ``keras.ops.while_loop`` carry it as they carry a tuple
    on every backend (:func:`prfmap.engine.problem.make_problem` builds it).

    Attributes
    ----------
    design : tensor, shape (pixels, frames)
        The apertures of the pixels ever stimulated, transposed.
    x, y : tensor, shape (pixels,)
        Their visual-field coordinates, degrees.
    pixel_area : float
        Area of one pixel in deg², so that responses do not depend on the aperture's resolution.
    """

    design: Any
    x: Any
    y: Any
    pixel_area: float
