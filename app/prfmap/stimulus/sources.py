"""Where the stimulus frames come from: screenshots, a screen recording, or arrays.

Every source yields :class:`Frame` objects, each an RGB picture in [0, 1] at the *working
resolution* (the recording's own pixels, or blocks of ``scale`` × ``scale`` of them averaged when the
recording is larger than :data:`WORKING_SHORT_SIDE`), with the time it was on the screen when the
source knows it. A source can be read twice (the detection surveys it first, then reads every frame).
"""

from __future__ import annotations

import glob
import math
import re
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import av
import numpy as np
from PIL import Image, UnidentifiedImageError

from prfmap.errors import BadDataError, MissingInputError, one_line

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".gif", ".webp")
VIDEO_SUFFIXES = (".mp4", ".m4v", ".mov", ".avi", ".mkv", ".webm", ".mpg", ".mpeg", ".wmv", ".flv")
WORKING_SHORT_SIDE = 1440
"""Recordings whose shorter side exceeds this many pixels are block-averaged to at most it (a 4K frame
is read as 1920 × 1080): the aperture is written at about 100 pixels, and edges stay well within one
output pixel at this size."""
SAMPLE_FRAMES = 48


@dataclass(frozen=True)
class Frame:
    """One picture of the stimulus sequence.

    Attributes
    ----------
    pixels : ndarray or None
        float32 (rows, cols, 3) in [0, 1] at the working resolution; None for a frame that shows only
        the background (a 0 in a ``.mat`` sequence).
    key : hashable
        Frames with equal keys show the same picture (the same image of a ``.mat`` stack).
    start, stop : float or None
        When the frame was on the screen, seconds from the start of the first volume; None when each
        frame is one volume.
    """

    pixels: np.ndarray | None
    key: Hashable
    start: float | None = None
    stop: float | None = None


@dataclass
class FrameSource:
    """Base class of the frame sources.

    Attributes
    ----------
    description : str
        What was read, for the sidecar and messages.
    shape : tuple of int
        (rows, cols) of a frame at the working resolution.
    scale : int
        Source pixels per working pixel along each axis.
    timed : bool
        True when frames carry their screen times (``start``/``stop``), False when each frame is one
        volume.
    sources : list of str
        The files read.
    recorded : tuple of int, optional
        (rows, cols) of a frame as recorded, where ``scale`` does not divide them (the working
        frames leave the last rows and columns out); default ``shape`` × ``scale``.
    """

    description: str
    shape: tuple[int, int]
    scale: int = 1
    timed: bool = False
    sources: list[str] = field(default_factory=list)
    recorded: tuple[int, int] | None = None

    @property
    def source_shape(self) -> tuple[int, int]:
        """(rows, cols) of a frame as recorded."""
        if self.recorded is not None:
            return self.recorded
        return (self.shape[0] * self.scale, self.shape[1] * self.scale)

    def frames(self) -> Iterator[Frame]:
        """Every frame in order."""
        raise NotImplementedError

    def sample(self, n: int = SAMPLE_FRAMES) -> list[np.ndarray]:
        """About ``n`` frames spread evenly over the sequence, as uint8 (rows, cols, 3) pictures.

        The default reads every frame and keeps every k-th, doubling k whenever more than ``2 n``
        are kept, so sources of unknown length (recordings) need no second look-up.
        """
        kept: list[np.ndarray] = []
        stride, index = 1, 0
        for frame in self.frames():
            if frame.pixels is None:
                continue
            if index % stride == 0:
                kept.append(to_uint8(frame.pixels))
                if len(kept) > 2 * n:
                    kept, stride = kept[::2], stride * 2
            index += 1
        return kept


def spread(total: int, n: int) -> np.ndarray:
    """Up to ``n`` distinct indices evenly spread over ``range(total)``, first and last included."""
    return np.unique(np.linspace(0, total - 1, min(n, total)).round().astype(int))


def to_uint8(pixels: np.ndarray) -> np.ndarray:
    """A [0, 1] picture as uint8 (0–255), for the survey's statistics."""
    return (np.clip(pixels, 0.0, 1.0) * np.float32(255.0) + np.float32(0.5)).astype(np.uint8)


def working_scale(rows: int, cols: int) -> int:
    """Source pixels per working pixel for a (rows, cols) recording (see :data:`WORKING_SHORT_SIDE`)."""
    return max(1, math.ceil(min(rows, cols) / WORKING_SHORT_SIDE))


