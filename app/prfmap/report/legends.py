"""How each map is coloured, and the legends that explain it.

Colour scales set from the data, units on every colour bar, and a hemifield colour wheel for polar angle.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import colormaps  # noqa: E402
from matplotlib.colors import Colormap, ListedColormap, Normalize  # noqa: E402
from matplotlib.patches import Patch  # noqa: E402
from matplotlib.ticker import FormatStrFormatter, MaxNLocator  # noqa: E402

from prfmap.engine import catalog  # noqa: E402

MAIN_MAPS = ("polarangle", "eccentricity", "sigma")
TITLES = {
    "polarangle": "polar angle",
    "eccentricity": "eccentricity",
    "sigma": "pRF size σ",
    "r2": "r²",
    "cvr2": "cross-validated r²",
    "status": "fit status",
    "centrese": "standard error of the pRF centre",
}
UNIT_TEXT = {
    "deg": "deg",
    "1": "fraction",
    "%": "% signal change",
    "bits": "sum of bits",
    "code": "model code",
}
PLAIN_MAPS = ("x", "y", "amplitude", "baseline", "mask")
POLAR_CMAP = "hsv"
CATEGORY_CMAPS = ((10, "tab10"), (20, "tab20"))
"""Qualitative colour maps by their number of colours: category ``i`` is drawn in colour ``i``."""


def is_r2(label: str) -> bool:
    """Whether ``label`` is a variance-explained map (``r2``, ``cvr2``, ...)."""
    return label.endswith("r2")


def map_labels(maps: dict[str, np.ndarray]) -> list[str]:
    """The maps to draw, in reading order.

    Polar angle, eccentricity, σ, every r²-type map, then model extras (``n``, surround sizes, ...); centres,
    amplitude and baseline are not drawn.
    """
    r2s = sorted((k for k in maps if is_r2(k)), key=lambda k: (k != "r2", k))
    extras = [k for k in maps if k not in MAIN_MAPS and not is_r2(k) and k not in PLAIN_MAPS]
    return [k for k in MAIN_MAPS if k in maps] + r2s + extras


def units(label: str) -> str:
    """Units of a map label as the catalogue (and so its sidecar) states them (``deg``, ``1``, ``%``)."""
    if is_r2(label):
        return "1"
    parameter = catalog.parameter_by_label(label)
    return parameter.units if parameter is not None else "1"


@dataclass(frozen=True)
class MapStyle:
    """The colour scale of one map.

    Attributes
    ----------
    label, title, units : str
        BIDS label, words for it, and its units.
    cmap : str
        matplotlib colour map.
    vmin, vmax : float
        The scale.
    cyclic : bool
        Polar angle: a colour wheel legend instead of a bar.
    scale_note : str
        How the scale was chosen, for the caption.
    categories : tuple of (int, str)
        A categorical map (the status bits): the codes present, each drawn in its own colour and
        named in a legend instead of a colour bar; empty for a continuous map.
    slots : tuple of int
        The colour of each category (its value on the scale); empty: category ``i`` in colour ``i``.
    """

    label: str
    title: str
    units: str
    cmap: str
    vmin: float
    vmax: float
    cyclic: bool = False
    scale_note: str = ""
    categories: tuple[tuple[int, str], ...] = ()
    slots: tuple[int, ...] = ()

    def slot(self, i: int) -> int:
        """The colour (value on the scale) of category ``i``."""
        return self.slots[i] if self.slots else i

    @property
    def bar_label(self) -> str:
        """Colour-bar label with units, e.g. ``eccentricity (deg)``."""
        return f"{self.title} ({UNIT_TEXT.get(self.units, self.units)})"


def nice_ceiling(value: float) -> float:
    """Round ``value`` up to a round number.

    1, 1.5, 2, 2.5, 3, 4, 5, 6 or 8 times a power of ten (0.43 → 0.5, 2.3 → 2.5, 7.1 → 8).
    """
    if not np.isfinite(value) or value <= 0:
        return 1.0
    power = 10.0 ** math.floor(math.log10(value))
    for step in (1.0, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0):
        if value <= step * power * (1 + 1e-9):
            return float(round(step * power, 12))
    return 10 * power


def style_for(
    label: str, values: np.ndarray, fov_deg: float | None, r2: np.ndarray | None = None
) -> MapStyle:
    """The colour scale of a map, set from the values shown.

    Parameters
    ----------
    label : str
        BIDS label.
    values : ndarray
        The values that will be drawn (finite ones are used).
    fov_deg : float, optional
        Full width of the stimulated field: eccentricity spans its radius, σ is capped by it.
    r2 : ndarray, optional
        The r² of each value: scales of sizes and model extras then follow the better half of the
        units shown (r² at or above their median), not the scattered weak fits that pass the
        threshold by chance.

    Returns
    -------
    MapStyle
    """
    if label == "status":
        return status_style(values)
    title = TITLES.get(label, label)
    shown = np.asarray(values, dtype=np.float64)
    if r2 is not None and label != "polarangle" and not is_r2(label):
        r2 = np.asarray(r2, dtype=np.float64)
        finite = np.isfinite(r2) & np.isfinite(shown)
        if finite.any():
            shown = shown[finite & (r2 >= np.median(r2[finite]))]
    shown = shown[np.isfinite(shown)]
    unit = units(label)
    if label == "polarangle":
        return MapStyle(label, TITLES[label], "deg", POLAR_CMAP, -180.0, 180.0, True, "full circle")
    radius = fov_deg / 2 if fov_deg else None
    if label == "eccentricity":
        if radius:
            return MapStyle(
                label, title, unit, "turbo", 0.0, radius, False, f"0 to the stimulated radius ({radius:g}°)"
            )
        top = nice_ceiling(float(np.percentile(shown, 98)) if shown.size else 1.0)
        return MapStyle(label, title, unit, "turbo", 0.0, top, False, "0 to the 98th percentile")
    if label == "sigma" or unit == "deg":
        top = nice_ceiling(float(np.percentile(shown, 95)) if shown.size else 1.0)
        note = "0 to the 95th percentile of the units shown" + (
            " with the better half of r²" if r2 is not None else ""
        )
        if radius and top > radius:
            top, note = radius, f"0 to the stimulated radius ({radius:g}°)"
        return MapStyle(label, title, unit, "viridis", 0.0, top, False, note)
    if is_r2(label):
        top = min(1.0, nice_ceiling(float(np.percentile(shown, 99)) if shown.size else 1.0))
        return MapStyle(label, title, unit, "inferno", 0.0, top, False, "0 to the 99th percentile")
    low, high = np.percentile(shown, [2, 98]) if shown.size else (0.0, 1.0)
    high = high if high > low else low + 1.0
    return MapStyle(label, title, unit, "cividis", float(low), float(high), False, "2nd to 98th percentile")


def centre_se_style(values: np.ndarray, fov_deg: float | None) -> MapStyle:
    """The colour scale of the centre's standard-error map (``max(se_x, se_y)``, degrees).

    Parameters
    ----------
    values : ndarray
        The standard errors that set the scale: the units not flagged doubtful (finite ones). The map
        also draws the doubtful units, whose errors are often far larger, at its top.
    fov_deg : float, optional
        Full width of the stimulated field: the scale stops where the ``uncertain`` flag starts, a
        share of its radius (``catalog.CENTRE_SE_LIMIT``).

    Returns
    -------
    MapStyle
        0 to the 95th percentile of the finite values (rounded up), at most the ``uncertain`` flag's
        limit: the doubtful units' errors do not darken every other unit.
    """
    shown = np.asarray(values, dtype=np.float64)
    shown = shown[np.isfinite(shown)]
    top = nice_ceiling(float(np.percentile(shown, 95)) if shown.size else 1.0)
    note = "0 to the 95th percentile of the units not flagged doubtful"
    limit = catalog.CENTRE_SE_LIMIT * fov_deg / 2 if fov_deg else None
    if limit and top > limit:
        share = catalog.share_of(catalog.CENTRE_SE_LIMIT)
        top, note = limit, f"0 to the uncertain flag's limit, {share}the stimulated radius ({limit:g}°)"
    note += "; larger and infinite standard errors (a singular information matrix) at its top"
    return MapStyle("centrese", TITLES["centrese"], "deg", "magma", 0.0, top, False, note)


def status_label(code: int) -> str:
    """A status code in words.

    The code and the names of its bits (``catalog.STATUS_FLAGS``), e.g.
    ``"130: grid_only + size_at_floor"``; doubtful estimates (``catalog.DOUBTFUL``) say so.
    """
    if code == 0:
        return "0: no flag (refined, converged, in range)"
    names = [name for bit, (name, _) in sorted(catalog.STATUS_FLAGS.items()) if code & bit]
    return f"{code}: {' + '.join(names)}" + (" (doubtful)" if code & catalog.DOUBTFUL_BITS else "")


def status_style(values: np.ndarray) -> MapStyle:
    """The categorical style of a status map: one colour per combination of bits present.

    Parameters
    ----------
    values : ndarray
        The status codes that will be drawn (NaN: not drawn).

    Returns
    -------
    MapStyle
        With ``categories`` set, most frequent combination first; beyond the colours available
        the rarest combinations are left undrawn, and the scale note says how many. A combination
        has the same colour in every map where no other combination takes it first
        (:func:`status_slots`), so that participants' maps compare at a glance.
    """
    codes = catalog.status_codes(np.asarray(values, dtype=np.float64)[np.isfinite(values)])
    present, counts = np.unique(codes, return_counts=True)
    order = present[np.argsort(-counts, kind="stable")]
    colours, cmap = CATEGORY_CMAPS[-1]
    kept = order[:colours]
    note = "one colour per combination of status bits present"
    if order.size > kept.size:
        note += f" ({order.size - kept.size} rarer combinations not drawn)"
    categories = tuple((int(code), status_label(int(code))) for code in kept)
    slots = status_slots([code for code, _ in categories], colours)
    return MapStyle(
        "status",
        TITLES["status"],
        "bits",
        cmap,
        -0.5,
        colours - 0.5,
        False,
        note,
        categories,
        tuple(slots[code] for code, _ in categories),
    )


def status_slots(codes: Sequence[int], colours: int) -> dict[int, int]:
    """A colour for each status code that depends on the code, not on the map.

    Each code takes the colour its value hashes to, or, when a smaller code of the same map took
    it, the next free one.

    Parameters
    ----------
    codes : sequence of int
        Distinct codes, at most ``colours`` of them.
    colours : int
        Colours of the palette.

    Returns
    -------
    dict of int to int
    """
    slots: dict[int, int] = {}
    for code in sorted(codes):
        slot = int(hashlib.blake2b(str(code).encode(), digest_size=4).hexdigest(), 16) % colours
        while slot in slots.values():
            slot = (slot + 1) % colours
        slots[code] = slot
    return slots


def category_index(style: MapStyle, values: np.ndarray) -> np.ndarray:
    """The colour index of each value of a categorical map (NaN where it is not drawn)."""
    values = np.asarray(values, dtype=np.float64)
    index = np.full(values.shape, np.nan)
    codes = catalog.status_codes(values)
    for i, (code, _) in enumerate(style.categories):
        index[np.isfinite(values) & (codes == code)] = style.slot(i)
    return index


def draw_category_legend(ax: plt.Axes, style: MapStyle, threshold_text: str = "") -> Any:
    """A legend naming each category of a categorical map beside its colour.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
        Where to draw it (axes hidden).
    style : MapStyle
        A style with ``categories``.
    threshold_text : str
        What is shown, under the legend's title.

    Returns
    -------
    matplotlib.legend.Legend
    """
    cmap, norm = colormaps[style.cmap], Normalize(style.vmin, style.vmax)
    handles = [
        Patch(facecolor=cmap(norm(style.slot(i))), label=name) for i, (_, name) in enumerate(style.categories)
    ]
    ax.axis("off")
    title = style.bar_label + (f"\n{threshold_text}" if threshold_text else "")
    # Anchored at its left edge: long labels grow to the right, into the figure's spare room, never
    # back over the brains drawn left of it.
    return ax.legend(
        handles=handles,
        loc="center left",
        bbox_to_anchor=(0.0, 0.5),
        fontsize=7,
        title=title,
        title_fontsize=8,
        frameon=False,
        alignment="left",
    )


def hemifield_cmap(style: MapStyle, hemi: str) -> tuple[Colormap, float, float, np.ndarray | None]:
    """The colour map and range to draw a hemisphere's values with, seam-free.

    Polar angle wraps at ±180°, the left horizontal meridian, which the right hemisphere
    represents; interpolating across it would paint a false colour along that meridian. For the
    right hemisphere the angles are moved to [0, 360) and the colour map turned by half a circle,
    so every angle keeps its colour.

    Parameters
    ----------
    style : MapStyle
        The map's style.
    hemi : str
        ``L`` or ``R``.

    Returns
    -------
    tuple
        Colour map, vmin, vmax and the shift to add to the values before drawing (``None``:
        draw them as they are).
    """
    base = colormaps[style.cmap]
    if not style.cyclic or hemi != "R":
        return base, style.vmin, style.vmax, None
    turned = ListedColormap(base(np.mod(np.linspace(0, 1, 512) + 0.5, 1.0)))
    return turned, 0.0, 360.0, np.array(360.0)


def draw_colour_bar(
    cax: plt.Axes, style: MapStyle, threshold_text: str = "", *, label_from_left: bool = False
) -> None:
    """A horizontal colour bar with the map's units.

    Parameters
    ----------
    cax : matplotlib.axes.Axes
        Where to draw it.
    style : MapStyle
        The scale.
    threshold_text : str
        Appended to the label (e.g. ``"r² ≥ 0.1"``).
    label_from_left : bool
        Start the label at the bar's left end (it runs right, into the space beside the figure)
        rather than centre it under the bar, which a long label overruns on both sides.
    """
    mappable = plt.cm.ScalarMappable(norm=Normalize(style.vmin, style.vmax), cmap=style.cmap)
    bar = plt.colorbar(mappable, cax=cax, orientation="horizontal")
    label = style.bar_label + (f"\n{threshold_text}" if threshold_text else "")
    bar.set_label(label, fontsize=9)
    if label_from_left:
        bar.ax.xaxis.label.set_x(0.0)  # in axes fraction; matplotlib places y below the ticks
        bar.ax.xaxis.label.set_horizontalalignment("left")
        bar.ax.xaxis.label.set_multialignment("left")
    bar.locator = MaxNLocator(nbins=4)  # small scales (0.0025 steps) must not run their labels together
    bar.formatter = FormatStrFormatter("%g")
    bar.update_ticks()
    bar.ax.tick_params(labelsize=8)


def draw_colour_wheel(ax: plt.Axes, style: MapStyle, hemis: tuple[str, ...] = ("L", "R")) -> None:
    """A polar-angle colour wheel.

    The visual field as seen by the participant, each hemifield bright where a hemisphere drawn represents it
    (left hemisphere: right field, and the reverse).

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    Where to draw it (made square, axes hidden).
    style : MapStyle
    The polar-angle style.
    hemis : tuple of str
    The hemispheres drawn.
    """
    n = 201
    grid = np.linspace(-1, 1, n)
    gx, gy = np.meshgrid(grid, grid[::-1])
    radius = np.hypot(gx, gy)
    angle = np.degrees(np.arctan2(gy, gx))
    rgba = colormaps[style.cmap](Normalize(style.vmin, style.vmax)(angle))
    right_field, left_field = gx >= 0, gx < 0
    bright = np.zeros_like(radius, dtype=bool)
    if "L" in hemis:
        bright |= right_field
    if "R" in hemis:
        bright |= left_field
    rgba[..., 3] = np.where(radius <= 1, np.where(bright, 1.0, 0.25), 0.0)
    rgba[(radius < 0.35) & (radius <= 1), 3] *= 0.0
    ax.imshow(rgba, extent=(-1, 1, -1, 1), interpolation="bilinear")
    ax.plot([0, 0], [-1, 1], color="k", lw=0.6)
    ax.set_xlim(-1.9, 1.9)
    ax.set_ylim(-1.45, 1.45)
    ax.set_aspect("equal")
    ax.axis("off")
    for text, xy, ha in (
        ("+90° UVM", (0, 1.08), "center"),
        ("−90° LVM", (0, -1.2), "center"),
        ("0°", (1.06, 0), "left"),
        ("180°", (-1.06, 0), "right"),
    ):
        ax.text(*xy, text, ha=ha, va="center", fontsize=7)
    sides = [("LH", 0.55) if "L" in hemis else None, ("RH", -0.55) if "R" in hemis else None]
    for side in filter(None, sides):
        ax.text(side[1], 0, side[0], ha="center", va="center", fontsize=8, weight="bold")
    ax.set_title(f"{style.bar_label}\nvisual field, x right, y up", fontsize=8)
