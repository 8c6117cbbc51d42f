"""What is stimulus in a picture: pixels that differ from the background, but static marks.

The survey looks at a sample of frames once:

- the **background** is the commonest colour, over the frames, of the pixels that ever change and a
  border around them: a stimulus covers any one pixel for a small part of a pRF sequence, so this is
  the dominant colour of the blank screen, whatever the carrier or the colour;
- the **threshold** on the colour difference from it stands above the recording's noise (compression,
  dithering) and a small share of the stimulus contrast;
- **static marks** are what differs from the background in (nearly) every frame and in the blank
  frames: the fixation mark (whatever its shape or colour changes), letterbox bars, a surround of another
  colour, text. They are never evidence of stimulus, and the compact ones (the fixation mark, text)
  are never stimulus; thin marks spanning the field (a semi-transparent fixation grid) are filled
  where the stimulus shows on both sides of them.

A frame's aperture is then the pixels that differ from the background by more than the threshold,
with the carrier's background-coloured pixels (pink noise crossing the mean, a grey part of an object)
filled by a majority vote over a small box (``fill_px``, about 1 % of the screen): inside an aperture
most pixels of the box differ, outside a straight edge fewer than half do, so edges stay where they are.
Partial coverage of an output pixel comes from area-averaging these masks (:mod:`prfmap.io.resample`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy import ndimage

from prfmap.errors import BadDataError

THRESHOLD_FLOOR = 4.0 / 255.0
"""The smallest colour difference counted as stimulus (a few 8-bit levels: dithering, rounding)."""
NOISE_FACTOR = 5.0
CONTRAST_SHARE = 0.08
"""The threshold is at least this share of the typical stimulus contrast (JPEG/video ringing)."""
USUAL_TOLERANCE = 8.0 / 255.0
STATIC_SHARE = 0.9
FILL_SHARE = 0.01
KEEP_DENSITY = 0.15
BACKGROUND_SHARE = 0.3
"""The background must be the colour of at least this share of the pixels and frames where the frames
change (a pRF stimulus covers any one pixel for a small part of the sequence)."""
VISIBLE_SHARE = 0.3
"""In a typical frame, at least this share of the changing pixels must show the background."""
BLANK_SHARE = 0.005
FLOOD_SHARE = 0.5
MARK_SHARE = 0.1
"""Static marks that fit in a box of this share of the screen's shorter side are fixation-like."""
PROBE_PIXELS = 40_000


@dataclass(frozen=True)
class Background:
    """The background colour and the difference from it that counts as stimulus.

    Attributes
    ----------
    colour : ndarray
        (3,) RGB in [0, 1].
    threshold : float
        The largest channel difference from ``colour`` that is still background, in [0, 1].
    noise : float
        Median channel difference of background pixels from ``colour`` (the recording's noise).
    given : bool
        True when the user gave the colour.
    share : float
        Share of the pixels and frames where the frames change that show it (NaN when given).
    """

    colour: np.ndarray
    threshold: float
    noise: float
    given: bool
    share: float

    @property
    def rgb255(self) -> tuple[int, int, int]:
        """The colour in 8-bit levels."""
        return tuple(int(v) for v in np.clip(np.rint(self.colour * 255), 0, 255))


