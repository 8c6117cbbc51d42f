"""The group-level HTML report: ``group.html`` with its figures under ``group/figures/``.

It takes plain data (:class:`GroupFit`, :class:`ParticipantRow`), never the group level's own
types, so that ``prfmap.group`` can import it without a cycle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np

from prfmap import __version__
from prfmap.derivatives.areas import area_colours
from prfmap.engine import catalog
from prfmap.report import figures
from prfmap.report.atlas import Atlas, visual_areas
from prfmap.report.html import Figure, render_page
from prfmap.report.legends import MapStyle, is_r2, map_labels, style_for
from prfmap.report.meshes import find_meshes
from prfmap.report.surface import occipital_patch, patch_figure, views_figure

STATISTIC_WORDS = {
    "polarangle": "circular mean",
    "eccentricity": "median",
    "sigma": "median",
    "r2": "mean",
}
IVW_STAT = "ivwmean"
IVW_NOTE = (
    "Inverse-variance-weighted maps (ivwmean, beside each median): each participant's estimate weighted "
    "by 1/se² from its standard-error map, where it passes the threshold and is not doubtful; polar angle "
    "is that of the weighted mean centre (x, y), not an average of angles. A fixed-effect mean: the most "
    "precise participants weigh most; the median beside it is the robust summary."
)
COVERAGE_LEVEL = 0.5
COVERAGE_GRID = 61


@dataclass(frozen=True)
class ParticipantRow:
    """One participant's line in the group report's summary table.

    Attributes
    ----------
    subject : str
        Label without ``sub-``.
    sessions : tuple of str
        Sessions combined (empty without sessions).
    report : str or None
        Link to the participant's report, relative to ``group.html``.
    units : int
        Units with a finite r².
    units_good : int
        Units with r² at or above the threshold and not flagged doubtful (the participant report's
        units shown).
    medians : dict of str to float
        Median of each r²-type map over the units at or above the threshold.
    coverage : float or None
        Fraction of the stimulated field covered (see :func:`field_coverage`).
    """

    subject: str
    sessions: tuple[str, ...]
    report: str | None
    units: int
    units_good: int
    medians: dict[str, float] = field(default_factory=dict)
    coverage: float | None = None


def field_coverage(x: np.ndarray, y: np.ndarray, sigma: np.ndarray, fov_deg: float | None) -> float | None:
    """Fraction of the stimulated square where some pRF reaches half its peak.

    Parameters
    ----------
    x, y, sigma : ndarray
        pRF centres and sizes (deg) of the units to count.
    fov_deg : float, optional
        Width of the stimulated field; ``None`` gives ``None``.

    Returns
    -------
    float or None
        Share of a ``COVERAGE_GRID``² grid over the field where the maximum over the pRF
        Gaussians is at least ``COVERAGE_LEVEL``.
    """
    if not fov_deg:
        return None
    half = fov_deg / 2
    grid = np.linspace(-half, half, COVERAGE_GRID)
    gx, gy = np.meshgrid(grid, grid)
    covered = np.zeros(gx.shape, dtype=bool)
    radius = np.sqrt(-2 * np.log(COVERAGE_LEVEL)) * np.maximum(sigma, 1e-3)
    for start in range(0, x.size, 512):
        sl = slice(start, start + 512)
        d2 = (gx[..., None] - x[sl]) ** 2 + (gy[..., None] - y[sl]) ** 2
        covered |= (d2 <= radius[sl] ** 2).any(axis=-1)
    return float(covered.mean())


def participant_row(
    subject: str,
    sessions: Sequence[str],
    maps: dict[str, dict[str, np.ndarray]],
    r2_threshold: float,
    fov_deg: float | None,
    output_dir: Path,
) -> ParticipantRow:
    """Summarise one participant's maps of a fit for the group report.

    Parameters
    ----------
    subject : str
        Label without ``sub-``.
    sessions : sequence of str
        The sessions of this fit.
    maps : dict
        Label → hemisphere → (vertices,) values (``r2``, ``x``, ``y``, ``sigma``, other r²-type maps).
    r2_threshold : float
        Units at or above it, and not flagged doubtful in a ``status`` map, count as fitted well.
    fov_deg : float, optional
        Width of the stimulated field (for the coverage).
    output_dir : Path
        The output folder: the link goes to ``sub-<label>.html`` when it exists there.

    Returns
    -------
    ParticipantRow
    """
    joined = {
        label: np.concatenate([np.asarray(v, dtype=np.float64) for v in per.values()])
        for label, per in maps.items()
    }
    r2 = joined.get("r2", np.array([]))
    good = np.isfinite(r2) & (r2 >= r2_threshold)
    if "status" in joined:  # the units a participant's report shows: not flagged doubtful
        good &= ~catalog.doubtful(joined["status"])
    medians = {}
    for label in (k for k in joined if is_r2(k)):
        values = joined[label][good]
        values = values[np.isfinite(values)]
        if values.size:
            medians[label] = float(np.median(values))
    coverage = None
    if all(k in joined for k in ("x", "y", "sigma")):
        use = good & np.isfinite(joined["x"]) & np.isfinite(joined["y"]) & np.isfinite(joined["sigma"])
        coverage = field_coverage(joined["x"][use], joined["y"][use], joined["sigma"][use], fov_deg)
    page = f"sub-{subject}.html"
    return ParticipantRow(
        subject,
        tuple(sessions),
        page if (output_dir / page).is_file() else None,
        int(np.isfinite(r2).sum()),
        int(good.sum()),
        medians,
        coverage,
    )


@dataclass(frozen=True)
class GroupFit:
    """One fit's group maps, as the group report takes them (plain data, no group-level types).

    Parameters
    ----------
    task, space, model : str
        The fit the participants share.
    den : str or None
        Density of the space (``32k``, ``91k``, ...).
    subjects : list of str
        Participant labels without ``sub-``.
    maps : dict
        Hemisphere → label (``polarangle``, ``eccentricity``, ``sigma``, ``r2``, ``count``) →
        (vertices,) float array; NaN where nobody contributes.
    files : list of Path
        The group maps written.
    r2_threshold : float
        A participant contributes at a vertex when its r² there is at least this.
    fov_deg : float, optional
        Width of the stimulated field.
    participants : list of ParticipantRow
        One summary per participant (:func:`participant_row`).
    ivw : dict
        Hemisphere → label → (vertices,) inverse-variance-weighted group mean (``stat-ivwmean``;
        ``polarangle`` derived from the weighted x and y); empty without the participants'
        standard errors. Drawn beside the group map of the same label.
    contributes : str
        When a participant contributes at a vertex, in words (default ``r² ≥ <threshold>``), e.g.
        ``"r² ≥ 0.1, not doubtful"``.
    areas : GroupAreas, optional
        The results per visual area (``rows``, ``lines``, ``labels``, ``note``), or None.
    """

    task: str
    space: str
    den: str | None
    model: str
    subjects: list[str]
    maps: dict[str, dict[str, np.ndarray]]
    files: list[Path]
    r2_threshold: float
    fov_deg: float | None = None
    participants: list[ParticipantRow] = field(default_factory=list)
    ivw: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    contributes: str = ""
    areas: Any = None

    def __str__(self) -> str:
        den = f" den-{self.den}" if self.den else ""
        return f"task-{self.task} space-{self.space}{den} model-{self.model}"


@dataclass(frozen=True)
class GroupComparison:
    """One model comparison's group shares, as the group report takes them (plain data).

    Parameters
    ----------
    task, space : str
        The comparison the participants share.
    den : str or None
        Density of the space.
    subjects : list of str
        Participant labels without ``sub-``.
    models : list of str
        The models compared, in the order of each row's ``shares``.
    rows : list of dict
        The shares table's rows: ``region``, ``participant`` (``sub-<l>`` or ``group``),
        ``participants``, ``vertices`` and ``shares`` (one per model).
    files : list of Path
        The group maps and the table written.
    atlas_note : str
        Which atlas gave the regions, or why there are none.
    definition : str
        What the shares are.
    share_maps : dict
        Hemisphere → model → the share of the participants whose winner it is, per vertex (NaN
        where no participant was compared); drawn for the models other than the Gaussian.
    """

    task: str
    space: str
    den: str | None
    subjects: list[str]
    models: list[str]
    rows: list[dict]
    files: list[Path]
    atlas_note: str
    definition: str
    share_maps: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)

    def __str__(self) -> str:
        den = f" den-{self.den}" if self.den else ""
        return f"task-{self.task} space-{self.space}{den} model-best"


def _share_figures(comparison: GroupComparison, fig_dir: Path, rel: str) -> tuple[list[Figure], list[str]]:
    """Per model other than the Gaussian, the map of the share of participants it wins at each vertex."""
    hemis = sorted(comparison.share_maps)
    if not hemis:
        return [], []
    prefix = f"task-{comparison.task}_space-{comparison.space}" + (
        f"_den-{comparison.den}" if comparison.den else ""
    )
    n = len(comparison.subjects)
    items = []
    for model in comparison.models:
        if model == "gauss":
            continue
        threshold_text = f"shown: vertices {model} wins in ≥ 1 participant"
        style = MapStyle(
            f"{model}share", f"share of participants won by {model}", "fraction", "viridis", 0.0, 1.0,
            scale_note="0 to 1",
        )  # fmt: skip
        values = {
            h: np.where(comparison.share_maps[h][model] > 0, comparison.share_maps[h][model], np.nan)
            for h in hemis
        }
        alt = (
            f"group share of the {n} participants whose winning model is {model}, per vertex; colour "
            f"scale from 0 to 1; {threshold_text}"
        )
        caption = (
            f"Share of the {n} participants whose winner is {model}, {threshold_text}; colour scale 0 to 1."
        )
        items.append((f"{model}share", style, values, alt, caption, threshold_text))
    if not items:
        return [], []
    flat, views, notes, warnings = _surface_figures(
        comparison.space, comparison.den, items, fig_dir, rel, f"{prefix}_model-best"
    )
    return flat + views, notes + warnings


def _comparison_section(output_dir: Path, comparison: GroupComparison, index: int) -> dict:
    """The group report's section of one model comparison: share maps and the shares per region."""
    header = ["region", "participants", "vertices compared"]
    header += [f"{m} wins (% of vertices)" for m in comparison.models]
    rows = []
    for row in comparison.rows:
        if row["participant"] != "group":
            continue
        shares = [f"{100 * s:.1f}" if np.isfinite(s) else "—" for s in row["shares"]]
        rows.append([row["region"], str(row["participants"]), str(row["vertices"]), *shares])
    n = len(comparison.subjects)
    maps, map_notes = _share_figures(comparison, output_dir / "group" / "figures", "group/figures")
    return {
        "maps": maps,
        "map_notes": map_notes,
        "anchor": f"comparison{index}",
        "title": f"{comparison}: model comparison",
        "lead": (
            f"The share of vertices each model wins, per region: the mean over the {n} participants "
            f"({', '.join('sub-' + s for s in comparison.subjects)}) of their shares."
        ),
        "definition": comparison.definition,
        "atlas_note": comparison.atlas_note,
        "header": header,
        "rows": rows,
        "files": [p.relative_to(output_dir).as_posix() for p in comparison.files],
    }


