"""Figures of the participant report, drawn with matplotlib (Agg) from plain arrays."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from PIL import Image, PngImagePlugin  # noqa: E402

from prfmap.io.atomic import atomic_path  # noqa: E402

DPI = 90


PAD_INCHES = 0.1  # matplotlib's pad around a tight bounding box


def save(fig: plt.Figure, path: Path, metadata: dict[str, str] | None = None) -> Path:
    """Write ``fig`` to ``path`` (PNG), cropped to what it draws, and close it.

    The figure is drawn once and the picture cropped to its tight bounding box plus ``PAD_INCHES``
    (issue 18): matplotlib's ``bbox_inches="tight"`` draws every figure twice, once to measure it.
    Where that box reaches beyond the canvas, matplotlib's own tight saving is used.

    Parameters
    ----------
    fig : matplotlib.figure.Figure
        The figure.
    path : Path
        Where to write it, atomically (temporary name, then renamed); parent folders are created.
    metadata : dict, optional
        PNG text chunks (``Title``, ``Description``: what the figure shows, with units).

    Returns
    -------
    Path
        ``path``.
    """
    try:
        fig.set_dpi(DPI)
        fig.canvas.draw()
        picture = _cropped(fig)
        with atomic_path(path) as tmp:
            if picture is None:
                fig.savefig(tmp, dpi=DPI, bbox_inches="tight", format="png", metadata=metadata)
            else:
                _write_png(picture, tmp, metadata)
    finally:
        plt.close(fig)
    return path


def _cropped(fig: plt.Figure) -> np.ndarray | None:
    """The drawn canvas cropped to the figure's tight box and padded, as ``bbox_inches="tight"`` saves it.

    None where the drawing reaches beyond the canvas (then matplotlib must draw it again on a larger
    one).
    """
    rgba = np.asarray(fig.canvas.buffer_rgba())
    height, width = rgba.shape[:2]
    box = fig.get_tightbbox(fig.canvas.get_renderer())
    left, right = int(np.floor(box.x0 * DPI)), int(np.ceil(box.x1 * DPI))
    top, bottom = height - int(np.ceil(box.y1 * DPI)), height - int(np.floor(box.y0 * DPI))
    if left < -1 or top < -1 or right > width + 1 or bottom > height + 1:
        return None
    left, top, right, bottom = max(left, 0), max(top, 0), min(right, width), min(bottom, height)
    pad = round(PAD_INCHES * DPI)
    out = np.empty((bottom - top + 2 * pad, right - left + 2 * pad, 4), dtype=rgba.dtype)
    out[:] = np.round(np.asarray(matplotlib.colors.to_rgba(fig.get_facecolor())) * 255).astype(rgba.dtype)
    out[pad : pad + bottom - top, pad : pad + right - left] = rgba[top:bottom, left:right]
    return out


def _write_png(rgba: np.ndarray, path: Path, metadata: dict[str, str] | None) -> None:
    """A PNG of ``rgba`` with matplotlib's text chunks (``Software``) and ``metadata``."""
    info = PngImagePlugin.PngInfo()
    for key, value in {
        "Software": f"Matplotlib version{matplotlib.__version__}, https://matplotlib.org/",
        **(metadata or {}),
    }.items():
        info.add_text(key, value)
    Image.fromarray(rgba).save(path, format="png", pnginfo=info, dpi=(DPI, DPI))


def stimulus_montage(design: np.ndarray, fov_deg: float | None, path: Path, n: int = 12) -> Path:
    """Draw ``n`` aperture frames, evenly spaced in time, in visual-field coordinates.

    Parameters
    ----------
    design : ndarray
        Float (frames, rows, cols) in [0, 1], row 0 at the top of the screen.
    fov_deg : float, optional
        Full width of the aperture in degrees; axes are in pixels when ``None``.
    path : Path
        Output PNG.
    n : int
        Frames shown.

    Returns
    -------
    Path
        ``path``.
    """
    design = np.asarray(design)
    frames = np.unique(np.linspace(0, design.shape[0] - 1, min(n, design.shape[0])).astype(int))
    cols = min(6, len(frames))
    rows = int(np.ceil(len(frames) / cols))
    fig, axes = plt.subplots(
        rows, cols, figsize=(1.9 * cols, 2.0 * rows), layout="constrained", squeeze=False
    )
    half = fov_deg / 2 if fov_deg else None
    extent = (-half, half, -half, half) if half else None
    for ax in axes.ravel():
        ax.axis("off")
    for ax, frame in zip(axes.ravel(), frames, strict=False):
        ax.imshow(design[frame], cmap="gray", vmin=0, vmax=1, extent=extent, origin="upper")
        ax.set_title(f"frame {frame}", fontsize=8)
    label = f"field of view {fov_deg:g}° wide" if fov_deg else "field of view unknown"
    fig.suptitle(f"Apertures ({design.shape[0]} frames, {label})", fontsize=10)
    return save(
        fig, path, {"Title": "stimulus apertures", "Description": "aperture (0-1) in the visual field (deg)"}
    )


