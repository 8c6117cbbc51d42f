"""Rendered stimulus material with known apertures, for the prfmap-stimulus tests and benchmarks.

A screen of ``cols`` × ``rows`` pixels on a background colour, optionally letterboxed (black bars left
and right), shows bar, wedge or ring apertures inside a circular field, filled with a checkerboard,
pink noise or coloured objects, with anti-aliased edges (coverage from the signed distance to each
edge), and a fixation dot on top that changes colour. Every frame comes with its true aperture: the
share of each pixel covered by the stimulus and not by the fixation dot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

SHAPES = ("bars", "wedges", "rings")
CARRIERS = ("checkerboard", "pinknoise", "objects")
FIXATION_COLOURS = ((0.9, 0.1, 0.1), (0.1, 0.8, 0.1), (0.15, 0.3, 1.0))


@dataclass(frozen=True)
class Scene:
    """Screen and stimulus layout, in pixels."""

    rows: int = 1080
    cols: int = 1920
    radius: float = 500.0
    background: tuple[float, float, float] = (0.5, 0.5, 0.5)
    letterbox: int = 120
    fixation_radius: float = 8.0
    centre: tuple[float, float] | None = None
    fixation_cross: bool = False
    surround: tuple[float, float, float] | None = None
    presentation: int | None = None

    @property
    def centre_xy(self) -> tuple[float, float]:
        """(x, y) of the fixation point in pixel-edge coordinates."""
        return self.centre or (self.cols / 2, self.rows / 2)

    def polar(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """x (right), y (up), eccentricity and polar angle of every pixel centre, pixels and radians."""
        cx, cy = self.centre_xy
        x = (np.arange(self.cols) + 0.5 - cx)[None, :].astype(np.float32)
        y = (cy - np.arange(self.rows) - 0.5)[:, None].astype(np.float32)
        x, y = np.broadcast_arrays(x, y)
        return x, y, np.hypot(x, y), np.arctan2(y, x)


def coverage(signed_distance: np.ndarray) -> np.ndarray:
    """Anti-aliased coverage of a shape from the signed distance to its edge (pixels, > 0 outside)."""
    return np.clip(0.5 - signed_distance, 0.0, 1.0).astype(np.float32)


def sequence(shape: str, steps: int = 8, blanks: int = 2) -> list[tuple | None]:
    """The apertures of a sweep: ``None`` for a blank frame, else the parameters of one aperture."""
    if shape == "bars":
        positions = np.linspace(-0.85, 0.85, steps)
        body = [("bar", angle, p) for angle in (0, 90, 180, 270) for p in positions]
    elif shape == "wedges":
        body = [("wedge", angle) for angle in np.arange(0, 360, 360 / (2 * steps))]
    elif shape == "rings":
        edges = np.geomspace(0.06, 1.0, steps + 2)
        body = [("ring", edges[i], edges[i + 2]) for i in range(steps)]
    else:
        raise ValueError(shape)
    return [None] * blanks + body + [None] * blanks


def aperture(scene: Scene, spec: tuple | None, polar=None) -> np.ndarray:
    """The coverage (rows, cols) of one aperture inside the circular field."""
    x, y, r, theta = polar if polar is not None else scene.polar()
    if spec is None:
        return np.zeros(r.shape, dtype=np.float32)
    field = r - scene.radius
    if spec[0] == "bar":
        angle = np.radians(spec[1])
        u = x * np.cos(angle) + y * np.sin(angle)
        inside = np.abs(u - spec[2] * scene.radius) - scene.radius / 8
    elif spec[0] == "wedge":
        delta = np.angle(np.exp(1j * (theta - np.radians(spec[1]))))
        inside = r * np.sin(np.clip(np.abs(delta) - np.radians(22.5), -np.pi / 2, np.pi / 2))
    else:
        inside = np.maximum(spec[1] * scene.radius - r, r - spec[2] * scene.radius)
    return coverage(np.maximum(field, inside))


def pink_noise(rng: np.random.Generator, rows: int, cols: int) -> np.ndarray:
    """1/f noise in [0, 1], mean 0.5, standard deviation 0.18 (clipped)."""
    fy = np.fft.fftfreq(rows)[:, None]
    fx = np.fft.rfftfreq(cols)[None, :]
    f = np.hypot(fx, fy)
    f[0, 0] = 1.0
    spectrum = (rng.standard_normal(f.shape) + 1j * rng.standard_normal(f.shape)) / f
    spectrum[0, 0] = 0
    noise = np.fft.irfft2(spectrum, s=(rows, cols)).astype(np.float32)
    return np.clip(0.5 + 0.18 * noise / noise.std(), 0.0, 1.0)


def carrier(kind: str, scene: Scene, index: int, rng: np.random.Generator, polar=None) -> np.ndarray:
    """The carrier picture (rows, cols, 3) of frame ``index``."""
    x, y, r, theta = polar if polar is not None else scene.polar()
    if kind == "checkerboard":
        size = scene.radius / 8
        checks = (np.floor(x / size) + np.floor(y / size) + index) % 2
        grey = np.where(checks > 0, 1.0, 0.0).astype(np.float32)
        return np.repeat(grey[..., None], 3, axis=2)
    if kind == "pinknoise":
        return np.repeat(pink_noise(rng, scene.rows, scene.cols)[..., None], 3, axis=2)
    if kind == "objects":
        return _objects(scene, rng)
    raise ValueError(kind)


def _objects(scene: Scene, rng: np.random.Generator, n: int = 70, step: int = 4) -> np.ndarray:
    """Coloured ellipses and rectangles over a coloured pink-noise backdrop (drawn at 1/step, enlarged)."""
    rows, cols = -(-scene.rows // step), -(-scene.cols // step)
    tint = rng.uniform(0.2, 0.9, 3).astype(np.float32)
    backdrop = pink_noise(rng, rows, cols)[..., None] * tint * 1.2
    picture = np.clip(backdrop, 0, 1)
    yy, xx = np.mgrid[0:rows, 0:cols].astype(np.float32)
    cx, cy = scene.centre_xy[0] / step, scene.centre_xy[1] / step
    for _ in range(n):
        ox, oy = cx + rng.uniform(-1, 1) * scene.radius / step, cy + rng.uniform(-1, 1) * scene.radius / step
        a, b = rng.uniform(0.03, 0.15, 2) * scene.radius / step
        hue = rng.uniform(0, 1)
        colour = np.array([0.5 + 0.5 * np.cos(2 * np.pi * (hue + k / 3)) for k in range(3)], dtype=np.float32)
        inside = (
            ((xx - ox) / a) ** 2 + ((yy - oy) / b) ** 2 <= 1
            if rng.uniform() < 0.5
            else ((np.abs(xx - ox) <= a) & (np.abs(yy - oy) <= b))
        )
        picture[inside] = colour
    return np.repeat(np.repeat(picture, step, axis=0), step, axis=1)[: scene.rows, : scene.cols]


def fixation_mark(scene: Scene, polar) -> np.ndarray:
    """Coverage of the fixation mark: a dot of ``fixation_radius``, or a cross that long and 1/4 as thick."""
    x, y, r, _ = polar
    if not scene.fixation_cross:
        return coverage(r - scene.fixation_radius)
    half, arm = scene.fixation_radius / 4, scene.fixation_radius
    bar_h = np.maximum(np.abs(x) - arm, np.abs(y) - half)
    bar_v = np.maximum(np.abs(y) - arm, np.abs(x) - half)
    return coverage(np.minimum(bar_h, bar_v))


def frame_surround(scene: Scene, picture: np.ndarray) -> None:
    """Black letterbox bars, and a surround colour outside the presentation square, in place."""
    if scene.surround is not None:
        cx, cy = (int(v) for v in scene.centre_xy)
        inner = np.zeros(picture.shape[:2], dtype=bool)
        p = scene.presentation
        inner[max(0, cy - p) : cy + p, max(0, cx - p) : cx + p] = True
        picture[~inner] = scene.surround
    if scene.letterbox:
        picture[:, : scene.letterbox] = 0
        picture[:, scene.cols - scene.letterbox :] = 0


def render(scene: Scene, shape: str, kind: str, *, steps: int = 8, blanks: int = 2, seed: int = 0):
    """Yield ``(picture, truth, fixation)`` per frame: the screen (rows, cols, 3) in [0, 1], the true
    aperture coverage (rows, cols) and the fixation mark's coverage."""
    rng = np.random.default_rng(seed)
    polar = scene.polar()
    fixation = fixation_mark(scene, polar)
    background = np.asarray(scene.background, dtype=np.float32)
    for index, spec in enumerate(sequence(shape, steps, blanks)):
        stim = aperture(scene, spec, polar) * (1 - fixation)
        picture = np.broadcast_to(background, (scene.rows, scene.cols, 3)).copy()
        if spec is not None:
            carried = carrier(kind, scene, index, rng, polar)
            picture += stim[..., None] * (carried - background)
        dot = np.asarray(FIXATION_COLOURS[rng.integers(len(FIXATION_COLOURS))], dtype=np.float32)
        picture += fixation[..., None] * (dot - picture)
        frame_surround(scene, picture)
        yield picture, stim, fixation