def _contributes(fit: GroupFit) -> str:
    """When a participant contributes at a vertex, in the words of every figure and table."""
    return fit.contributes or f"r² ≥ {fit.r2_threshold:g}"


def _count_histogram(count: np.ndarray, n_subjects: int, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(5, 3.2), layout="constrained")
    ax.hist(count, bins=np.arange(-0.5, n_subjects + 1.5, 1.0), color="steelblue")
    ax.set_xlabel("participants contributing (count)")
    ax.set_ylabel("vertices (count)")
    ax.set_xticks(range(n_subjects + 1))
    meta = {
        "Title": "participants per vertex",
        "Description": "participants contributing (count), vertices (count)",
    }
    return figures.save(fig, path, meta)


def _table(fit: GroupFit) -> tuple[list[str], list[list[str]], list[str | None]]:
    r2_labels = sorted({k for p in fit.participants for k in p.medians}, key=lambda k: (k != "r2", k))
    shown = f"r² ≥ {fit.r2_threshold:g}, not doubtful"
    header = ["participant", "sessions", "units fitted", f"units shown ({shown})"]
    header += [f"median {k} (units shown)" for k in r2_labels]
    header.append("visual-field coverage (%)")
    rows, links = [], []
    for p in fit.participants:
        row = [f"sub-{p.subject}", ", ".join(p.sessions) or "—", str(p.units), str(p.units_good)]
        row += [f"{p.medians[k]:.2f}" if k in p.medians else "—" for k in r2_labels]
        row.append(f"{100 * p.coverage:.0f}" if p.coverage is not None else "—")
        rows.append(row)
        links.append(p.report)
    return header, rows, links