def _shown(r2: np.ndarray, threshold: float, *arrays: np.ndarray) -> np.ndarray:
    keep = np.isfinite(r2) & (r2 >= threshold)
    for array in arrays:
        keep &= np.isfinite(array)
    return keep


COVERAGE_UNITS = 3000
"""The coverage map sums at most this many pRFs (the best by r²): more change no figure."""


def coverage_image(
    x: np.ndarray, y: np.ndarray, sigma: np.ndarray, order: np.ndarray, lim: float
) -> np.ndarray:
    """The visual-field coverage: the maximum of the units' Gaussian pRFs on a 121 × 121 grid.

    Parameters
    ----------
    x, y, sigma : ndarray
        (units,) parameters in degrees.
    order : ndarray of int
        The units to draw, best first: at most :data:`COVERAGE_UNITS` of them are used.
    lim : float
        The grid spans ``[-lim, lim]`` on both axes (degrees).

    Returns
    -------
    ndarray, shape (121, 121)
        Rows are y (bottom first), columns x.
    """
    top = order[:COVERAGE_UNITS]
    grid = np.linspace(-lim, lim, 121)
    gx, gy = np.meshgrid(grid, grid)
    coverage = np.zeros_like(gx)
    for chunk in np.array_split(top, max(1, top.size // 250)):
        d2 = (gx[..., None] - x[chunk]) ** 2 + (gy[..., None] - y[chunk]) ** 2
        g = np.exp(-d2 / (2 * np.maximum(sigma[chunk], 1e-3) ** 2))
        coverage = np.maximum(coverage, g.max(axis=-1))
    return coverage


def area_sigma_eccentricity(
    groups: dict[str, tuple[np.ndarray, np.ndarray]],
    lines: dict[str, tuple[float, float]],
    colours: dict[str, tuple[float, ...]],
    path: Path,
    shown: str,
) -> Path:
    """PRF size against eccentricity per visual area: the units as dots and each area's line.

    Parameters
    ----------
    groups : dict of str to (ndarray, ndarray)
        Area → eccentricities and sigmas (degrees) of its units shown.
    lines : dict of str to (float, float)
        Area → (slope, intercept) of its fitted line (areas without one: none drawn).
    colours : dict of str to tuple
        Area → RGBA colour.
    path : Path
        Output PNG.
    shown : str
        Which units are drawn, in words for the title.

    Returns
    -------
    Path
    """
    fig, ax = plt.subplots(figsize=(5.5, 4.2), layout="constrained")
    top = max((float(np.max(e)) for e, _ in groups.values() if e.size), default=1.0)
    xs = np.linspace(0, top, 50)
    for name, (ecc, sigma) in groups.items():
        colour = colours[name]
        ax.scatter(ecc, sigma, s=4, color=colour, alpha=0.35)
        line = lines.get(name)
        label = f"{name} ({ecc.size})"
        if line is not None:
            label += f": σ = {line[0]:.3f}·ecc + {line[1]:.3f}"
            ax.plot(xs, line[0] * xs + line[1], color=colour, lw=2)
        ax.plot([], [], color=colour, lw=2, label=label)
    ax.legend(loc="upper left", fontsize=7)
    ax.set_xlabel("eccentricity (deg)")
    ax.set_ylabel("pRF size σ (deg)")
    ax.set_title(f"σ against eccentricity per visual area ({shown})", fontsize=10)
    meta = {
        "Title": "pRF size against eccentricity per visual area",
        "Description": "eccentricity (deg), sigma (deg), one colour per area",
    }
    return save(fig, path, meta)


def group_area_lines(
    lines: dict[str, list[tuple[float, float]]],
    means: dict[str, tuple[float, float]],
    colours: dict[str, tuple[float, ...]],
    radius: float,
    path: Path,
) -> Path:
    """The participants' lines of σ against eccentricity per visual area (thin) and their mean (thick).

    Parameters
    ----------
    lines : dict of str to list of (float, float)
        Area → each participant's (slope, intercept).
    means : dict of str to (float, float)
        Area → the group's mean (slope, intercept).
    colours : dict of str to tuple
        Area → RGBA colour.
    radius : float
        The lines are drawn from eccentricity 0 to this (degrees).
    path : Path
        Output PNG.

    Returns
    -------
    Path
    """
    fig, ax = plt.subplots(figsize=(5.5, 4.2), layout="constrained")
    xs = np.linspace(0, radius, 50)
    for name, own in lines.items():
        colour = colours[name]
        for slope, intercept in own:
            ax.plot(xs, slope * xs + intercept, color=colour, lw=0.8, alpha=0.35)
        slope, intercept = means[name]
        ax.plot(
            xs,
            slope * xs + intercept,
            color=colour,
            lw=2.5,
            label=f"{name} ({len(own)}): σ = {slope:.3f}·ecc + {intercept:.3f}",
        )
    ax.legend(loc="upper left", fontsize=7)
    ax.set_xlabel("eccentricity (deg)")
    ax.set_ylabel("pRF size σ (deg)")
    ax.set_title("σ against eccentricity per visual area: participants and their mean", fontsize=10)
    meta = {
        "Title": "pRF size against eccentricity per visual area, group",
        "Description": "eccentricity (deg), sigma (deg); thin: one participant, thick: the mean",
    }
    return save(fig, path, meta)


def area_coverage(
    groups: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]], fov_deg: float, path: Path
) -> Path:
    """The visual-field coverage of each visual area, side by side.

    Parameters
    ----------
    groups : dict of str to tuple of ndarray
        Area → x, y, sigma (degrees) and r² of its units shown.
    fov_deg : float
        Full width of the stimulated field (drawn dashed).
    path : Path
        Output PNG.

    Returns
    -------
    Path
    """
    half = fov_deg / 2
    lim = 1.15 * half
    fig, axes = plt.subplots(1, len(groups), figsize=(2.6 * len(groups) + 0.8, 3.0), layout="constrained")
    axes = np.atleast_1d(axes)
    im = None
    for ax, (name, (x, y, sigma, r2)) in zip(axes, groups.items(), strict=True):
        coverage = coverage_image(x, y, sigma, np.argsort(r2)[::-1], lim)
        im = ax.imshow(coverage, extent=(-lim, lim, -lim, lim), origin="lower", cmap="magma", vmin=0, vmax=1)
        ax.add_patch(plt.Rectangle((-half, -half), 2 * half, 2 * half, fill=False, ls="--", ec="0.6"))
        ax.set_title(f"{name} ({x.size} units)", fontsize=9)
        ax.set_xlabel("x (deg)")
        ax.set_aspect("equal")
    axes[0].set_ylabel("y (deg)")
    if im is not None:
        fig.colorbar(im, ax=list(axes), label="coverage: max pRF (fraction)", shrink=0.8)
    meta = {
        "Title": "visual-field coverage per visual area",
        "Description": "x, y (deg); coverage (fraction), one panel per area",
    }
    return save(fig, path, meta)