def to_working(pixels: np.ndarray, scale: int) -> np.ndarray:
    """float32 (rows, cols, 3) in [0, 1], ``scale`` × ``scale`` blocks averaged (any remainder cut)."""
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    if pixels.shape[2] == 1:
        pixels = np.repeat(pixels, 3, axis=2)
    pixels = pixels[:, :, :3]
    if scale > 1:
        rows, cols = (pixels.shape[0] // scale) * scale, (pixels.shape[1] // scale) * scale
        blocks = pixels[:rows, :cols].reshape(rows // scale, scale, cols // scale, scale, 3)
        pixels = blocks.mean(axis=(1, 3), dtype=np.float32)
    return np.asarray(pixels, dtype=np.float32)


def natural_key(path: Path) -> list:
    """Sort key that puts ``frame_2`` before ``frame_10``."""
    return [int(part) if part.isdigit() else part.lower() for part in re.split(r"(\d+)", path.name)]


# -- screenshots ------------------------------------------------------------------------------------


def _read_image(path: Path) -> np.ndarray:
    """A picture file as float (rows, cols, 3) in [0, 1]; 16-bit grey kept at full depth."""
    try:
        with Image.open(path) as img:
            if img.mode in ("I;16", "I;16B", "I;16L", "I"):
                grey = np.asarray(img, dtype=np.float32)
                return (grey / (65535.0 if img.mode.startswith("I;16") else max(1.0, grey.max())))[..., None]
            if img.mode == "F":
                return np.clip(np.asarray(img, dtype=np.float32), 0, 1)[..., None]
            return np.asarray(img.convert("RGB"), dtype=np.float32) / 255.0
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise BadDataError(f"cannot read image {path} ({one_line(err)[:160]}); re-save it as PNG") from None


def _image_size(path: Path) -> tuple[int, int]:
    try:
        with Image.open(path) as img:
            frames = int(getattr(img, "n_frames", 1))
            size = img.size[1], img.size[0]
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError) as err:
        raise BadDataError(f"cannot read image {path} ({one_line(err)[:160]}); re-save it as PNG") from None
    if frames > 1:
        raise BadDataError(
            f"{path.name} is an animation of {frames} frames, and each picture file is read as one: "
            f"give its frames as pictures (one PNG per frame) or as a video (ffmpeg -i {path.name} "
            f"{path.stem}.mp4)"
        )
    return size


class ImageFiles(FrameSource):
    """Screenshots: one picture file per volume, or per presentation frame at ``frame_rate`` Hz.

    Parameters
    ----------
    paths : sequence of Path
        The files in presentation order.
    frame_rate : float, optional
        Pictures per second; without it each picture is one volume.
    start_time : float
        Seconds of the sequence before the first volume began (skipped).
    """

    def __init__(self, paths: Sequence[Path], frame_rate: float | None = None, start_time: float = 0.0):
        if not paths:
            raise MissingInputError("no frames: the inputs name no image files")
        sizes = {}
        for path in paths:
            sizes.setdefault(_image_size(path), path)
        if len(sizes) > 1:
            (a, pa), (b, pb) = list(sizes.items())[:2]
            raise BadDataError(
                f"frames of different sizes: {pa.name} is {a[1]}×{a[0]} pixels, {pb.name} is {b[1]}×{b[0]}; "
                "give screenshots of one screen size"
            )
        rows, cols = next(iter(sizes))
        scale = working_scale(rows, cols)
        timing = f" at {frame_rate:g} Hz" if frame_rate else ", one per volume"
        super().__init__(
            description=f"{len(paths)} images ({paths[0].name} … {paths[-1].name}){timing}",
            shape=(rows // scale, cols // scale),
            scale=scale,
            recorded=(rows, cols),
            timed=frame_rate is not None,
            sources=[str(p) for p in paths],
        )
        self.paths = list(paths)
        self.frame_rate = frame_rate
        self.start_time = float(start_time)

    def _frame(self, index: int) -> Frame:
        pixels = to_working(_read_image(self.paths[index]), self.scale)
        if self.frame_rate is None:
            return Frame(pixels, index)
        start = index / self.frame_rate - self.start_time
        return Frame(pixels, index, start, start + 1.0 / self.frame_rate)

    def frames(self) -> Iterator[Frame]:
        """The frames in presentation order (see :meth:`FrameSource.frames`)."""
        for index in range(len(self.paths)):
            yield self._frame(index)

    def sample(self, n: int = SAMPLE_FRAMES) -> list[np.ndarray]:
        """Up to ``n`` frames spread evenly over the input (see :meth:`FrameSource.sample`)."""
        picks = spread(len(self.paths), n)
        return [to_uint8(self._frame(int(i)).pixels) for i in picks]


def image_paths(inputs: Sequence[str | Path]) -> list[Path]:
    """The picture files named by ``inputs``: files, folders (their pictures) or glob patterns.

    Raises
    ------
    MissingInputError
        An input does not exist or a pattern or folder holds no pictures.
    """
    paths: list[Path] = []
    for item in map(str, inputs):
        path = Path(item).expanduser()
        if path.is_dir():
            found = sorted((p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES), key=natural_key)
            if not found:
                raise MissingInputError(
                    f"no frames: folder {path} holds no {'/'.join(s[1:] for s in IMAGE_SUFFIXES[:4])} images"
                )
            paths.extend(found)
        elif glob.has_magic(item):
            found = sorted((Path(p) for p in glob.glob(str(path))), key=natural_key)
            found = [p for p in found if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES]
            if not found:
                raise MissingInputError(f"no frames: pattern {item} matches no image files")
            paths.extend(found)
        elif path.is_file():
            paths.append(path)
        else:
            raise MissingInputError(f"input {item} does not exist")
    return paths


# -- arrays -----------------------------------------------------------------------------------------


class ArrayFrames(FrameSource):
    """Frames held in memory: (frames, rows, cols[, 3]) pictures in [0, 1] (the Python interface).

    Parameters
    ----------
    frames : ndarray
        The pictures, one per volume, or one per presentation frame at ``frame_rate`` Hz.
    frame_rate : float, optional
        Pictures per second.
    """

    def __init__(self, frames: np.ndarray, frame_rate: float | None = None, description: str = "arrays"):
        frames = np.asarray(frames)
        if frames.ndim not in (3, 4) or frames.shape[0] == 0:
            raise BadDataError(
                f"no frames: expected (frames, rows, cols[, 3]) pictures, got shape {frames.shape}"
            )
        super().__init__(description=description, shape=frames.shape[1:3], timed=frame_rate is not None)
        self.array = frames
        self.frame_rate = frame_rate

    def frames(self) -> Iterator[Frame]:
        """The frames in presentation order (see :meth:`FrameSource.frames`)."""
        for index, picture in enumerate(self.array):
            pixels = to_working(np.asarray(picture, dtype=np.float32), 1)
            if self.frame_rate is None:
                yield Frame(pixels, index)
            else:
                yield Frame(pixels, index, index / self.frame_rate, (index + 1) / self.frame_rate)


# -- screen recordings ------------------------------------------------------------------------------

VIDEO_ERRORS = (av.error.FFmpegError, OSError, ValueError, IndexError, EOFError)


class VideoFile(FrameSource):
    """A screen recording read with PyAV (FFmpeg's decoders), frame by frame.

    Each frame is on the screen from its presentation time to the next frame's (the recording's own
    clock, so variable frame rates are followed), or ``1 / frame_rate`` s each when given.

    Parameters
    ----------
    path : Path
        The video file.
    frame_rate : float, optional
        Frames per second, overriding the recording's time stamps.
    start_time : float
        Seconds of the recording before the first volume began (skipped).
    """

    def __init__(self, path: Path, frame_rate: float | None = None, start_time: float = 0.0):
        if not path.is_file():
            raise MissingInputError(f"input {path} does not exist")
        try:
            with av.open(str(path)) as container:
                if not container.streams.video:
                    raise BadDataError(f"video {path} has no video stream; give a screen recording")
                stream = container.streams.video[0]
                rows, cols = stream.codec_context.height, stream.codec_context.width
                rate = stream.average_rate
        except VIDEO_ERRORS as err:
            raise BadDataError(
                f"cannot decode video {path} ({one_line(err)[:160]}); re-encode it as MP4"
            ) from None
        if not rows or not cols:
            raise BadDataError(f"video {path} has no frame size; re-encode it as MP4")
        scale = working_scale(rows, cols)
        native = f"{float(rate):g} Hz" if rate else "its time stamps"
        super().__init__(
            description=f"video {path.name} ({cols}×{rows}, {frame_rate or native})",
            shape=(rows // scale, cols // scale),
            scale=scale,
            recorded=(rows, cols),
            timed=True,
            sources=[str(path)],
        )
        self.path = path
        self.frame_rate = frame_rate
        self.start_time = float(start_time)

    def _decoded(self) -> Iterator[tuple[np.ndarray, float]]:
        """(picture, presentation time in s) of every frame, in presentation order."""
        with av.open(str(self.path)) as container:
            stream = container.streams.video[0]
            stream.thread_type = "AUTO"
            for index, frame in enumerate(container.decode(stream)):
                if self.frame_rate is not None or frame.time is None:
                    rate = self.frame_rate or float(stream.average_rate or 0)
                    if not rate:
                        raise BadDataError(f"video {self.path} has no time stamps; pass --frame-rate")
                    time = index / rate
                else:
                    time = float(frame.time)
                yield frame.to_ndarray(format="rgb24"), time

    def frames(self) -> Iterator[Frame]:
        """The frames in presentation order (see :meth:`FrameSource.frames`)."""
        previous: tuple[np.ndarray, float] | None = None
        first = None
        steps: list[float] = []
        index = -1
        try:
            for index, (picture, time) in enumerate(self._decoded()):
                first = time if first is None else first
                if previous is not None:
                    steps.append(time - previous[1])
                    yield self._frame(previous, time, first, index - 1)
                previous = (picture, time)
        except VIDEO_ERRORS as err:
            where = f" after frame {index + 1}" if index >= 0 else ""
            raise BadDataError(
                f"cannot decode video {self.path}{where} ({one_line(err)[:160]}); re-encode it as MP4"
            ) from None
        if previous is None:
            raise BadDataError(f"no frames: video {self.path} holds no decodable frame; re-encode it as MP4")
        step = float(np.median(steps)) if steps else 1.0 / (self.frame_rate or 60.0)
        yield self._frame(previous, previous[1] + step, first, index)

    def _frame(self, frame: tuple[np.ndarray, float], end: float, first: float, index: int) -> Frame:
        picture, time = frame
        offset = first + self.start_time
        return Frame(to_working(picture / np.float32(255.0), self.scale), index, time - offset, end - offset)