MapItem = tuple[str, MapStyle, dict[str, np.ndarray], str, str, str]
"""A group map to draw: name in the file name, style, hemisphere → values, alt text, caption, and
what is shown (on the legend)."""


def _surface_figures(
    space: str,
    den: str | None,
    items: Sequence[MapItem],
    fig_dir: Path,
    rel: str,
    prefix: str,
    labels: Any = None,
) -> tuple[list[Figure], list[Figure], list[str], list[str]]:
    """Each map of ``items`` on the flattened occipital patches and in the 3-D views.

    Returns
    -------
    tuple
        The flat figures (none where a patch cannot be cut), the views, notes and warnings.
    """
    meshes, source = find_meshes("", space, den, None)
    sizes = {h: v.size for _, _, values, *_ in items for h, v in values.items()}
    if not meshes or any(meshes[h].n_vertices != sizes[h] for h in sizes if h in meshes):
        reason = source if not meshes else "the mesh does not match the maps' vertex count"
        return [], [], [], [f"Could not draw the group maps on the surface: {reason}."]
    if labels is not None and all(
        h in meshes and v.size == meshes[h].n_vertices for h, v in labels.hemis.items()
    ):
        atlas = Atlas(
            dict(labels.hemis), labels.atlas.areas, f"{labels.atlas.title}, {labels.how}", labels.atlas.name
        )
        atlas_note = f"Borders: {atlas.source}."
    else:
        atlas, atlas_note = visual_areas(meshes)
    patches = {h: occipital_patch(m, h, atlas.labels.get(h) if atlas else None) for h, m in meshes.items()}
    flat, views = [], []
    for name, style, values, alt, caption, threshold_text in items:
        if all(p is not None for p in patches.values()):
            path = fig_dir / f"group_{prefix}_flat-{name}.png"
            patch_figure(style, values, meshes, patches, atlas, threshold_text, path, alt)
            flat.append(Figure(f"{rel}/{path.name}", alt, caption, "map"))
        path = fig_dir / f"group_{prefix}_views-{name}.png"
        views_figure(style, values, meshes, threshold_text, path, alt)
        views.append(Figure(f"{rel}/{path.name}", alt, caption, "map wide"))
    notes = [f"Drawn on {source}. {atlas_note}" + ("" if atlas else " No visual-area borders are drawn.")]
    return flat, views, notes, []