def visual_field_coverage(
    x: np.ndarray,
    y: np.ndarray,
    sigma: np.ndarray,
    r2: np.ndarray,
    threshold: float,
    fov_deg: float | None,
    path: Path,
    shown: str | None = None,
) -> Path:
    """PRF centres coloured by r², and the coverage (the maximum of the pRF Gaussians).

    Parameters
    ----------
    x, y, sigma, r2 : ndarray
        (units,) parameters in degrees (x right, y up).
    threshold : float
        Units with r² below it are left out.
    fov_deg : float, optional
        Full width of the aperture; drawn as the stimulated square.
    path : Path
        Output PNG.
    shown : str, optional
        Which units are drawn, in words for the title (default ``"r² ≥ <threshold>"``).

    Returns
    -------
    Path
        ``path``.
    """
    keep = _shown(r2, threshold, x, y, sigma)
    idx = np.flatnonzero(keep)
    half = fov_deg / 2 if fov_deg else (float(np.nanmax(np.abs([x[idx], y[idx]]))) if idx.size else 10)
    lim = 1.15 * half
    fig, (ax0, ax1) = plt.subplots(1, 2, figsize=(9, 4.2), layout="constrained")
    for ax in (ax0, ax1):
        ax.set_xlim(-lim, lim)
        ax.set_ylim(-lim, lim)
        ax.set_aspect("equal")
        ax.axhline(0, color="0.7", lw=0.5)
        ax.axvline(0, color="0.7", lw=0.5)
        ax.set_xlabel("x (deg)")
        ax.set_ylabel("y (deg)")
        if fov_deg:
            ax.add_patch(plt.Rectangle((-half, -half), 2 * half, 2 * half, fill=False, ls="--", ec="0.4"))
    if idx.size:
        order = idx[np.argsort(r2[idx])]
        sc = ax0.scatter(x[order], y[order], c=r2[order], s=4, cmap="viridis", vmin=threshold, vmax=1)
        fig.colorbar(sc, ax=ax0, label="r² (fraction)", shrink=0.8)
        coverage = coverage_image(x, y, sigma, idx[np.argsort(r2[idx])[::-1]], lim)
        im = ax1.imshow(coverage, extent=(-lim, lim, -lim, lim), origin="lower", cmap="magma", vmin=0, vmax=1)
        fig.colorbar(im, ax=ax1, label="coverage: max pRF (fraction)", shrink=0.8)
    else:
        for ax in (ax0, ax1):
            ax.text(0, 0, f"no unit with {shown or f'r² ≥ {threshold:g}'}", ha="center", va="center")
    ax0.set_title(f"pRF centres ({idx.size} units, {shown or f'r² ≥ {threshold:g}'})", fontsize=10)
    ax1.set_title("Visual-field coverage", fontsize=10)
    return save(
        fig,
        path,
        {"Title": "visual-field coverage", "Description": "x, y (deg); r² (fraction); coverage (fraction)"},
    )


