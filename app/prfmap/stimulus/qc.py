"""The QC sheet of ``prfmap-stimulus``: a PNG (matplotlib, Agg) and an HTML page beside it (jinja2).

The sheet shows frames of the recording with the detected aperture outlined on them and the written
crop as a dashed box, the fixation mask (the static marks found, widened by the safety margin), the
background colour and threshold, the stimulated share of the field per volume with the blank volumes
marked, and the counts (volumes, distinct apertures, blanks). The same rows make the terminal summary.
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

from prfmap.stimulus.pipeline import StimulusResult  # noqa: E402
from prfmap.stimulus.sources import spread  # noqa: E402

DPI = 100
SHEET_FRAMES = 12
OUTLINE = "#00e5ff"
ENVIRONMENT = Environment(
    loader=PackageLoader("prfmap.stimulus", "templates"),
    autoescape=select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def summary_rows(result: StimulusResult) -> list[tuple[str, str]]:
    """(what, value) rows: the terminal summary, the sheet's text and the HTML table."""
    bg = result.detector.background
    crop = result.crop.scaled(result.source.scale)
    blanks = result.blank_volumes
    fraction = result.fraction
    rows, cols = result.source.source_shape
    fixation_px = int(result.fixation.sum()) * result.source.scale**2
    return [
        ("input", result.source.description),
        ("frames read", f"{result.frames_read} ({cols}×{rows} pixels)"),
        (
            "volumes written",
            f"{len(result.design)}" + (f" of {result.options.tr:g} s" if result.options.tr else ""),
        ),
        (
            "background",
            f"RGB {bg.rgb255} ({'given' if bg.given else f'{bg.share:.0%} of where the frames change'})",
        ),
        ("threshold", f"{bg.threshold * 255:.1f} levels (noise {bg.noise * 255:.1f})"),
        (
            "fixation mask",
            f"{fixation_px} pixels, centre ({crop['CentreX']:g}, {crop['CentreY']:g}) "
            f"from the {crop['CentreFrom']}",
        ),
        ("crop", f"{crop['Width']}×{crop['Height']} pixels at ({crop['Left']}, {crop['Top']})"),
        (
            "field of view",
            f"{result.width_deg:.3f}° wide (FieldOfViewDeg {result.fov_deg:.4f}, pixel centres)",
        ),
        ("written grid", f"{result.design.shape[2]}×{result.design.shape[1]} pixels"),
        ("distinct apertures", str(result.distinct_apertures)),
        ("blank volumes", f"{len(blanks)}" + (f" ({_ranges(blanks)})" if blanks else "")),
        (
            "stimulated share",
            f"{fraction.min():.3f} to {fraction.max():.3f} of the field (median {np.median(fraction):.3f})",
        ),
        ("patches left out", str(result.dropped_patches)),
        ("flooded frames", _flooded(result)),
        *_lossy(result),
    ]


LOSSY_SUFFIXES = (".jpg", ".jpeg", ".webp")
"""Picture formats whose compression rings around sharp edges."""


def _lossy(result: StimulusResult) -> list[tuple[str, str]]:
    """A warning row where the frames are lossily compressed pictures (JPEG)."""
    if not any(Path(s).suffix.lower() in LOSSY_SUFFIXES for s in result.source.sources):
        return []
    return [
        (
            "warning",
            "the frames are lossily compressed (JPEG): ringing around the stimulus edges can widen the "
            "stimulated area (by up to half on thin bars); take PNG screenshots where you can, and check "
            "that the outlines on the QC sheet follow the stimulus edges",
        )
    ]


def _flooded(result: StimulusResult) -> str:
    """The frames that differed from the background almost everywhere, with a warning."""
    frames = result.flooded_frames
    if not frames:
        return "0"
    return (
        f"{len(frames)} (frames {_ranges(frames)}) differ from the background almost everywhere: a "
        "start or instruction screen? They are left out of the crop; check the sequence"
    )


def _ranges(values: list[int]) -> str:
    """1-based ``1-4, 9`` from 0-based indices."""
    out, start = [], None
    for i, v in enumerate(values):
        start = v if start is None else start
        if i + 1 == len(values) or values[i + 1] != v + 1:
            out.append(f"{start + 1}" if start == v else f"{start + 1}-{v + 1}")
            start = None
    return ", ".join(out)


def sheet_volumes(result: StimulusResult, n: int = SHEET_FRAMES) -> list[int]:
    """Volumes to show: evenly spread over the stimulated ones, and the first blank one."""
    blanks = result.blank_volumes
    shown = [v for v in range(len(result.design)) if v not in blanks and v in result.thumbnails]
    picks = [shown[int(i)] for i in spread(len(shown), n - bool(blanks))] if shown else []
    if blanks and blanks[0] in result.thumbnails:
        picks.insert(0, blanks[0])
    return sorted(picks)