def _group_maps(
    fit: GroupFit, fig_dir: Path, rel: str, prefix: str
) -> tuple[list[Figure], list[Figure], list[str], list[str]]:
    n = len(fit.subjects)
    threshold_text = f"shown: ≥ 1 participant with {_contributes(fit)}"
    # the participant count last, once (map_labels counts it among the extras)
    labels = [k for k in map_labels({k: None for k in fit.maps[next(iter(fit.maps))]}) if k != "count"]
    labels.append("count")
    items: list[MapItem] = []

    def draw(name: str, style: MapStyle, values: dict[str, np.ndarray], alt: str, caption: str) -> None:
        items.append((name, style, values, alt, caption, threshold_text))

    for label in labels:
        values = {h: np.where(fit.maps[h]["count"] > 0, fit.maps[h][label], np.nan) for h in fit.maps}
        if label == "count":
            style = MapStyle(
                "count",
                "participants contributing",
                "count",
                "cividis",
                0.0,
                float(n),
                False,
                f"0 to {n}",
            )
        else:
            r2 = np.concatenate(
                [np.where(fit.maps[h]["count"] > 0, fit.maps[h]["r2"], np.nan) for h in fit.maps]
            )
            values_all = np.concatenate(list(values.values()))
            keep = np.isfinite(values_all)
            style = style_for(label, values_all[keep], fit.fov_deg, r2[keep])
        words = STATISTIC_WORDS.get(label, "")
        alt = (
            f"group {words} {style.title}; colour scale {style.bar_label} from {style.vmin:g} to "
            f"{style.vmax:g} {style.units}; {threshold_text}"
        ).replace("  ", " ")
        caption = (
            f"Group {words} {style.bar_label}, {threshold_text}; colour scale {style.scale_note}.".replace(
                "  ", " "
            )
        )
        draw(label, style, values, alt, caption)
        if all(label in fit.ivw.get(h, {}) for h in fit.maps):
            weighted = _ivw_style(label, style)
            values = {h: fit.ivw[h][label] for h in fit.maps}
            draw(f"{IVW_STAT}-{label}", weighted, values, *_ivw_text(weighted, threshold_text))
    labels = fit.areas.labels if fit.areas is not None else None
    flat, views, notes, warnings = _surface_figures(fit.space, fit.den, items, fig_dir, rel, prefix, labels)
    if fit.ivw and not warnings:
        notes.append(IVW_NOTE)
    return flat, views, notes, warnings