def fit_line(xv: np.ndarray, yv: np.ndarray, weights: np.ndarray) -> tuple[float, float] | None:
    """Weighted least-squares line ``y = slope * x + intercept``.

    Parameters
    ----------
    xv, yv, weights : ndarray
        Points and their non-negative weights.

    Returns
    -------
    tuple of float, or None
        ``(slope, intercept)``; ``None`` with fewer than two distinct x values.
    """
    if xv.size < 2 or np.ptp(xv) == 0:
        return None
    w = np.sqrt(np.clip(weights, 0, None))
    a = np.stack([xv, np.ones_like(xv)], axis=1) * w[:, None]
    slope, intercept = np.linalg.lstsq(a, yv * w, rcond=None)[0]
    return float(slope), float(intercept)


def eccentricity_sigma(
    ecc: np.ndarray, sigma: np.ndarray, r2: np.ndarray, threshold: float, path: Path, shown: str | None = None
) -> tuple[Path, tuple[float, float] | None]:
    """Scatter of sigma against eccentricity with an r²-weighted fitted line.

    Parameters
    ----------
    ecc, sigma, r2 : ndarray
        (units,) arrays.
    threshold : float
        Units with r² below it are left out.
    path : Path
        Output PNG.
    shown : str, optional
        Which units are drawn, in words for the title (default ``"r² ≥ <threshold>"``).

    Returns
    -------
    tuple
        ``path`` and the line's ``(slope, intercept)`` (``None`` when it cannot be fitted).
    """
    keep = _shown(r2, threshold, ecc, sigma)
    e, s, w = ecc[keep], sigma[keep], r2[keep]
    line = fit_line(e, s, w)
    fig, ax = plt.subplots(figsize=(5, 4), layout="constrained")
    sc = ax.scatter(e, s, s=4, c=w, cmap="viridis", vmin=threshold, vmax=1, alpha=0.7)
    fig.colorbar(sc, ax=ax, label="r² (fraction)", shrink=0.8)
    if line is not None:
        xs = np.linspace(0, float(e.max()), 50)
        ax.plot(
            xs,
            line[0] * xs + line[1],
            color="crimson",
            label=f"σ = {line[0]:.3f}·ecc + {line[1]:.3f}",
        )
        ax.legend(loc="upper left", fontsize=8)
    ax.set_xlabel("eccentricity (deg)")
    ax.set_ylabel("pRF size σ (deg)")
    ax.set_title(f"Eccentricity vs σ ({e.size} units, {shown or f'r² ≥ {threshold:g}'})", fontsize=10)
    meta = {
        "Title": "pRF size against eccentricity",
        "Description": "eccentricity (deg), sigma (deg), r² (fraction)",
    }
    return save(fig, path, meta), line


