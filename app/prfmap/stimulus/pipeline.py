"""From frames to apertures: survey, masks per frame, volumes, crop, resampling.

:func:`make_aperture` reads a :class:`~prfmap.stimulus.sources.FrameSource` twice: a sample of frames
to find the background, the threshold and the static marks (:func:`prfmap.stimulus.detect.survey`),
then every frame to make its stimulus mask inside the part of the screen the sample showed stimulus in
(widened; the whole screen when the stimulus reaches its edge), averaged per volume. The stimulated
region then gives the crop (:mod:`prfmap.stimulus.geometry`), and the masks are area-averaged onto the
written grid (:mod:`prfmap.io.resample`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from prfmap.errors import BadDataError, UsageError
from prfmap.io.resample import AreaResampler
from prfmap.stimulus.detect import BLANK_SHARE, Detector, survey
from prfmap.stimulus.geometry import Crop, Screen, choose_crop, fixation_pixels, resampler, stimulated_region
from prfmap.stimulus.mat import MatStack
from prfmap.stimulus.sources import VIDEO_SUFFIXES, FrameSource, ImageFiles, VideoFile, image_paths
from prfmap.stimulus.timing import VolumeAccumulator

THUMBNAIL_WIDTH = 320
DISTINCT_IOU = 0.9
RESAMPLE_BLOCK = 8


@dataclass(frozen=True)
class Options:
    """How to make the apertures (the command line's options; see ``prfmap-stimulus --help``).

    Attributes
    ----------
    screen : Screen
        The viewing geometry.
    tr : float, optional
        Seconds per volume (needed when frames carry times).
    volumes : int, optional
        Volumes to write (default every volume the frames cover).
    size : int, optional
        Columns of the written grid (default the grid prfmap fits at).
    background : tuple of float, optional
        The blank screen's colour, RGB in [0, 1] (default: detected).
    threshold : float, optional
        Colour difference from it that counts as stimulus, in [0, 1] (default: from noise and contrast).
    fill_px : int, optional
        Half-width of the majority-vote box in source pixels (default about 1 % of the screen).
    fixation_radius_deg, fixation_radius_px : float, optional
        A disk around the centre that is never stimulus (besides the detected static marks).
    centre : str
        See :func:`prfmap.stimulus.geometry.choose_crop`.
    centre_px : tuple of float, optional
        The fixation point (x, y) in source pixels, pixel-edge coordinates.
    square : bool
        Write a square even when the stimulated region is not.
    region_px : tuple of int, optional
        (left, top, width, height) in source pixels: the crop itself, instead of detecting it.
    """

    screen: Screen
    tr: float | None = None
    volumes: int | None = None
    size: int | None = None
    background: tuple[float, float, float] | None = None
    threshold: float | None = None
    fill_px: int | None = None
    fixation_radius_deg: float | None = None
    fixation_radius_px: float | None = None
    centre: str = "auto"
    centre_px: tuple[float, float] | None = None
    square: bool = False
    region_px: tuple[int, int, int, int] | None = None


@dataclass
class StimulusResult:
    """The apertures and everything the QC sheet, the sidecar and the summary report.

    Attributes
    ----------
    design : ndarray
        float32 (volumes, rows, cols) in [0, 1], row 0 = top.
    fov_deg : float
        prfmap's ``FieldOfViewDeg``: first to last pixel centre of a row, degrees.
    width_deg : float
        The crop's full width, edge to edge, degrees.
    masks : ndarray
        uint8 (volumes, rows, cols) at the working resolution inside ``window``: 255 × the fraction of
        the volume each pixel was stimulus.
    window : tuple of slice
        The part of the screen ``masks`` covers.
    flooded_frames : list of int
        0-based frames that differed from the background almost everywhere (a start or instruction
        screen): left out of the stimulated region, kept (inside it) in their volumes.
    """

    design: np.ndarray
    fov_deg: float
    width_deg: float
    source: FrameSource
    options: Options
    detector: Detector
    crop: Crop
    region: np.ndarray
    fixation: np.ndarray
    dropped_patches: int
    masks: np.ndarray
    window: tuple[slice, slice]
    resample: AreaResampler
    frames_read: int
    thumbnails: dict[int, np.ndarray] = field(default_factory=dict)
    flooded_frames: list[int] = field(default_factory=list)

    @property
    def fraction(self) -> np.ndarray:
        """Stimulated share of the written field per volume."""
        return self.design.mean(axis=(1, 2))

    @property
    def blank_volumes(self) -> list[int]:
        """0-based volumes that show (almost) no stimulus."""
        area = self.design.sum(axis=(1, 2))
        return [int(v) for v in np.flatnonzero(area <= BLANK_SHARE * max(1e-9, np.percentile(area, 90)))]

    @property
    def distinct_apertures(self) -> int:
        """Non-blank apertures that differ (binarised at 0.5, intersection over union below 0.9)."""
        shown = np.setdiff1d(np.arange(len(self.design)), self.blank_volumes)
        return distinct_count(self.design[shown] >= 0.5)

    def screen_mask(self, volume: int) -> np.ndarray:
        """Volume ``volume``'s mask on the whole screen (working resolution), float in [0, 1]."""
        full = np.zeros(self.source.shape, dtype=np.float32)
        full[self.window] = self.masks[volume] / np.float32(255.0)
        return full

    def to_grid(self, screens: np.ndarray) -> np.ndarray:
        """Screen-sized (volumes, rows, cols) arrays cut and resampled as the design was."""
        return self.resample(np.stack([self.crop.cut(s) for s in screens]))


def distinct_count(binary: np.ndarray) -> int:
    """Greedy count of masks that no earlier kept mask matches with IoU ≥ :data:`DISTINCT_IOU`."""
    flat = binary.reshape(len(binary), -1).astype(np.float32)
    kept: list[np.ndarray] = []
    for row in flat:
        if kept:
            reps = np.stack(kept)
            inter = reps @ row
            union = reps.sum(axis=1) + row.sum() - inter
            if np.any(inter >= DISTINCT_IOU * np.maximum(union, 1)):
                continue
        kept.append(row)
    return len(kept)


def open_source(
    inputs: Sequence[str | Path],
    *,
    frame_rate: float | None = None,
    start_time: float = 0.0,
    images: str | None = None,
    sequence: str | None = None,
    timing: str | None = None,
    base: int = 1,
) -> FrameSource:
    """The frame source the inputs name: one video, one ``.mat`` file, or pictures.

    Raises
    ------
    UsageError
        Several inputs where one video or ``.mat`` file is expected, or ``.mat`` options for pictures.
    MissingInputError, BadDataError
        From the sources.
    """
    paths = [Path(str(p)).expanduser() for p in inputs]
    kinds = {
        "video" if p.suffix.lower() in VIDEO_SUFFIXES else "mat" if p.suffix.lower() == ".mat" else "images"
        for p in paths
    }
    if len(kinds) > 1 or (kinds & {"video", "mat"} and len(paths) > 1):
        raise UsageError(
            "give one video, one .mat file, or picture files/folders/patterns as INPUT, not a mix"
        )
    kind = kinds.pop()
    if kind != "mat" and (images or sequence or timing):
        raise UsageError("--images, --sequence and --sequence-timing apply to a .mat INPUT only")
    if kind == "video":
        return VideoFile(paths[0], frame_rate, start_time)
    if kind == "mat":
        return MatStack(paths[0], images, sequence, timing, frame_rate, start_time, base)
    return ImageFiles(image_paths(inputs), frame_rate, start_time)


def _window(union: np.ndarray, margin: int) -> tuple[slice, slice]:
    ys, xs = np.nonzero(union)
    rows, cols = union.shape
    return (
        slice(max(0, ys.min() - margin), min(rows, ys.max() + 1 + margin)),
        slice(max(0, xs.min() - margin), min(cols, xs.max() + 1 + margin)),
    )


def _touches_edge(union: np.ndarray, window: tuple[slice, slice], shape: tuple[int, int]) -> bool:
    """True when the stimulus reaches a side of ``window`` that is not the screen's edge."""
    rows, cols = window
    return bool(
        (rows.start > 0 and union[0].any())
        or (rows.stop < shape[0] and union[-1].any())
        or (cols.start > 0 and union[:, 0].any())
        or (cols.stop < shape[1] and union[:, -1].any())
    )


@dataclass
class Collected:
    """What reading every frame gives.

    Attributes
    ----------
    masks : ndarray
        uint8 (volumes, rows, cols) inside the window: 255 × the share of the volume each pixel was stimulus.
    union : ndarray
        bool: pixels that were stimulus in any frame (flooded frames left out).
    thumbnails : dict
        volume → uint8 picture of the whole screen (the frame on the screen at the volume's middle).
    frames : int
        Frames read.
    flooded : list of int
        0-based frames that differed from the background almost everywhere (:attr:`Detector.flood_area`).
    """

    masks: np.ndarray
    union: np.ndarray
    thumbnails: dict[int, np.ndarray]
    frames: int
    flooded: list[int]


def collect(
    source: FrameSource,
    detector: Detector,
    window: tuple[slice, slice],
    tr: float | None,
    volumes: int | None,
) -> Collected:
    """Every frame's mask inside ``window``, averaged per volume (see :class:`Collected`)."""
    shape = (window[0].stop - window[0].start, window[1].stop - window[1].start)
    acc = VolumeAccumulator(shape, tr if source.timed else None, volumes)
    union = np.zeros(shape, dtype=bool)
    cache: dict = {}
    flooded: list[int] = []
    thumbs: dict[int, np.ndarray] = {}
    stride = max(1, source.shape[1] // THUMBNAIL_WIDTH)
    repeated = isinstance(source, MatStack)
    for index, frame in enumerate(source.frames()):
        if repeated and frame.key in cache:
            mask = cache[frame.key]
        else:
            pixels = None if frame.pixels is None else frame.pixels[window]
            mask = detector.mask(pixels, window)
            if repeated:
                cache[frame.key] = mask
        if detector.floods(mask):
            flooded.append(index)
        else:
            union |= mask
        volume = index if frame.start is None or tr is None else int(0.5 * (frame.start + frame.stop) // tr)
        if volume >= 0 and volume not in thumbs and (volumes is None or volume < volumes):
            picture = (
                frame.pixels
                if frame.pixels is not None
                else np.broadcast_to(detector.background.colour.astype(np.float32), (*source.shape, 3))
            )
            thumbs[volume] = np.clip(np.rint(picture[::stride, ::stride] * 255), 0, 255).astype(np.uint8)
        acc.add(mask, frame.start, frame.stop)
    return Collected(acc.finish(), union, thumbs, acc.frames, flooded)


def make_aperture(source: FrameSource, options: Options) -> StimulusResult:
    """Make the apertures of a frame source (see the module's text and :class:`Options`).

    Returns
    -------
    StimulusResult

    Raises
    ------
    UsageError
        Wrong geometry, timing options the source contradicts, a crop or size that does not fit.
    BadDataError
        No background, no stimulus, frames that do not fill the volumes asked for.
    """
    rows, cols = source.source_shape
    options.screen.check(rows, cols)
    if source.timed and options.tr is None:
        raise UsageError(f"{source.description} has frame times: give the TR with --tr")
    scale = source.scale
    detector, union, _ = survey(
        source.sample(),
        background=options.background,
        threshold=options.threshold,
        fill_px=None if options.fill_px is None else max(1, round(options.fill_px / scale)),
    )
    if options.region_px is not None:
        union = _region_box(options.region_px, scale, source.shape)
    margin = max(2 * detector.fill_px, round(0.03 * min(source.shape)))
    window = _window(union, margin)
    while True:
        collected = collect(source, detector, window, options.tr, options.volumes)
        full = (slice(0, source.shape[0]), slice(0, source.shape[1]))
        touches = _touches_edge(collected.union, window, source.shape)
        if window == full or options.region_px is not None or not touches:
            break
        window = full
    return _finish(source, options, detector, collected, window)


def _region_box(region_px: tuple[int, int, int, int], scale: int, shape: tuple[int, int]) -> np.ndarray:
    left, top, width, height = (int(round(v / scale)) for v in region_px)
    if width < 2 or height < 2 or left < 0 or top < 0 or left + width > shape[1] or top + height > shape[0]:
        raise UsageError(
            f"--region-px {' '.join(map(str, region_px))} does not fit the "
            f"{shape[1] * scale}×{shape[0] * scale} screen"
        )
    box = np.zeros(shape, dtype=bool)
    box[top : top + height, left : left + width] = True
    return box


def _finish(
    source: FrameSource,
    options: Options,
    detector: Detector,
    collected: Collected,
    window: tuple[slice, slice],
) -> StimulusResult:
    """Region, crop, fixation disk, geometry and resampling, once every volume is collected."""
    scale, masks = source.scale, collected.masks
    full_seen = np.zeros(source.shape, dtype=bool)
    full_seen[window] = collected.union
    if options.region_px is not None:
        region, dropped = _region_box(options.region_px, scale, source.shape) & full_seen, 0
    else:
        region, dropped = stimulated_region(full_seen)
    if not region.any() and options.region_px is None:
        raise BadDataError(
            "no stimulus found in the frames; check the inputs or give --background/--threshold"
        )
    fixation = fixation_pixels(region, detector.static_core & detector.marks, detector.fill_px)
    if options.region_px is not None:
        left, top, width, height = (int(round(v / scale)) for v in options.region_px)
        crop = Crop(left, top, width, height, (left + width / 2, top + height / 2), "given")
    else:
        centre = None if options.centre_px is None else tuple(v / scale for v in options.centre_px)
        crop = choose_crop(region, fixation, centre=options.centre, centre_px=centre, square=options.square)
    if options.screen.fov_centres_deg is not None:  # FieldOfViewDeg is linear in the crop's width
        width_deg = options.screen.fov_centres_deg / resampler(crop, 1.0, options.size).fov_out
    else:
        width_deg = options.screen.angle_deg(crop.width * scale, source.source_shape[1])
    grid = resampler(crop, width_deg, options.size)
    disk_mask = _fixation_disk(options, crop, width_deg, source.shape, scale)
    keep = region & ~disk_mask
    masks = masks * keep[window][None].astype(np.uint8)
    design = np.empty((len(masks), *grid.shape_out), dtype=np.float32)
    offset = Crop(
        crop.left - window[1].start,
        crop.top - window[0].start,
        crop.width,
        crop.height,
        crop.centre,
        crop.centre_from,
    )
    for start in range(0, len(masks), RESAMPLE_BLOCK):
        block = np.stack([offset.cut(m) for m in masks[start : start + RESAMPLE_BLOCK]]) / np.float32(255.0)
        design[start : start + len(block)] = grid(block)
    return StimulusResult(
        design=design,
        fov_deg=grid.fov_out,
        width_deg=width_deg,
        source=source,
        options=options,
        detector=detector.with_static(disk_mask),
        crop=crop,
        region=region,
        fixation=fixation | disk_mask,
        dropped_patches=dropped,
        masks=masks,
        window=window,
        resample=grid,
        frames_read=collected.frames,
        thumbnails=collected.thumbnails,
        flooded_frames=collected.flooded,
    )


def _fixation_disk(
    options: Options, crop: Crop, width_deg: float, shape: tuple[int, int], scale: int
) -> np.ndarray:
    """The user's fixation disk around the crop's centre (working pixels), or an empty mask."""
    if options.fixation_radius_px is not None:
        radius = options.fixation_radius_px / scale
    elif options.fixation_radius_deg is not None:
        radius = options.fixation_radius_deg * crop.width / width_deg
    else:
        return np.zeros(shape, dtype=bool)
    yy, xx = np.mgrid[0 : shape[0], 0 : shape[1]]
    return np.hypot(xx + 0.5 - crop.centre[0], yy + 0.5 - crop.centre[1]) <= radius
