"""Area-averaged resampling of apertures to the resolution the model needs.

The rule: a pixel is at most the smallest pRF size on the fitting grid. The engine's polar grid
(``prfmap.engine.fit.grid.polar_grid``) starts its sizes at ``GRID_SIGMA_FRACTION`` × the aperture's radius
(2 % of it: 0.2° for a 20° field of view), or one pixel if pixels are coarser. A Gaussian at least one
pixel wide is summed over a pixel grid to within 1e-8 of its integral (the sampling error of a Gaussian
decays as ``exp(-2π² σ² / pixel²)``), and area averaging keeps every partially covered pixel's share of
the stimulus, so a finer aperture adds cost (the fit's matrix products grow with the pixel count) but no
accuracy: a 768 × 768 aperture of a 20° field is fitted on 101 × 101 pixels.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

GRID_SIGMA_FRACTION = 0.02


def fit_pixel_deg(rows: int, cols: int, pixel_deg: float) -> float:
    """The largest pixel the model needs: the smallest σ of the fitting grid, in degrees.

    Parameters
    ----------
    rows, cols : int
        Aperture size in pixels.
    pixel_deg : float
        Distance between neighbouring pixel centres, degrees.

    Returns
    -------
    float
        ``GRID_SIGMA_FRACTION`` × the radius of the largest circle inside the aperture.
    """
    return GRID_SIGMA_FRACTION * 0.5 * pixel_deg * (min(rows, cols) - 1)


def box_weights(n_in: int, n_out: int, ratio: float) -> np.ndarray:
    """Area weights from ``n_in`` pixels of width 1 to ``n_out`` pixels of width ``ratio``, centred.

    Parameters
    ----------
    n_in, n_out : int
        Pixels along the axis before and after.
    ratio : float
        New pixel width over the old one (≥ 1).

    Returns
    -------
    ndarray
        (n_out, n_in): the fraction of each new pixel that each old pixel covers. Parts of a new
        pixel outside the old axis count as unstimulated (zero).
    """
    old = np.arange(n_in + 1, dtype=np.float64) - n_in / 2
    new = (np.arange(n_out + 1, dtype=np.float64) - n_out / 2) * ratio
    lo = np.maximum(new[:-1, None], old[None, :-1])
    hi = np.minimum(new[1:, None], old[None, 1:])
    return np.clip(hi - lo, 0.0, None) / ratio


@dataclass(frozen=True)
class AreaResampler:
    """Area-averages (frames, rows, cols) blocks from one square pixel grid onto a coarser one.

    Both grids are centred on the aperture centre; the new one covers the old one (the part beyond
    it counts as unstimulated). Build it with :meth:`for_model`.

    Attributes
    ----------
    shape_in, shape_out : tuple of int
        (rows, cols) before and after.
    pixel_in, pixel_out : float
        Pixel spacing before and after, degrees.
    """

    shape_in: tuple[int, int]
    shape_out: tuple[int, int]
    pixel_in: float
    pixel_out: float

    @classmethod
    def for_model(cls, rows: int, cols: int, fov_deg: float) -> AreaResampler:
        """The grid whose pixels are no larger than :func:`fit_pixel_deg`, or the same grid.

        Parameters
        ----------
        rows, cols : int
            Aperture size in pixels.
        fov_deg : float
            Full width: the distance between the first and the last column's pixel centres.

        Returns
        -------
        AreaResampler
        """
        pixel = fov_deg / (cols - 1)
        target = fit_pixel_deg(rows, cols, pixel)
        n_cols = max(2, math.ceil(cols * pixel / target - 1e-9))
        if n_cols >= cols:
            return cls.identity_for(rows, cols, fov_deg)
        ratio = cols / n_cols
        n_rows = max(2, math.ceil(rows / ratio - 1e-9))
        return cls((rows, cols), (n_rows, n_cols), pixel, pixel * ratio)

    @classmethod
    def identity_for(cls, rows: int, cols: int, fov_deg: float) -> AreaResampler:
        """The resampler that keeps a (rows, cols) aperture of width ``fov_deg`` as it is.

        Parameters
        ----------
        rows, cols : int
            The aperture's grid.
        fov_deg : float
            Its width, degrees.

        Returns
        -------
        AreaResampler
        """
        pixel = fov_deg / (cols - 1)
        return cls((rows, cols), (rows, cols), pixel, pixel)

    @property
    def identity(self) -> bool:
        """True when the aperture is kept as it is."""
        return self.shape_in == self.shape_out

    @property
    def fov_out(self) -> float:
        """Full width of the new grid (first to last pixel centre), degrees."""
        return self.pixel_out * (self.shape_out[1] - 1)

    def __call__(self, block: np.ndarray) -> np.ndarray:
        """Resample a (frames, rows, cols) block; returns float32 (frames, *shape_out)."""
        if self.identity:
            return np.asarray(block, dtype=np.float32)
        ratio = self.pixel_out / self.pixel_in
        w_rows = box_weights(self.shape_in[0], self.shape_out[0], ratio)
        w_cols = box_weights(self.shape_in[1], self.shape_out[1], ratio)
        out = np.einsum("ri,fij,cj->frc", w_rows, np.asarray(block, dtype=np.float64), w_cols, optimize=True)
        return np.clip(out, 0.0, 1.0).astype(np.float32)
