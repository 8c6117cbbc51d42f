"""The participant report's model comparison: winner and Δcvr2 maps, tables, links to each model.

Winners are tabulated per eccentricity band and per visual area. A comparison is made per fit
(space, task, session) when two or more models were fitted to two or more runs (``model-best``
maps, ``prfmap.participant.comparison``). Its section shows the units the Gaussian's section shows
(r² at or above the threshold, not flagged doubtful) that were compared.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from bids.layout import parse_file_entities

from prfmap.derivatives import MAP_SUFFIX, PYBIDS_CONFIG, sidecar_of
from prfmap.derivatives.comparison import COMPARISON_MAPS, COMPARISON_MODEL
from prfmap.io.naming import bids_name
from prfmap.report.context import ReportContext
from prfmap.report.legends import MapStyle, category_index, nice_ceiling
from prfmap.report.readback import read_unit_maps
from prfmap.report.section import FitSection

log = logging.getLogger(__name__)
WINNER_CMAP = "tab10"
"""Colour ``i`` of this map is the model of code ``i`` (gauss 0, css 1, dog 2, dn 3) on every page."""
BANDS = 5
"""Equal-width eccentricity bands across the stimulated radius (one more for units beyond it)."""


@dataclass
class ComparisonContext:
    """What the participant report shows of one comparison of models (its ``model-best`` maps).

    Parameters
    ----------
    fit : ReportContext
        The Gaussian's fit of the same data: entities, geometry, meshes, field of view, threshold
        and the eccentricity the bands are read from.
    winner : ndarray, shape (units,)
        The winning model's code (``Levels``), NaN where no comparison was made.
    cvr2, delta_cvr2 : ndarray, shape (units,)
        The winner's cross-validated r², and its gain over the Gaussian's.
    levels : dict of str to str
        Code (a string) → model, as the winner map's sidecar says.
    described : dict
        The sidecar's ``Comparison`` (definition, alpha, z limit, folds, shares).
    outputs : list of str
        The comparison's files, relative to the output folder.
    """

    fit: ReportContext
    winner: np.ndarray
    cvr2: np.ndarray
    delta_cvr2: np.ndarray
    levels: dict[str, str]
    described: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] = field(default_factory=list)

    @property
    def key(self) -> str:
        """The comparison's file-name-safe label (its fit's, with ``model-best``)."""
        fit = self.fit
        entities = {"ses": fit.session, "task": fit.task, "space": fit.space.split(":")[0]}
        return bids_name({**entities, "den": fit.den, "model": COMPARISON_MODEL})

    @property
    def models(self) -> list[tuple[int, str]]:
        """The models compared as (code, name), by code."""
        return sorted((int(code), model) for code, model in self.levels.items())

    def matches(self, ctx: ReportContext) -> bool:
        """Whether ``ctx`` is one of the fits this comparison compares."""
        fit = self.fit
        same = (ctx.session, ctx.task, ctx.space, ctx.den) == (fit.session, fit.task, fit.space, fit.den)
        return same and ctx.model in self.levels.values()


def winner_style(models: Sequence[tuple[int, str]]) -> MapStyle:
    """The categorical style of a winner map: one fixed colour per model (its code's).

    Parameters
    ----------
    models : sequence of (int, str)
        The models compared, as (code, name).

    Returns
    -------
    MapStyle
    """
    categories = tuple((code, name) for code, name in models)
    return MapStyle(
        "winner", "winning model", "code", WINNER_CMAP, -0.5, 9.5, False, "one colour per model", categories
    )


def delta_style(values: np.ndarray) -> MapStyle:
    """The scale of a Δcvr2 map: 0 (the Gaussian kept) to the 99th percentile of the gains shown.

    Parameters
    ----------
    values : ndarray
        The gains that will be drawn (never negative: a model wins only where it beats the Gaussian).

    Returns
    -------
    MapStyle
    """
    gains = np.asarray(values, dtype=np.float64)
    gains = gains[np.isfinite(gains) & (gains > 0)]
    top = nice_ceiling(float(np.percentile(gains, 99)) if gains.size else 0.01)
    return MapStyle(
        "deltacvr2",
        "Δcvr2: held-out r² gain over the Gaussian",
        "1",
        "magma",
        0.0,
        top,
        False,
        "0 (the Gaussian kept) to the 99th percentile of the gains shown",
    )


def _count(mask: np.ndarray, total: int) -> str:
    n = int(mask.sum())
    return f"{n} ({100.0 * n / total:.1f} %)" if total else "0"


class ComparisonSection(FitSection):
    """Figures and template values of one comparison; the map drawing is the fit sections'."""

    def __init__(
        self,
        comparison: ComparisonContext,
        fig_dir: Path,
        rel: str,
        key: str,
        links: Sequence[tuple[str, str]] = (),
    ) -> None:
        fit = comparison.fit
        shown = ReportContext(**{**vars(fit), "run_inputs": [], "stat_maps": {}, "model": COMPARISON_MODEL})
        super().__init__(shown, fig_dir, rel, key)
        self.comparison = comparison
        self.links = list(links)
        self.fit_maps = self.maps
        self.compared = self.good & np.isfinite(comparison.winner)
        self.maps = {"winner": comparison.winner, "deltacvr2": comparison.delta_cvr2}

    @property
    def threshold_text(self) -> str:
        """Which units the figures show, in words."""
        return f"shown: compared units with the Gaussian's r² ≥ {self.ctx.r2_threshold:g}, not doubtful"

    def _styles(self) -> list[tuple[MapStyle, np.ndarray]]:
        c = self.comparison
        style = winner_style(c.models)
        winner = np.where(self.compared, c.winner, np.nan)
        delta = np.where(self.compared, c.delta_cvr2, np.nan)
        gains = delta_style(delta)
        return [(style, category_index(style, winner)), (gains, np.minimum(delta, gains.vmax))]

    def _shown_text(self, style: MapStyle) -> str:
        return f"compared, Gaussian r² ≥ {self.ctx.r2_threshold:g}"

    def _describe(self, style: MapStyle, view: str) -> tuple[str, str]:
        if not style.categories:
            return super()._describe(style, view)
        names = "; ".join(name for _, name in style.categories)
        alt = f"{style.title} on the {view}; legend: {names}; {self.threshold_text}"
        caption = (
            f"The model that predicts the held-out runs best on the {view}, {self.threshold_text}; "
            "a model other than the Gaussian only where it passes the test of the Definition below."
        )
        return alt, caption

    # --- tables -----------------------------------------------------------------------------------
    def _row(self, name: str, where: np.ndarray) -> list[str]:
        c = self.comparison
        total = int(where.sum())
        cells = [name, str(total)]
        cells += [_count(where & (c.winner == code), total) for code, _ in c.models]
        gauss = next((int(code) for code, model in c.levels.items() if model == "gauss"), -1)
        gains = c.delta_cvr2[where & (c.winner != gauss)]
        gains = gains[np.isfinite(gains)]
        cells.append(f"{np.median(gains):.3f}" if gains.size else "—")
        return cells

    def header(self, first: str) -> list[str]:
        """A table's header: the group, units compared, each model's wins, the median gain."""
        return [first, "units", *(name for _, name in self.comparison.models), "median Δcvr2 of wins"]

    def by_eccentricity(self) -> list[list[str]]:
        """Winners per band of the Gaussian's eccentricity (equal widths across the stimulated radius)."""
        ecc = self.fit_maps.get("eccentricity")
        if ecc is None:
            return []
        finite = self.compared & np.isfinite(ecc)
        radius = self.ctx.fov_deg / 2 if self.ctx.fov_deg else float(np.max(ecc[finite], initial=1.0))
        edges = np.linspace(0.0, radius, BANDS + 1)
        rows = [self._row("all", self.compared)]
        for low, high in zip(edges[:-1], edges[1:], strict=True):
            here = finite & (ecc >= low) & ((ecc < high) if high < radius else (ecc <= high))
            rows.append(self._row(f"{low:.3g}–{high:.3g}°", here))
        beyond = finite & (ecc > radius)
        if beyond.any():
            rows.append(self._row(f"beyond {radius:.3g}°", beyond))
        return rows

    def by_area(self) -> tuple[list[list[str]], str]:
        """Winners per visual area of the atlas the maps were drawn with, or why there are none."""
        atlas, surface = self.atlas, self.ctx.surface
        if atlas is None or surface is None:
            return [], "No table by visual area: no visual-area atlas for these maps (see the maps' note)."
        area = np.zeros(self.compared.size, dtype=np.int64)
        start = 0
        for hemi, count in surface.hemis.items():
            labels = atlas.labels.get(hemi)
            vertices = np.arange(count) if surface.vertices is None else surface.vertices[hemi]
            if labels is not None and vertices.size and vertices.max() < labels.size:
                area[start : start + count] = labels[vertices]
            start += count
        rows = [self._row(name, self.compared & (area == k)) for k, name in enumerate(atlas.names, start=1)]
        return rows, f"Areas of {atlas.source}; both hemispheres together."

    # --- text -------------------------------------------------------------------------------------
    def lead(self) -> str:
        """The section's opening sentence: units compared and the share each model wins."""
        c = self.comparison
        total = int(self.compared.sum())
        wins = ", ".join(
            f"{name} {_count(self.compared & (c.winner == code), total)}" for code, name in c.models
        )
        folds = len(c.described.get("Folds") or []) or "leave-one-run-out"
        return (
            f"{len(c.models)} models compared on {folds} held-out folds at {total} units (the Gaussian's "
            f"units shown, r² ≥ {self.ctx.r2_threshold:g}); won: {wins}."
        )

    def definition_rows(self) -> list[tuple[str, str]]:
        """The comparison's definition and settings, as the sidecar records them."""
        d = self.comparison.described
        rows = [("Definition", str(d.get("Definition", "not recorded")))]
        for key, name in (
            ("Alpha", "Alpha"),
            ("ZLimit", "z limit"),
            ("CSSGaussianExponent", "CSS exponent limit"),
        ):
            if key in d:
                rows.append((name, str(d[key])))
        if d.get("Folds"):
            rows.append(("Folds", "; ".join(str(f) for f in d["Folds"])))
        return rows

    def build(self) -> dict[str, Any]:
        """Every value the comparison's template block needs."""
        fit = self.comparison.fit
        title = " · ".join(
            x
            for x in (
                "Model comparison",
                f"ses-{fit.session}" if fit.session else "",
                f"task-{fit.task}" if fit.task else "",
                f"space-{fit.space}" + (f" den-{fit.den}" if fit.den else ""),
            )
            if x
        )
        view: dict[str, Any] = {"anchor": self.anchor, "title": title}
        view.update(self.map_figures())
        area_rows, area_note = self.by_area()
        view.update(
            lead=self.lead(),
            band_header=self.header("eccentricity"),
            band_rows=self.by_eccentricity(),
            area_header=self.header("visual area"),
            area_rows=area_rows,
            area_note=area_note,
            links=self.links,
            definition_rows=self.definition_rows(),
            outputs=list(self.comparison.outputs),
            warnings=self.warnings,
        )
        return view


def comparison_links(
    comparison: ComparisonContext, contexts: Sequence[ReportContext], anchors: Sequence[str]
) -> list[tuple[str, str]]:
    """(anchor, model) of each compared model's own section on the page.

    Parameters
    ----------
    comparison : ComparisonContext
        A comparison.
    contexts : sequence of ReportContext
        The page's fit sections, in order.
    anchors : sequence of str
        Their anchors.

    Returns
    -------
    list of tuple
    """
    return [(a, ctx.model) for ctx, a in zip(contexts, anchors, strict=True) if comparison.matches(ctx)]


def gaussian_of(comparison_fit: Mapping[str, Any], contexts: Sequence[ReportContext]) -> ReportContext | None:
    """The Gaussian fit whose entities are ``comparison_fit``'s (session, task, space, den), if any.

    Parameters
    ----------
    comparison_fit : mapping
        ``session``, ``task``, ``space`` and ``den`` of a comparison.
    contexts : sequence of ReportContext
        The participant's fits.

    Returns
    -------
    ReportContext or None
    """
    for ctx in contexts:
        entities = {"session": ctx.session, "task": ctx.task, "space": ctx.space, "den": ctx.den}
        if ctx.model == "gauss" and all(entities[k] == comparison_fit.get(k) for k in entities):
            return ctx
    return None


def _read_comparison_maps(files: Sequence[Path], fit: ReportContext) -> dict[str, np.ndarray]:
    """The comparison's maps (not its ``stat-z``) in the unit order of its Gaussian fit ``fit``."""
    entities = [parse_file_entities(str(p), config=["bids", "derivatives", PYBIDS_CONFIG]) for p in files]
    data = [(p, e) for p, e in zip(files, entities, strict=True) if not e.get("stat")]
    mask = np.asarray(fit.volume.mask, dtype=bool) if fit.volume is not None else None
    return read_unit_maps(data, fit.surface, mask, lambda _, label: label)


def read_comparisons(
    output_dir: Path, subject: str, contexts: Sequence[ReportContext]
) -> list[ComparisonContext]:
    """The comparisons of ``subject``'s fits written under ``output_dir`` (``model-best`` maps).

    Parameters
    ----------
    output_dir : Path
        prfmap's output folder.
    subject : str
        Label without ``sub-``.
    contexts : sequence of ReportContext
        The participant's fits read back (each comparison is shown with its Gaussian's).

    Returns
    -------
    list of ComparisonContext
        One per comparison whose Gaussian fit is among ``contexts`` and whose maps line up with it;
        a comparison that does not is left out with a warning in the log.
    """
    pattern = f"**/func/sub-{subject}_*_model-{COMPARISON_MODEL}_*{MAP_SUFFIX}.*"
    groups: dict[tuple, list[Path]] = defaultdict(list)
    for path in sorted((output_dir / f"sub-{subject}").glob(pattern)):
        if path.name.endswith(".json"):
            continue
        e = parse_file_entities(str(path), config=["bids", "derivatives", PYBIDS_CONFIG])
        groups[tuple(e.get(k) for k in ("session", "task", "space", "density"))].append(path)
    out = []
    for (session, task, space, den), files in groups.items():
        fit = gaussian_of({"session": session, "task": task, "space": space, "den": den}, contexts)
        maps = _read_comparison_maps(files, fit) if fit is not None else {}
        if fit is None or not set(COMPARISON_MAPS) <= set(maps):
            log.warning("%s: no Gaussian fit or maps to show the comparison with; left out", files[0].name)
            continue
        n = len(next(iter(fit.maps.values())))
        if any(np.asarray(maps[k]).size != n for k in COMPARISON_MAPS):
            log.warning(
                "%s: the comparison's maps do not line up with its Gaussian fit; left out", files[0].name
            )
            continue
        sidecar = sidecar_of(
            next((p for p in files if "_desc-winner_" in p.name), files[0])
        )  # CIFTI: one file
        meta = json.loads(sidecar.read_text()) if sidecar.is_file() else {}
        out.append(
            ComparisonContext(
                fit=fit,
                winner=np.asarray(maps["winner"], dtype=np.float64),
                cvr2=np.asarray(maps["cvr2"], dtype=np.float64),
                delta_cvr2=np.asarray(maps["deltacvr2"], dtype=np.float64),
                levels={str(k): str(v) for k, v in (meta.get("Levels") or {}).items()},
                described=dict(meta.get("Comparison") or {}),
                outputs=[p.relative_to(output_dir).as_posix() for p in files],
            )
        )
    return out
