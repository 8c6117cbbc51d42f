"""A fit section's results per visual area: the table of ``desc-areas_summary.tsv`` and its figures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from prfmap.derivatives.areas import MIN_LINE_UNITS, area_colours, area_summary, shown_units
from prfmap.io.atlases import ATLASES
from prfmap.report import figures
from prfmap.report.atlas import Atlas
from prfmap.report.html import Figure

AREA_HEADER = (
    "area",
    "units",
    "shown",
    "median r²",
    "median cvr2",
    "median σ (deg)",
    "σ slope ± se",
    "σ intercept ± se (deg)",
)
FIGURE_AREAS = 4
"""The figures show at most this many areas (the first of the atlas with enough units shown)."""


def report_atlas(areas: Any) -> Atlas:
    """The report's :class:`~prfmap.report.atlas.Atlas` (borders on the maps) of a fit's areas.

    Parameters
    ----------
    areas : UnitAreas
        The fit's areas.

    Returns
    -------
    Atlas
    """
    atlas = areas.labels.atlas
    return Atlas(dict(areas.labels.hemis), atlas.areas, f"{atlas.title}, {areas.labels.how}", atlas.name)


def _number(value: float, digits: int = 3) -> str:
    return "—" if not np.isfinite(value) else f"{value + 0.0:.{digits}f}".replace("-0.000", "0.000")


def _pm(value: float, se: float) -> str:
    return "—" if not np.isfinite(value) else f"{value:.3f} ± {se:.3f}"


def area_results(ctx: Any, maps: dict[str, np.ndarray], fig: Any, shown_words: str) -> dict[str, Any]:
    """The section's values of its per-area results (``area_rows``, ``area_figures``, ``area_note``).

    Parameters
    ----------
    ctx : ReportContext
        The fit (its ``areas``, ``r2_threshold``, ``fov_deg``).
    maps : dict of str to ndarray
        Its maps, with ``eccentricity``.
    fig : callable
        ``fig(name) -> (path, src)`` of a figure of the section.
    shown_words : str
        Which units the figures show, in words.

    Returns
    -------
    dict
    """
    header = list(AREA_HEADER)
    if ctx.areas is None:
        note = ctx.areas_note or "No visual areas for these maps."
        return {"area_rows": [], "area_header": header, "area_figures": [], "area_note": note}
    if not ctx.fov_deg or not all(k in maps for k in ("r2", "eccentricity", "sigma")):
        return {
            "area_rows": [],
            "area_header": header,
            "area_figures": [],
            "area_note": f"{ctx.areas_note} No results per area: the maps lack r², eccentricity or σ.",
        }
    atlas = ATLASES[ctx.areas.labels.atlas.name]
    codes = ctx.areas.codes
    rows = area_summary(maps, codes, atlas.name, ctx.r2_threshold, ctx.fov_deg)
    table = [
        [
            r["area"],
            r["units"],
            r["units_shown"],
            _number(r["median_r2"]),
            _number(r["median_cvr2"]),
            _number(r["median_sigma"]),
            _pm(r["sigma_slope"], r["sigma_slope_se"]),
            _pm(r["sigma_intercept"], r["sigma_intercept_se"]),
        ]
        for r in rows
    ]
    drawn = [r for r in rows if r["units_shown"] >= MIN_LINE_UNITS][:FIGURE_AREAS]
    figures_out = _figures(ctx, maps, codes, atlas, drawn, fig, shown_words) if drawn else []
    note = (
        f"{ctx.areas_note} Both hemispheres together; median r² and cvr2 over the area's fitted units, "
        f"the other columns over the units shown ({shown_words}, eccentricity and σ within the "
        f"stimulated radius {ctx.fov_deg / 2:g}°); σ lines are r²-weighted least squares with "
        f"heteroskedasticity-robust (HC1) standard errors, from {MIN_LINE_UNITS} units. The same "
        "table is written as desc-areas_summary.tsv beside the maps."
    )
    if not drawn:
        note += f" No area has {MIN_LINE_UNITS} units shown, so no figure per area is drawn."
    return {"area_rows": table, "area_header": header, "area_figures": figures_out, "area_note": note}


def _figures(
    ctx: Any,
    maps: dict[str, np.ndarray],
    codes: np.ndarray,
    atlas: Any,
    drawn: list[dict[str, Any]],
    fig: Any,
    shown_words: str,
) -> list[Figure]:
    """σ against eccentricity and the coverage of the areas ``drawn``."""
    region_codes = atlas.region_codes()
    radius = ctx.fov_deg / 2
    r2, ecc, sigma = maps["r2"], maps["eccentricity"], maps["sigma"]
    shown = shown_units(maps, ctx.r2_threshold, radius)
    palette = area_colours(len(region_codes))
    colour = {name: palette[k] for k, name in enumerate(region_codes)}
    lines: dict[str, tuple[float, float]] = {}
    groups: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    fields: dict[str, tuple[np.ndarray, ...]] = {}
    for row in drawn:
        use = shown & np.isin(codes, region_codes[row["area"]])
        groups[row["area"]] = (ecc[use], sigma[use])
        if np.isfinite(row["sigma_slope"]):
            lines[row["area"]] = (row["sigma_slope"], row["sigma_intercept"])
        if "x" in maps and "y" in maps:
            fields[row["area"]] = (maps["x"][use], maps["y"][use], sigma[use], r2[use])
    names = ", ".join(groups)
    path, src = fig("areas-ecc-sigma")
    figures.area_sigma_eccentricity(groups, lines, colour, Path(path), shown_words)
    out = [
        Figure(
            src,
            "pRF size σ (deg) against eccentricity (deg) per visual area",
            f"σ against eccentricity in {names}: the units shown of each area and its r²-weighted line.",
        )
    ]
    if fields:
        path, src = fig("areas-coverage")
        figures.area_coverage(fields, ctx.fov_deg, Path(path))
        out.append(
            Figure(
                src,
                "visual-field coverage (fraction) of each visual area, x and y in deg",
                f"Coverage of {names}: the maximum over each area's Gaussian pRFs (units shown); dashed: "
                "the stimulated field.",
            )
        )
    return out