@dataclass(frozen=True)
class Detector:
    """Turns pictures into stimulus masks (see the module's text).

    Attributes
    ----------
    background : Background
    static : ndarray
        (rows, cols) bool: static marks (the compact ones widened by a margin); never evidence of
        stimulus.
    fill_px : int
        Half-width of the majority-vote box, pixels.
    static_core : ndarray
        The static marks before widening.
    marks : ndarray
        The compact static marks (the fixation mark, text), widened: never stimulus, even where the
        stimulus surrounds them. Thin static marks that span the field (a semi-transparent fixation
        grid) are filled by the majority vote where the stimulus shows on both sides of them.
    flood_area : float
        A frame with more stimulus pixels than this is not a stimulus of the sequence but a screen of
        another colour (an instruction or start screen): it is left out of the stimulated region.
    """

    background: Background
    static: np.ndarray
    fill_px: int
    static_core: np.ndarray
    marks: np.ndarray
    flood_area: float = np.inf

    def difference(self, pixels: np.ndarray) -> np.ndarray:
        """Largest channel difference from the background, float32 (rows, cols)."""
        return channel_difference(pixels, self.background.colour)

    def mask(self, pixels: np.ndarray | None, window: tuple[slice, slice] | None = None) -> np.ndarray:
        """The stimulus mask of a picture: bool (rows, cols).

        Parameters
        ----------
        pixels : ndarray or None
            float32 (rows, cols, 3) in [0, 1] (already cut to ``window``); None: a blank screen.
        window : tuple of slice, optional
            The part of the screen ``pixels`` covers.
        """
        window = window or (slice(None), slice(None))
        if pixels is None:
            return np.zeros(self.static[window].shape, dtype=bool)
        return self.mask_of_difference(self.difference(pixels), window)

    def mask_of_difference(
        self, difference: np.ndarray, window: tuple[slice, slice] = (slice(None), slice(None))
    ) -> np.ndarray:
        """The stimulus mask from a picture's :meth:`difference` (of the part ``window`` of the screen)."""
        raw = (difference > self.background.threshold) & ~self.static[window]
        density = ndimage.uniform_filter(raw.astype(np.float32), size=2 * self.fill_px + 1, mode="constant")
        return ((density >= 0.5) | (raw & (density >= KEEP_DENSITY))) & ~self.marks[window]

    def floods(self, mask: np.ndarray) -> bool:
        """True when a frame's mask covers more than :attr:`flood_area` pixels."""
        return bool(mask.sum() > self.flood_area)

    def with_static(self, extra: np.ndarray) -> Detector:
        """The same detector with more static pixels (a fixation disk given by the user)."""
        return replace(
            self, static=self.static | extra, static_core=self.static_core | extra, marks=self.marks | extra
        )


def channel_difference(pixels: np.ndarray, colour: np.ndarray) -> np.ndarray:
    """Largest channel difference of a (rows, cols, 3) picture from ``colour``: float32 (rows, cols).

    uint8 pictures (0–255) go through a look-up table per channel; float ones are in [0, 1].
    """
    if pixels.dtype == np.uint8:
        tables = np.abs(
            np.arange(256, dtype=np.float32)[None, :] / 255.0 - np.asarray(colour, np.float32)[:, None]
        )
        out = tables[0][pixels[..., 0]]
        np.maximum(out, tables[1][pixels[..., 1]], out=out)
        return np.maximum(out, tables[2][pixels[..., 2]], out=out)
    colour = np.asarray(colour, dtype=np.float32)
    out = np.abs(pixels[..., 0] - colour[0])
    np.maximum(out, np.abs(pixels[..., 1] - colour[1]), out=out)
    return np.maximum(out, np.abs(pixels[..., 2] - colour[2]), out=out)


def usual_colours(stack: np.ndarray, block: int = 64) -> tuple[np.ndarray, np.ndarray]:
    """Each pixel's median colour over the frames and its largest channel range.

    Parameters
    ----------
    stack : ndarray
        uint8 (frames, rows, cols, 3).

    Returns
    -------
    usual : ndarray
        float64 (rows, cols, 3) in [0, 1].
    spread : ndarray
        float32 (rows, cols) in [0, 1].
    """
    rows = stack.shape[1]
    usual = np.empty(stack.shape[1:], dtype=np.float64)
    spread = np.empty(stack.shape[1:3], dtype=np.float32)
    for start in range(0, rows, block):
        part = stack[:, start : start + block]
        usual[start : start + block] = np.median(part, axis=0) / 255.0
        span = part.max(axis=0) - part.min(axis=0)
        spread[start : start + block] = (
            np.maximum(np.maximum(span[..., 0], span[..., 1]), span[..., 2]) / 255.0
        )
    return usual, spread