def _ivw_style(label: str, style: MapStyle) -> MapStyle:
    """The style of an inverse-variance-weighted group map: its median's scale, its own title."""
    if label in ("polarangle", "eccentricity"):
        title = f"{style.title} of the weighted mean centre"
    else:
        title = f"inverse-variance-weighted mean {style.title}"
    return dataclasses.replace(style, title=title)


def _ivw_text(style: MapStyle, threshold_text: str) -> tuple[str, str]:
    """Alt text and caption of an inverse-variance-weighted group map (:func:`_ivw_style`)."""
    shown = f"{threshold_text} and a finite standard error"  # it says "not doubtful" already
    alt = (
        f"group {style.title}; colour scale {style.bar_label} from {style.vmin:g} to {style.vmax:g} "
        f"{style.units}; {shown}"
    )
    caption = (
        f"Group {style.bar_label}, weights 1/se² per participant and vertex, {shown}; "
        f"the colour scale of the map beside it ({style.scale_note})."
    )
    return alt, caption


def _section(output_dir: Path, fit: GroupFit, index: int) -> dict:
    prefix = (
        f"task-{fit.task}_space-{fit.space}" + (f"_den-{fit.den}" if fit.den else "") + f"_model-{fit.model}"
    )
    fig_dir, rel = output_dir / "group" / "figures", "group/figures"
    count = np.concatenate([fit.maps[h]["count"] for h in fit.maps])
    n = len(fit.subjects)
    flat, views, notes, warnings = _group_maps(fit, fig_dir, rel, prefix)
    path = _count_histogram(count, n, fig_dir / f"group_{prefix}_count-hist.png")
    hist = Figure(
        f"{rel}/{path.name}",
        "histogram of vertices (count) by participants contributing (count)",
        f"Vertices by the number of participants with {_contributes(fit)}.",
    )
    header, rows, links = _table(fit)
    area_view = _areas(fit, fig_dir, rel, prefix)
    summary = [
        ("Task", fit.task),
        ("Space", fit.space + (f" den-{fit.den}" if fit.den else "")),
        ("Model", fit.model),
        ("Participants", ", ".join(f"sub-{s}" for s in fit.subjects)),
        ("r² threshold per participant", f"{fit.r2_threshold:g}"),
        ("Vertices with every participant contributing", int(np.sum(count == n))),
        ("Vertices with at least one", int(np.sum(count >= 1))),
    ]
    return {
        "anchor": f"fit{index}",
        "title": str(fit),
        "lead": (
            f"{n} participants; {int(np.sum(count >= 1))} vertices with at least one participant "
            f"contributing ({_contributes(fit)}), {int(np.sum(count == n))} with all of them."
        ),
        "warnings": warnings,
        "maps": flat or views,
        "views": views if flat else [],
        "map_notes": notes,
        "table_header": header,
        "table_rows": list(zip(rows, links, strict=True)),
        "coverage_note": (
            "Coverage: the share of the stimulated field where at least one pRF of the units shown "
            f"(r² ≥ {fit.r2_threshold:g}, not doubtful) reaches half its peak."
        ),
        "count_figure": hist,
        "summary_rows": summary,
        "files": [p.relative_to(output_dir).as_posix() for p in fit.files],
        **area_view,
    }


