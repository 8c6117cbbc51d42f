"""The per-participant HTML report: ``<output_dir>/sub-<label>.html`` and its figures."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from prfmap import __version__
from prfmap.io.atomic import write_text_atomic
from prfmap.report import figures
from prfmap.report.context import ReportContext, SurfaceGeometry
from prfmap.report.html import dict_rows, esc, figure, page, table
from prfmap.report.surface import SURFACE_MAPS, find_meshes, plot_surface_map

__all__ = ["ReportContext", "SurfaceGeometry", "write_participant_report"]

log = logging.getLogger(__name__)


def _visual_field_maps(maps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {k: np.asarray(v, dtype=np.float64) for k, v in maps.items()}
    if "x" in out and "y" in out:
        out.setdefault("polarangle", np.degrees(np.arctan2(out["y"], out["x"])))
        out.setdefault("eccentricity", np.hypot(out["x"], out["y"]))
    return out


class _Section:
    """Figures and HTML for one context."""

    def __init__(self, ctx: ReportContext, fig_dir: Path, rel: str, key: str) -> None:
        self.ctx = ctx
        self.fig_dir = fig_dir
        self.rel = rel
        self.maps = _visual_field_maps(ctx.maps)
        self.r2 = self.maps.get("r2", np.full(self._n_units(), np.nan))
        self.prefix = f"sub-{ctx.subject.removeprefix('sub-')}_{key}"
        self.anchor = key

    def _n_units(self) -> int:
        return len(next(iter(self.ctx.maps.values()))) if self.ctx.maps else 0

    def _fig(self, name: str) -> tuple[Path, str]:
        filename = f"{self.prefix}_{name}.png"
        return self.fig_dir / filename, f"{self.rel}/{filename}"

    def summary(self) -> str:
        ctx = self.ctx
        thr = ctx.r2_threshold
        finite = np.isfinite(self.r2)
        rows = [
            ("Participant", f"sub-{ctx.subject.removeprefix('sub-')}"),
            ("Session", ctx.session or "—"),
            ("Task", ctx.task or "—"),
            ("Space", ctx.space + (f" (den-{ctx.den})" if ctx.den else "")),
            ("Model", ctx.model),
            ("Runs", ", ".join(ctx.runs) or "—"),
            ("Repetition time", f"{ctx.tr:g} s" if ctx.tr else "unknown"),
            ("Dummy scans dropped", ctx.dummy_scans),
            ("Units fitted", self._n_units()),
            (f"Units with r² ≥ {thr:g}", int(np.sum(self.r2[finite] >= thr))),
            ("Median r²", f"{np.median(self.r2[finite]):.3f}" if finite.any() else "—"),
        ]
        inputs = "".join(f"<li><code>{esc(p)}</code></li>" for p in ctx.inputs) or "<li>—</li>"
        outputs = "".join(f"<li><code>{esc(p)}</code></li>" for p in ctx.outputs)
        html = f"<h3>Summary</h3>{table(rows)}<h3>Inputs used</h3><ul>{inputs}</ul>"
        if outputs:
            html += f"<h3>Derivatives written</h3><ul>{outputs}</ul>"
        return html

    def stimulus(self) -> str:
        ctx = self.ctx
        if ctx.design is None:
            return '<h3>Stimulus</h3><p class="note">The aperture was not passed to the report.</p>'
        path, src = self._fig("stimulus")
        figures.stimulus_montage(ctx.design, ctx.fov_deg, path)
        fov = f"{ctx.fov_deg:g}°" if ctx.fov_deg else "unknown"
        frames, rows, cols = np.shape(ctx.design)
        caption = (
            f"Aperture frames evenly spaced over the {frames} frames the model saw "
            f"({rows}×{cols} pixels, field of view {fov} wide, x right, y up)."
        )
        return "<h3>Stimulus</h3>" + figure(src, "stimulus apertures", caption)

    def fitting(self) -> str:
        ctx = self.ctx
        backend = table(dict_rows(ctx.backend) or [("backend", "unknown")])
        settings = table(dict_rows(ctx.settings) or [("settings", "not recorded")])
        timing_rows = [(k, f"{v:.2f} s") for k, v in ctx.timings.items()]
        if "total" not in ctx.timings:
            timing_rows.append(("total", f"{sum(ctx.timings.values()):.2f} s"))
        return (
            f"<h3>Backend and device</h3>{backend}<h3>Fitting settings</h3>{settings}"
            f"<h3>Time per stage</h3>{table(timing_rows, ('stage', 'time'))}"
        )

    def surface_maps(self) -> str:
        ctx = self.ctx
        head = f"<h3>Surface maps (r² ≥ {ctx.r2_threshold:g})</h3>"
        if ctx.surface is None:
            return head + (
                f'<p class="note">No surface figures: space {esc(ctx.space)} is not '
                "a cortical surface; see the visual-field plots below.</p>"
            )
        given = ctx.surface.meshes
        try:
            meshes, source = find_meshes(
                ctx.subject.removeprefix("sub-"), ctx.space, ctx.den, ctx.fmriprep_dir, given
            )
        except (OSError, ValueError) as err:
            meshes, source = {}, f"the meshes could not be read ({err})"
        if not meshes:
            return head + (
                f'<p class="note">No mesh available: {esc(source)}. The surface maps '
                "are not drawn; see the visual-field plots below.</p>"
            )
        keep = np.isfinite(self.r2) & (self.r2 >= ctx.r2_threshold)
        split_keep = ctx.surface.split(keep.astype(np.float64))
        mismatch = [h for h in split_keep if h in meshes and split_keep[h].size != meshes[h].n_vertices]
        if mismatch:
            return head + (
                f'<p class="warning">The data have {split_keep[mismatch[0]].size} '
                f"vertices in hemisphere {mismatch[0]} but the mesh ({esc(source)}) has "
                f"{meshes[mismatch[0]].n_vertices}; surface maps not drawn.</p>"
            )
        html = head + f"<p>Drawn on {esc(source)}.</p>"
        for label, style in SURFACE_MAPS.items():
            if label not in self.maps:
                continue
            values = self.maps[label].copy()
            values[~keep] = np.nan
            per_hemi = ctx.surface.split(values)
            shown = values[np.isfinite(values)]
            vmax = float(np.percentile(shown, 98)) if shown.size else 1.0
            if label == "eccentricity" and ctx.fov_deg:
                vmax = ctx.fov_deg / 2
            elif label == "sigma" and ctx.fov_deg:
                vmax = min(vmax, ctx.fov_deg / 2)
            path, src = self._fig(f"surf-{label}")
            plot_surface_map(label, per_hemi, meshes, max(vmax, 1e-3), path)
            unit = f" ({style['units']})" if style["units"] else ""
            extra = (
                " — cyclic colour map: 0° right horizontal meridian, 90° upper vertical"
                if (label == "polarangle")
                else ""
            )
            html += figure(
                src,
                f"{label} on the cortical surface",
                f"{label}{unit}, vertices with r² ≥ {ctx.r2_threshold:g}{extra}.",
            )
        return html

    def _inside(self) -> tuple[np.ndarray, str]:
        """r² with units outside the stimulated field set to NaN, and a sentence about them."""
        m, ctx = self.maps, self.ctx
        if not ctx.fov_deg or "eccentricity" not in m or "sigma" not in m:
            return self.r2, ""
        limit = ctx.fov_deg / 2
        inside = (m["eccentricity"] <= limit) & (m["sigma"] > 0) & (m["sigma"] <= limit)
        good = np.isfinite(self.r2) & (self.r2 >= ctx.r2_threshold)
        outside = int(np.sum(good & ~inside))
        note = (
            f" Shown: units with eccentricity and sigma up to {limit:g}° (the stimulated "
            f"field); {outside} units with r² ≥ {ctx.r2_threshold:g} lie beyond it."
        )
        return np.where(inside, self.r2, np.nan), note

    def visual_field(self) -> str:
        ctx = self.ctx
        thr = ctx.r2_threshold
        html = "<h3>Visual field</h3>"
        m = self.maps
        r2, note = self._inside()
        if all(k in m for k in ("x", "y", "sigma")):
            path, src = self._fig("coverage")
            figures.visual_field_coverage(m["x"], m["y"], m["sigma"], r2, thr, ctx.fov_deg, path)
            html += figure(
                src,
                "visual-field coverage",
                f"Left: pRF centres of units with r² ≥ {thr:g}. Right: coverage, the "
                f"maximum over their Gaussian pRFs; dashed: the stimulated field.{note}",
            )
        if "eccentricity" in m and "sigma" in m:
            path, src = self._fig("ecc-sigma")
            _, line = figures.eccentricity_sigma(m["eccentricity"], m["sigma"], r2, thr, path)
            fit = (
                f"fitted line (r²-weighted least squares): sigma = {line[0]:.3f} × eccentricity "
                f"+ {line[1]:.3f}°"
                if line
                else "too few units to fit a line"
            )
            html += figure(src, "eccentricity versus sigma", f"Units with r² ≥ {thr:g}; {fit}.{note}")
        path, src = self._fig("r2-hist")
        figures.r2_histogram(self.r2, thr, path)
        html += figure(src, "r² histogram", f"Variance explained by the {ctx.model} model.")
        return html

    def timecourses(self) -> str:
        ctx = self.ctx
        head = "<h3>Example time courses</h3>"
        if ctx.data is None or ctx.predictions is None:
            return head + '<p class="note">The fitted predictions were not kept for this fit.</p>'
        if not np.isfinite(self.r2).any():
            return head + '<p class="note">No unit has a finite r².</p>'
        path, src = self._fig("timecourses")
        _, picks = figures.timecourses(
            np.asarray(ctx.data),
            np.asarray(ctx.predictions),
            self.r2,
            ctx.tr,
            path,
            ctx.r2_threshold,
        )
        desc = ", ".join(f"{k} unit {v}" for k, v in picks.items())
        return head + figure(
            src,
            "example time courses",
            f"Preprocessed data (grey) and fitted prediction (red): {desc} (the best, the median "
            f"of units with r² ≥ {ctx.r2_threshold:g}, and one at the 10th percentile of r²).",
        )

    def warnings(self) -> str:
        items = "".join(f'<div class="warning">{esc(w)}</div>' for w in self.ctx.warnings)
        return "<h3>Warnings</h3>" + (items or "<p>None.</p>")

    def render(self) -> str:
        ctx = self.ctx
        title = " · ".join(
            x
            for x in (
                f"ses-{ctx.session}" if ctx.session else "",
                f"task-{ctx.task}" if ctx.task else "",
                f"space-{ctx.space}",
                f"model-{ctx.model}",
            )
            if x
        )
        parts = [
            self.summary(),
            self.stimulus(),
            self.fitting(),
            self.surface_maps(),
            self.visual_field(),
            self.timecourses(),
            self.warnings(),
        ]
        return f'<section id="{esc(self.anchor)}"><h2>{esc(title)}</h2>{"".join(parts)}</section>'


def write_participant_report(
    output_dir: str | Path, subject: str, context: ReportContext | Sequence[ReportContext]
) -> Path:
    """Write ``<output_dir>/sub-<label>.html`` with its figures under ``sub-<label>/figures/``.

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder.
    subject : str
        Participant label, with or without ``sub-``.
    context : ReportContext or sequence of ReportContext
        One per fit (space, task, session) of this participant; each gets a section.

    Returns
    -------
    Path
        The HTML file. Images are linked by relative paths, so the page opens from the file
        system with no network.
    """
    output_dir = Path(output_dir)
    label = subject.removeprefix("sub-")
    contexts = [context] if isinstance(context, ReportContext) else list(context)
    fig_dir = output_dir / f"sub-{label}" / "figures"
    keys = [ctx.key for ctx in contexts]
    unique = [key if keys.count(key) == 1 else f"{key}_{i + 1}" for i, key in enumerate(keys)]
    sections = [
        _Section(ctx, fig_dir, f"sub-{label}/figures", key) for ctx, key in zip(contexts, unique, strict=True)
    ]
    body = "".join(section.render() for section in sections)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    about = table([("prfmap", __version__), ("Generated", stamp)])
    body += f'<section id="about"><h2>About</h2>{about}</section>'
    nav = [(s.anchor, s.anchor) for s in sections] + [("about", "About")]
    path = write_text_atomic(output_dir / f"sub-{label}.html", page(f"prfmap: sub-{label}", nav, body))
    log.info("report written to %s", path)
    return path