def dominant_colour(
    stack: np.ndarray, zone: np.ndarray, rng: np.random.Generator
) -> tuple[np.ndarray, float]:
    """The most common colour (8-level bins) of the zone's pixels over the frames, and its share.

    Parameters
    ----------
    stack : ndarray
        uint8 (frames, rows, cols, 3).
    zone : ndarray
        bool (rows, cols): where to look (the pixels that change and a border around them).
    """
    where = np.flatnonzero(zone.ravel())
    where = rng.choice(where, size=min(PROBE_PIXELS, where.size), replace=False)
    colours = stack.reshape(stack.shape[0], -1, 3)[:, where].reshape(-1, 3)
    codes = colours.astype(np.int64) // 8
    flat = (codes[:, 0] * 32 + codes[:, 1]) * 32 + codes[:, 2]
    counts = np.bincount(flat, minlength=32**3)
    mode = int(np.argmax(counts))
    return np.median(colours[flat == mode], axis=0) / 255.0, float(counts[mode] / max(1, flat.size))


def _background(stack: np.ndarray, usual: np.ndarray, spread: np.ndarray, given, threshold) -> Background:
    """The background colour (given or dominant) and the threshold (given or from noise and contrast).

    The background is the commonest colour, over the frames, of the pixels that change and a border
    around them (2 % of the screen): the blank screen's colour where the stimulus appears, not the
    commonest colour of the frames (a black surround or letterbox can be larger).
    """
    changing = spread > USUAL_TOLERANCE
    if changing.sum() < 1e-3 * changing.size:
        changing = np.ones_like(changing)
    rng = np.random.default_rng(0)
    if given is not None:
        colour, share = np.asarray(given, dtype=np.float64), float("nan")
    else:
        border = max(2, round(0.02 * min(changing.shape)))
        zone = ndimage.binary_dilation(changing, iterations=border)
        colour, share = dominant_colour(stack, zone, rng)
        if share < BACKGROUND_SHARE:
            raise BadDataError(
                f"no background colour found: the commonest colour where the frames change covers only "
                f"{share:.0%} of it; give the blank screen's colour with --background R G B"
            )
    flat_usual = channel_difference(usual, colour).ravel()
    probes = rng.choice(flat_usual.size, size=min(PROBE_PIXELS, flat_usual.size), replace=False)
    diff = channel_difference(stack.reshape(stack.shape[0], -1, 3)[:, probes], colour)
    usually_background = diff[:, flat_usual[probes] <= USUAL_TOLERANCE]
    noise = float(np.median(usually_background)) if usually_background.size else 0.0
    stimulus = usually_background[usually_background > THRESHOLD_FLOOR]
    contrast = float(np.percentile(stimulus, 90)) if stimulus.size else 0.0
    if threshold is None:
        threshold = max(THRESHOLD_FLOOR, NOISE_FACTOR * noise, CONTRAST_SHARE * contrast)
    return Background(colour, float(threshold), noise, given is not None, share)


def _small_parts(mask: np.ndarray, size: float) -> np.ndarray:
    labels, _ = ndimage.label(mask, structure=np.ones((3, 3)))
    boxes = ndimage.find_objects(labels)
    small = [i + 1 for i, (r, c) in enumerate(boxes) if max(r.stop - r.start, c.stop - c.start) <= size]
    return np.isin(labels, small)


def compact_marks(static: np.ndarray, size: float, thin: float) -> np.ndarray:
    """The compact static marks.

    Connected parts that fit in a ``size`` × ``size`` box (a fixation dot or cross, text), also once
    lines thinner than ``2 × thin`` pixels are taken away (a fixation dot on the crossing of grid lines
    that span the field).
    """
    blobs = ndimage.binary_opening(static, disk(thin))
    return _small_parts(static, size) | _small_parts(blobs, size)