AREA_HEADER = [
    "area",
    "participants",
    "units shown (median)",
    "median r² (mean)",
    "σ slope",
    "σ intercept (deg)",
]
AREA_FIGURE_AREAS = 4


def _areas(fit: GroupFit, fig_dir: Path, rel: str, prefix: str) -> dict[str, Any]:
    """The group section's results per visual area: the table, the lines figure and the note."""
    areas = fit.areas
    if areas is None or not areas.rows:
        note = areas.note if areas is not None else "No results per visual area."
        return {"area_header": AREA_HEADER, "area_rows": [], "area_figures": [], "area_note": note}

    def pm(mean: float, sem: float) -> str:
        if not np.isfinite(mean):
            return "—"
        return f"{mean:.3f} ± {sem:.3f}" if np.isfinite(sem) else f"{mean:.3f}"

    table = [
        [
            r["area"],
            r["participants"],
            f"{r['units_shown_median']:g}",
            "—" if not np.isfinite(r["median_r2_mean"]) else f"{r['median_r2_mean']:.3f}",
            pm(r["sigma_slope_mean"], r["sigma_slope_sem"]),
            pm(r["sigma_intercept_mean"], r["sigma_intercept_sem"]),
        ]
        for r in areas.rows
    ]
    drawn = [r for r in areas.rows if r["participants"] >= 1][:AREA_FIGURE_AREAS]
    out = []
    if drawn and fit.fov_deg:
        palette = area_colours(len(areas.rows))
        colours = {r["area"]: palette[k] for k, r in enumerate(areas.rows)}
        names = [r["area"] for r in drawn]
        means = {r["area"]: (r["sigma_slope_mean"], r["sigma_intercept_mean"]) for r in drawn}
        path = fig_dir / f"group_{prefix}_areas-ecc-sigma.png"
        figures.group_area_lines({n: areas.lines[n] for n in names}, means, colours, fit.fov_deg / 2, path)
        out.append(
            Figure(
                f"{rel}/{path.name}",
                "pRF size σ (deg) against eccentricity (deg) per visual area: participants and their mean",
                f"σ against eccentricity in {', '.join(names)}: each participant's r²-weighted line (thin) "
                "and the mean of their slopes and intercepts (thick).",
            )
        )
    note = f"{areas.note} σ slope and intercept: mean ± standard error over the participants with a line."
    return {"area_header": AREA_HEADER, "area_rows": table, "area_figures": out, "area_note": note}


def write_group_report(
    output_dir: str | Path, results: Sequence[GroupFit], comparisons: Sequence[GroupComparison] = ()
) -> Path:
    """Write ``<output_dir>/group.html`` for the group maps of the group level.

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder.
    results : sequence of GroupFit
        One per shared fit.
    comparisons : sequence of GroupComparison
        One per shared model comparison (``model-best`` maps): a section of shares per region.

    Returns
    -------
    Path
        The HTML file; figures are linked relatively from ``group/figures/``.
    """
    output_dir = Path(output_dir)
    order = list(catalog.MODELS)
    ranked = sorted(
        results,
        key=lambda f: (
            f.task,
            f.space,
            f.den or "",
            order.index(f.model) if f.model in order else len(order),
            f.model,
        ),
    )
    sections = [_section(output_dir, fit, i) for i, fit in enumerate(ranked)]
    about = [
        ("prfmap", __version__),
        ("Generated", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
    ]
    compared = [_comparison_section(output_dir, c, i) for i, c in enumerate(comparisons)]
    nav = [(s["anchor"], s["title"]) for s in compared + sections] + [("about", "About")]
    return render_page(
        "group.html.j2",
        output_dir / "group.html",
        title="prfmap: group",
        subtitle="group maps and a summary of every participant",
        nav=nav,
        sections=sections,
        comparisons=compared,
        about=about,
    )