def to_uint8(picture: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(picture * 255), 0, 255).astype(np.uint8)


def iou(recovered: np.ndarray, truth: np.ndarray) -> float:
    """Intersection over union of two [0, 1] masks (the fuzzy Jaccard index: Σ min / Σ max)."""
    return float(np.minimum(recovered, truth).sum() / max(1e-12, np.maximum(recovered, truth).sum()))


def moving_bars(scene: Scene, *, tr: float, rate: float, sweep_volumes: int = 4, seed: int = 0):
    """A recording: a blank volume, a bar sweeping right then one sweeping up, moving every frame, a
    blank volume; checkerboard reversing at 5 Hz, fixation dot changing colour every second.

    Yields ``(picture, truth)`` per frame at ``rate`` Hz (``truth`` without the fixation dot).
    """
    rng = np.random.default_rng(seed)
    x, y, r, theta = polar = scene.polar()
    fixation = fixation_mark(scene, polar)
    near = np.nonzero(fixation.any(axis=1))[0][[0, -1]], np.nonzero(fixation.any(axis=0))[0][[0, -1]]
    box = (slice(near[0][0], near[0][1] + 1), slice(near[1][0], near[1][1] + 1))
    background = np.asarray(scene.background, dtype=np.float32)
    blank = np.broadcast_to(background, (scene.rows, scene.cols, 3)).copy()
    frame_surround(scene, blank)
    contrast = [carrier("checkerboard", scene, phase, rng, polar) - background for phase in (0, 1)]
    field = r - scene.radius
    per_volume = int(round(tr * rate))
    sweep = sweep_volumes * per_volume
    n = 2 * per_volume + 2 * sweep
    dots = [np.asarray(FIXATION_COLOURS[rng.integers(3)], dtype=np.float32) for _ in range(int(n / rate) + 2)]
    for index in range(n):
        k = index - per_volume
        picture = blank.copy()
        stim = np.zeros(r.shape, dtype=np.float32)
        if 0 <= k < 2 * sweep:
            u, step = (x, k) if k < sweep else (y, k - sweep)
            centre = (-0.75 + 1.5 * step / (sweep - 1)) * scene.radius
            stim = coverage(np.maximum(field, np.abs(u - centre) - scene.radius / 8)) * (1 - fixation)
            picture += stim[..., None] * contrast[int(index * 10 / rate) % 2]
        mark = fixation[box][..., None]
        picture[box] += mark * (dots[int(index / rate)] - picture[box])
        yield picture, stim