def disk(radius: float) -> np.ndarray:
    """A disk of ``radius`` pixels as a bool structuring element."""
    r = int(np.ceil(radius))
    yy, xx = np.mgrid[-r : r + 1, -r : r + 1]
    return yy**2 + xx**2 <= radius**2 + 1e-9


def survey(
    samples: Sequence[np.ndarray],
    *,
    background: Sequence[float] | None = None,
    threshold: float | None = None,
    fill_px: int | None = None,
) -> tuple[Detector, np.ndarray, int]:
    """Find the background, the threshold and the static marks in a sample of frames.

    Parameters
    ----------
    samples : sequence of ndarray
        uint8 (rows, cols, 3) frames spread over the sequence.
    background : sequence of float, optional
        The background colour, RGB in [0, 1].
    threshold : float, optional
        The difference from the background that counts as stimulus, in [0, 1].
    fill_px : int, optional
        Half-width of the majority-vote box (default about 1 % of the screen's shorter side).

    Returns
    -------
    detector : Detector
    union : ndarray
        bool (rows, cols): pixels that are stimulus in any sampled frame.
    blank : int
        Sampled frames that show no stimulus.

    Raises
    ------
    BadDataError
        Fewer than two frames, no background colour found, or the frames do not show the background.
    """
    if len(samples) < 2:
        raise BadDataError(
            f"{len(samples)} frame(s) with a picture: at least 2 are needed to tell stimulus from "
            "static marks"
        )
    stack = np.stack(samples)
    usual, spread = usual_colours(stack)
    found = _background(stack, usual, spread, background, threshold)
    rows, cols = stack.shape[1:3]
    fill = int(fill_px) if fill_px is not None else max(2, round(FILL_SHARE * min(rows, cols)))
    above = [channel_difference(frame, found.colour) > found.threshold for frame in stack]
    count = np.sum(above, axis=0)
    core = count >= (STATIC_SHARE * len(stack) if len(stack) >= 10 else len(stack))
    _check_visible(above, spread, found)
    margin = max(2.0, 0.002 * min(rows, cols))
    static = ndimage.binary_dilation(core, disk(margin))
    detector = Detector(found, static, fill, core, static)
    masks = [detector.mask_of_difference(channel_difference(f, found.colour)) for f in stack]
    areas = np.array([m.sum() for m in masks])
    typical = float(np.percentile(areas, 90))
    blank = areas < BLANK_SHARE * max(1.0, typical)
    flood = max(FLOOD_SHARE * rows * cols, 3.0 * typical)
    if blank.any():
        in_blanks = np.mean([above[i] for i in np.flatnonzero(blank)], axis=0) >= 0.5
        core = core | in_blanks
    marks = ndimage.binary_dilation(compact_marks(core, MARK_SHARE * min(rows, cols), margin), disk(margin))
    detector = Detector(found, core | marks, fill, core, marks, flood)
    shown = ~blank & (areas <= flood)
    union = np.any([m for m, keep in zip(masks, shown, strict=True) if keep], axis=0) if shown.any() else None
    if union is None or not union.any():
        raise BadDataError(
            "no stimulus found: no frame differs from the background "
            f"{found.rgb255} by more than {found.threshold * 255:.0f} levels outside static marks; check "
            "the inputs or give --background/--threshold"
        )
    return detector, union & ~detector.marks, int(blank.sum())


def _check_visible(above: list[np.ndarray], spread: np.ndarray, found: Background) -> None:
    """The frames must mostly show the background where they change (else it is not the background)."""
    changing = spread > found.threshold
    if not changing.any():
        return
    visible = float(np.median([1.0 - a[changing].mean() for a in above]))
    if visible < VISIBLE_SHARE:
        raise BadDataError(
            f"no background found: a typical frame shows the background colour {found.rgb255} in only "
            f"{visible:.0%} of the changing pixels; give the blank screen's colour with --background R G B"
        )