def r2_histogram(
    r2: np.ndarray,
    threshold: float,
    path: Path,
    others: dict[str, np.ndarray] | None = None,
    doubtful: int | None = None,
) -> Path:
    """Histogram of r² with the threshold marked.

    Parameters
    ----------
    r2 : ndarray
        (units,) variance explained.
    threshold : float
        Drawn as a vertical line.
    path : Path
        Output PNG.
    others : dict, optional
        Other r²-type maps (held-out data) drawn as outlines.
    doubtful : int, optional
        Of the units at or above the threshold, those flagged doubtful (said in the title).

    Returns
    -------
    Path
        ``path``.
    """
    values = r2[np.isfinite(r2)]
    fig, ax = plt.subplots(figsize=(5, 3.5), layout="constrained")
    low = min(
        [0.0, float(values.min(initial=0))]
        + [float(np.nanmin(v, initial=0)) for v in (others or {}).values()]
    )
    bins = np.linspace(max(low, -1.0), 1, 51)
    ax.hist(values, bins=bins, color="steelblue", label="r² (fitted data)")
    for label, other in (others or {}).items():
        ax.hist(
            other[np.isfinite(other)], bins=bins, histtype="step", lw=1.5, label=f"{label} (held-out data)"
        )
    ax.axvline(threshold, color="crimson", ls="--", label=f"threshold {threshold:g}")
    ax.set_xlabel("variance explained (fraction)")
    ax.set_ylabel("units")
    above = int(np.sum(values >= threshold))
    title = f"r² ({above} of {values.size} units ≥ {threshold:g}"
    if doubtful is not None:
        title += f", {doubtful} of them doubtful"
    ax.set_title(title + ")", fontsize=10)
    ax.legend(fontsize=8)
    return save(
        fig, path, {"Title": "r² histogram", "Description": "variance explained (fraction), units (count)"}
    )


def example_units(r2: np.ndarray, threshold: float = 0.0) -> dict[str, int]:
    """Pick the best unit, a median one and a poor one by r².

    Parameters
    ----------
    r2 : ndarray
        (units,) variance explained; NaN units are skipped.
    threshold : float
        The median unit is taken among units with r² at or above it (among all units when none
        is).

    Returns
    -------
    dict of str to int
        ``{"best": i, "median": j, "poor": k}``, ``poor`` at the 10th percentile of all units;
        empty when no unit has a finite r².
    """
    idx = np.flatnonzero(np.isfinite(r2))
    if idx.size == 0:
        return {}
    order = idx[np.argsort(r2[idx], kind="stable")]
    good = order[r2[order] >= threshold]
    middle = good if good.size else order
    return {
        "best": int(order[-1]),
        "median": int(middle[middle.size // 2]),
        "poor": int(order[int(0.1 * (order.size - 1))]),
    }


def timecourses(
    data: np.ndarray,
    predictions: np.ndarray,
    r2: np.ndarray,
    tr: float | None,
    path: Path,
    threshold: float = 0.0,
) -> tuple[Path, dict[str, int]]:
    """Data and fitted prediction of the best, the median and a poor unit.

    Parameters
    ----------
    data, predictions : ndarray
        (units, frames) preprocessed data and the model's predictions.
    r2 : ndarray
        (units,) variance explained, used to pick the units.
    tr : float, optional
        Repetition time; the axis is in frames when ``None``.
    path : Path
        Output PNG.
    threshold : float
        r² threshold of the report (see ``example_units``).

    Returns
    -------
    tuple
        ``path`` and the units shown (``example_units``).
    """
    picks = example_units(r2, threshold)
    fig, axes = plt.subplots(len(picks), 1, figsize=(9, 2.0 * len(picks)), sharex=True, squeeze=False)
    frames = data.shape[1]
    t = np.arange(frames) * (tr or 1.0)
    for ax, (name, unit) in zip(axes[:, 0], picks.items(), strict=True):
        ax.plot(t, data[unit], color="0.3", lw=0.8, label="data")
        ax.plot(t, predictions[unit], color="crimson", lw=1.2, label="model")
        ax.set_title(f"{name}: unit {unit}, r² = {r2[unit]:.2f}", fontsize=9, loc="left")
        ax.set_ylabel("BOLD (% signal change)", fontsize=8)
    axes[0, 0].legend(loc="upper right", fontsize=8)
    axes[-1, 0].set_xlabel("time (s)" if tr else "frame")
    meta = {"Title": "example time courses", "Description": "BOLD (% signal change) against time (s)"}
    return save(fig, path, meta), picks