def _draw_frame(ax: plt.Axes, result: StimulusResult, volume: int) -> None:
    thumb = result.thumbnails[volume]
    stride = max(1, result.source.shape[1] // thumb.shape[1])
    ax.imshow(thumb, interpolation="nearest")
    mask = result.screen_mask(volume)[::stride, ::stride][: thumb.shape[0], : thumb.shape[1]]
    if mask.max() > 0.5 and mask.min() < 0.5:
        ax.contour(mask, levels=[0.5], colors=OUTLINE, linewidths=1.0)
    crop = result.crop
    ax.add_patch(
        Rectangle(
            (crop.left / stride - 0.5, crop.top / stride - 0.5),
            crop.width / stride,
            crop.height / stride,
            fill=False,
            ls="--",
            lw=0.8,
            ec="yellow",
        )
    )
    ax.set_title(f"volume {volume + 1}: {result.fraction[volume]:.0%}", fontsize=8)
    ax.set_axis_off()


def _draw_fixation(ax: plt.Axes, result: StimulusResult) -> None:
    cx, cy = result.crop.centre
    half = max(12, int(0.06 * result.crop.width))
    rows = slice(max(0, int(cy) - half), int(cy) + half)
    cols = slice(max(0, int(cx) - half), int(cx) + half)
    picture = np.zeros((*result.region[rows, cols].shape, 3))
    picture[result.region[rows, cols]] = (0.35, 0.35, 0.35)
    picture[result.detector.marks[rows, cols]] = (1.0, 0.6, 0.0)
    picture[result.detector.static_core[rows, cols]] = (1.0, 0.1, 0.1)
    ax.imshow(picture, interpolation="nearest", extent=(cols.start, cols.stop, rows.stop, rows.start))
    ax.plot([cx], [cy], "+", color=OUTLINE, ms=10)
    ax.set_title(
        "fixation mask (red: static marks found,\norange: never stimulus; grey: stimulated region)",
        fontsize=8,
    )
    ax.tick_params(labelsize=6)


def _draw_background(ax: plt.Axes, result: StimulusResult) -> None:
    bg = result.detector.background
    ax.imshow(np.broadcast_to(bg.colour, (2, 2, 3)), extent=(0, 1, 0, 1))
    ax.text(
        0.5,
        0.5,
        f"background\nRGB {bg.rgb255}\nthreshold {bg.threshold * 255:.1f}",
        ha="center",
        va="center",
        fontsize=9,
        color="white" if bg.colour.mean() < 0.5 else "black",
    )
    ax.set_axis_off()


def _draw_trace(ax: plt.Axes, result: StimulusResult) -> None:
    volumes = np.arange(1, len(result.design) + 1)
    ax.plot(volumes, result.fraction, color="0.2", lw=1)
    blanks = np.array(result.blank_volumes, dtype=int)
    if blanks.size:
        ax.plot(blanks + 1, result.fraction[blanks], "o", ms=3, color="tab:red", label="blank")
        ax.legend(fontsize=7, loc="upper right")
    ax.set_xlabel("volume", fontsize=8)
    ax.set_ylabel("stimulated share of the field", fontsize=8)
    ax.set_title(f"{result.distinct_apertures} distinct apertures, {len(blanks)} blank volumes", fontsize=9)
    ax.tick_params(labelsize=7)
    ax.set_xlim(0.5, len(volumes) + 0.5)
    ax.set_ylim(bottom=0)


def write_sheet(result: StimulusResult, path: Path) -> Path:
    """Draw the QC sheet into ``path`` (PNG; the caller makes the write atomic)."""
    volumes = sheet_volumes(result)
    ncols = 6 if len(volumes) > 8 else 4
    nrows = max(1, -(-len(volumes) // ncols))
    rows, cols = result.source.shape
    tile = 2.4 * rows / cols
    fig = plt.figure(figsize=(2.4 * ncols, tile * nrows + 2.8))
    grid = fig.add_gridspec(nrows + 1, 4, height_ratios=[tile] * nrows + [2.6], hspace=0.35, wspace=0.25)
    sheet = grid[:nrows, :].subgridspec(nrows, ncols, wspace=0.05, hspace=0.2)
    for i, volume in enumerate(volumes):
        _draw_frame(fig.add_subplot(sheet[i // ncols, i % ncols]), result, volume)
    _draw_fixation(fig.add_subplot(grid[nrows, 0]), result)
    _draw_background(fig.add_subplot(grid[nrows, 1]), result)
    _draw_trace(fig.add_subplot(grid[nrows, 2:]), result)
    fig.suptitle(f"prfmap-stimulus: {result.source.description}", fontsize=10)
    try:
        fig.savefig(
            path,
            dpi=DPI,
            format="png",
            bbox_inches="tight",
            metadata={
                "Title": "prfmap-stimulus QC sheet",
                "Description": "frames with the detected aperture (cyan) and the crop (yellow)",
            },
        )
    finally:
        plt.close(fig)
    return path


def render_page(result: StimulusResult, image_name: str, written: list[str], command: str) -> str:
    """The HTML page beside the sheet (autoescaped)."""
    return ENVIRONMENT.get_template("qc.html.j2").render(
        title="prfmap-stimulus QC",
        image=image_name,
        rows=summary_rows(result),
        written=written,
        command=command,
    )