def write_mp4(path, pictures, rate: float, crf: int = 18) -> None:
    """Encode ``pictures`` ((rows, cols, 3) in [0, 1]) as H.264 MP4 (yuv420p) with PyAV."""
    import av

    with av.open(str(path), "w") as container:
        stream = None
        for picture in pictures:
            if stream is None:
                stream = container.add_stream("libx264", rate=int(rate))
                stream.height, stream.width = picture.shape[:2]
                stream.pix_fmt = "yuv420p"
                stream.options = {"crf": str(crf), "preset": "ultrafast"}
            frame = av.VideoFrame.from_ndarray(to_uint8(picture), format="rgb24")
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)


def measure(result, truth: np.ndarray, fixation: np.ndarray) -> dict[str, float]:
    """How well a :class:`prfmap.stimulus.StimulusResult` recovers the rendered truth.

    ``truth`` (volumes, rows, cols) is the true coverage per volume on the screen (working
    resolution), ``fixation`` the fixation mark's coverage. Returns the median and smallest IoU over
    the stimulus volumes (both on the written grid, the truth cut and resampled the same way), the
    largest and mean absolute difference of the values, the largest error in the stimulated share of
    the field per volume, and the number of fixation-mark pixels taken for stimulus in any volume.
    """
    grid = result.to_grid(truth)
    shown = grid.sum(axis=(1, 2)) > 0
    ious = [iou(a, b) for a, b in zip(result.design[shown], grid[shown], strict=True)]
    error = np.abs(result.design - grid)
    touched = (grid > 0) | (result.design > 0)
    mark = fixation > 0
    taken = sum(int((result.screen_mask(v)[mark] > 0).sum()) for v in range(len(result.design)))
    return {
        "iou_median": float(np.median(ious)),
        "iou_min": float(np.min(ious)),
        "value_error_max": float(error.max()),
        "value_error_mean": float(error[touched].mean()),
        "share_error_max": float(np.abs(result.design.mean(axis=(1, 2)) - grid.mean(axis=(1, 2))).max()),
        "fixation_pixels": taken,
        "volumes": int(len(result.design)),
    }


