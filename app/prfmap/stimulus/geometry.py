"""Where the stimulus is on the screen and how wide it is in degrees of visual angle.

The written aperture is the rectangle of the screen that the stimulus covers, centred on the fixation
point (prfmap's origin, the aperture centre): its half-widths are the largest distances from the centre
to the stimulated pixels, so the stimulus is never cut and the centre stays the centre (a square
stimulus gives a square aperture; ``square=True`` pads a rectangle to one). Its width in degrees is the
angle the crop subtends at the eye, ``2·atan(width_cm / 2 / distance_cm)``, and pixels are equally
spaced in degrees across it, as analyzePRF, mrVista and prfpy assume (on a flat screen the outermost
pixels of a 20° field are 1 % smaller in degrees than the central ones).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy import ndimage

from prfmap.errors import UsageError
from prfmap.io.resample import AreaResampler

ASPECT_TOLERANCE = 0.03
MAX_SCREEN_DEG = 150.0
MIN_COMPONENT_SHARE = 0.02
CENTRES = ("auto", "screen", "fixation", "stimulus")


@dataclass(frozen=True)
class Screen:
    """The viewing geometry: the screen's size and distance, or the stimulated width in degrees.

    Attributes
    ----------
    size_cm : tuple of float or None
        Width and height of the area the frames show, centimetres.
    distance_cm : float or None
        Eye to screen, centimetres.
    fov_deg : float or None
        The stimulated region's full width in degrees, edge to edge (instead of the two above).
    fov_centres_deg : float or None
        Instead: the distance between its first and last written pixel centres, degrees: the
        ``FieldOfViewDeg`` the sidecar will hold, the convention of prfmap's ``--stimulus-fov-deg``.
    """

    size_cm: tuple[float, float] | None = None
    distance_cm: float | None = None
    fov_deg: float | None = None
    fov_centres_deg: float | None = None

    def check(self, rows: int, cols: int) -> None:
        """Refuse a geometry the frames contradict or no screen could have.

        Raises
        ------
        UsageError
            Neither or both forms, a screen whose aspect ratio differs from the frames', or one wider
            than 150° (centimetres given as millimetres or metres).
        """
        given = [self.fov_deg is not None, self.fov_centres_deg is not None]
        given.append(self.size_cm is not None and self.distance_cm is not None)
        if sum(given) != 1 or (self.size_cm is None) != (self.distance_cm is None):
            raise UsageError(
                "give the geometry as --screen-size-cm W H --screen-distance-cm D, as --fov-deg (edge to "
                "edge) or as --fov-centres-deg (between the outer pixel centres), one of them"
            )
        for flag, value in (("--fov-deg", self.fov_deg), ("--fov-centres-deg", self.fov_centres_deg)):
            if value is not None and not 0 < value < 180:
                raise UsageError(f"{flag} {value:g} must lie between 0 and 180 degrees")
        if self.size_cm is None:
            return
        width, height = self.size_cm
        if abs((width / height) / (cols / rows) - 1) > ASPECT_TOLERANCE:
            raise UsageError(
                f"wrong geometry: --screen-size-cm {width:g} {height:g} has an aspect ratio of "
                f"{width / height:.3f} but the frames are {cols}×{rows} pixels ({cols / rows:.3f}); give "
                "the size of the area the frames show, or --fov-deg"
            )
        whole = self.angle_deg(cols, cols)
        if whole > MAX_SCREEN_DEG:
            raise UsageError(
                f"wrong geometry: a {width:g} cm wide screen at {self.distance_cm:g} cm spans "
                f"{whole:.0f}°; give --screen-size-cm and --screen-distance-cm in centimetres"
            )

    def angle_deg(self, width_px: float, screen_cols: int) -> float:
        """Full angle of ``width_px`` source pixels centred on the fixation point, degrees.

        With ``fov_deg`` that is the stimulated width itself (``width_px`` is the crop).
        """
        if self.fov_deg is not None:
            return float(self.fov_deg)
        half_cm = 0.5 * width_px * self.size_cm[0] / screen_cols
        return math.degrees(2 * math.atan(half_cm / self.distance_cm))


@dataclass(frozen=True)
class Crop:
    """The written rectangle of the screen, in working pixels (it may reach past the screen's edge).

    Attributes
    ----------
    left, top, width, height : int
    centre : tuple of float
        (x, y) of the fixation point, pixel-edge coordinates (the screen spans 0 … cols).
    centre_from : str
        How the centre was found: ``fixation``, ``screen``, ``stimulus`` or ``given``.
    """

    left: int
    top: int
    width: int
    height: int
    centre: tuple[float, float]
    centre_from: str

    def cut(self, image: np.ndarray) -> np.ndarray:
        """The crop of a (rows, cols[, ...]) screen array, zeros where it reaches past the screen."""
        out = np.zeros((self.height, self.width, *image.shape[2:]), dtype=image.dtype)
        top, left = max(0, self.top), max(0, self.left)
        bottom = min(image.shape[0], self.top + self.height)
        right = min(image.shape[1], self.left + self.width)
        if bottom > top and right > left:
            out[top - self.top : bottom - self.top, left - self.left : right - self.left] = image[
                top:bottom, left:right
            ]
        return out

    def scaled(self, factor: int) -> dict[str, object]:
        """The crop in source pixels, for the sidecar."""
        return {
            "Left": self.left * factor,
            "Top": self.top * factor,
            "Width": self.width * factor,
            "Height": self.height * factor,
            "CentreX": self.centre[0] * factor,
            "CentreY": self.centre[1] * factor,
            "CentreFrom": self.centre_from,
        }


def stimulated_region(union: np.ndarray) -> tuple[np.ndarray, int]:
    """The stimulated pixels without small separate patches (a photodiode square, a cursor).

    Returns the kept mask and the number of patches left out (each under 2 % of the largest).
    """
    labels, n = ndimage.label(union, structure=np.ones((3, 3)))
    if n <= 1:
        return union.copy(), 0
    sizes = np.bincount(labels.ravel())[1:]
    keep = np.flatnonzero(sizes >= MIN_COMPONENT_SHARE * sizes.max()) + 1
    return np.isin(labels, keep), int(n - keep.size)


def fixation_pixels(region: np.ndarray, static: np.ndarray, fill_px: int) -> np.ndarray:
    """Static marks within the stimulated region or the holes it encloses (the fixation mark)."""
    hull = ndimage.binary_fill_holes(ndimage.binary_dilation(region, iterations=max(1, fill_px)))
    return static & hull


def choose_crop(
    region: np.ndarray,
    fixation: np.ndarray,
    *,
    centre: str = "auto",
    centre_px: tuple[float, float] | None = None,
    square: bool = False,
) -> Crop:
    """The rectangle to write: centred on the fixation point, covering every stimulated pixel.

    Parameters
    ----------
    region : ndarray
        bool (rows, cols): the stimulated pixels.
    fixation : ndarray
        bool (rows, cols): the fixation mark's pixels (may be empty).
    centre : {"auto", "screen", "fixation", "stimulus"}
        auto: the fixation mark's centroid when there is one, else the screen's centre; stimulus: the
        centre of the stimulated pixels' bounding box.
    centre_px : tuple of float, optional
        The centre (x, y) in working pixels, pixel-edge coordinates (overrides ``centre``).
    square : bool
        Pad the rectangle to a square.
    """
    rows, cols = region.shape
    ys, xs = np.nonzero(region)
    x0, x1, y0, y1 = xs.min(), xs.max() + 1, ys.min(), ys.max() + 1
    if centre_px is not None:
        (cx, cy), source = centre_px, "given"
    elif centre == "fixation" or (centre == "auto" and fixation.any()):
        if not fixation.any():
            raise UsageError(
                "--centre fixation: no fixation mark found inside the stimulated region; use --centre-px"
            )
        fy, fx = np.nonzero(fixation)
        (cx, cy), source = (fx.mean() + 0.5, fy.mean() + 0.5), "fixation"
    elif centre == "stimulus":
        (cx, cy), source = (0.5 * (x0 + x1), 0.5 * (y0 + y1)), "stimulus"
    else:
        (cx, cy), source = (0.5 * cols, 0.5 * rows), "screen"
    cx, cy = round(2 * cx) / 2, round(2 * cy) / 2
    half_w, half_h = max(cx - x0, x1 - cx), max(cy - y0, y1 - cy)
    if square:
        half_w = half_h = max(half_w, half_h)
    return Crop(
        int(round(cx - half_w)),
        int(round(cy - half_h)),
        int(round(2 * half_w)),
        int(round(2 * half_h)),
        (float(cx), float(cy)),
        source,
    )


def resampler(crop: Crop, width_deg: float, size: int | None) -> AreaResampler:
    """Area averaging from the crop onto the written grid.

    Parameters
    ----------
    crop : Crop
    width_deg : float
        The crop's full width (edge to edge), degrees.
    size : int, optional
        Columns to write; default the grid prfmap fits at (:meth:`AreaResampler.for_model`).

    Raises
    ------
    UsageError
        ``size`` exceeds the crop's width in pixels.
    """
    rows, cols = crop.height, crop.width
    fov_centres = width_deg * (cols - 1) / cols
    if size is None:
        return AreaResampler.for_model(rows, cols, fov_centres)
    if size > cols:
        raise UsageError(
            f"--size {size} exceeds the stimulated region's width of {cols} pixels; choose at most {cols}"
        )
    if size == cols:
        return AreaResampler.identity_for(rows, cols, fov_centres)
    ratio = cols / size
    pixel = fov_centres / (cols - 1)
    return AreaResampler((rows, cols), (max(2, math.ceil(rows / ratio - 1e-9)), size), pixel, pixel * ratio)