def field_design(scene: Scene, truth: np.ndarray, screen, size: int = 101) -> tuple[np.ndarray, float]:
    """The true coverage on its own ``size``-pixel grid over the whole circular field (not a tool's
    crop), with its ``FieldOfViewDeg``; ``screen`` is a :class:`prfmap.stimulus.Screen`."""
    from prfmap.stimulus.geometry import Crop, resampler

    radius = int(scene.radius)
    cx, cy = (int(v) for v in scene.centre_xy)
    crop = Crop(cx - radius, cy - radius, 2 * radius, 2 * radius, (float(cx), float(cy)), "given")
    grid = resampler(crop, screen.angle_deg(2 * radius, scene.cols), size)
    return grid(np.stack([crop.cut(t) for t in truth])), grid.fov_out


def compare_fits(
    truth: tuple[np.ndarray, float],
    recovered: tuple[np.ndarray, float],
    *,
    tr: float,
    n: int,
    sigma_max: float = 2.5,
    seed: int = 0,
) -> dict[str, float]:
    """Simulate ``n`` pRFs from the true apertures, fit them with both (prfmap's engine) and compare.

    ``truth`` and ``recovered`` are (design, FieldOfViewDeg). Returns the median centre and σ
    differences between the two fits and the true-aperture fit's median centre error, degrees.
    """
    # Imported here: the engine loads Keras, which the detection tests do not need.
    from prfmap.engine import Stimulus, fit_prf, predict

    design, fov = truth
    rng = np.random.default_rng(seed)
    ecc = np.sqrt(rng.uniform(0.04, 0.6, n)) * fov / 2
    angle = rng.uniform(-np.pi, np.pi, n)
    params = {"x": ecc * np.cos(angle), "y": ecc * np.sin(angle), "sigma": rng.uniform(0.5, sigma_max, n)}
    data = predict(params, Stimulus(design, fov), tr)
    data = data / data.std(axis=1, keepdims=True) + 0.05 * rng.standard_normal(data.shape)
    a = fit_prf(data, Stimulus(design, fov), tr).params
    b = fit_prf(data, Stimulus(*recovered), tr).params
    centre = np.hypot(a["x"] - b["x"], a["y"] - b["y"])
    sigma = np.abs(a["sigma"] - b["sigma"])
    return {
        "centre": float(np.median(centre)),
        "sigma": float(np.median(sigma)),
        "truth_error": float(np.median(np.hypot(a["x"] - params["x"], a["y"] - params["y"]))),
        "finite": bool(np.isfinite(centre).all() and np.isfinite(sigma).all()),
    }
