"""The per-participant HTML report: ``<output_dir>/sub-<label>.html`` and its figures.

The page opens with the retinotopic maps (polar angle, eccentricity, σ and every r²-type map, on
the occipital cortex up close), then the visual field, the model fit, data quality and a methods
paragraph; inputs, settings and file lists close each section, collapsed.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np
from nilearn import image

from prfmap import __version__
from prfmap.engine import catalog
from prfmap.report import figures
from prfmap.report.atlas import visual_areas
from prfmap.report.context import ReportContext
from prfmap.report.html import Figure, dict_rows, render_page
from prfmap.report.legends import MapStyle, category_index, is_r2, map_labels, style_for
from prfmap.report.meshes import find_meshes
from prfmap.report.methods import methods_text
from prfmap.report.quality import fd_figure, run_quality
from prfmap.report.surface import occipital_patch, patch_figure, views_figure
from prfmap.report.volume import centre_of, find_anatomy, slices_figure, to_image

__all__ = ["ReportContext", "write_participant_report"]

log = logging.getLogger(__name__)
NOT_DRAWN = "Could not draw"


def _visual_field_maps(maps: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    out = {k: np.asarray(v, dtype=np.float64) for k, v in maps.items()}
    if "x" in out and "y" in out:
        out.setdefault("polarangle", np.degrees(np.arctan2(out["y"], out["x"])))
        out.setdefault("eccentricity", np.hypot(out["x"], out["y"]))
    return out


def relative_path(path: str | Path, bases: Sequence[Path | None]) -> str:
    """``path`` relative to the first of ``bases`` that holds it (as given otherwise).

    Parameters
    ----------
    path : str or Path
        A file.
    bases : sequence of Path or None
        Folders to try, in order (e.g. the BIDS dataset, the fMRIPrep folder's parent).

    Returns
    -------
    str
        The relative path, with forward slashes.
    """
    target = Path(path)
    for base in bases:
        if base is None:
            continue
        try:
            return target.resolve().relative_to(Path(base).resolve()).as_posix()
        except ValueError:
            continue
    return str(path)


def _median(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else None


class _Section:
    """Figures and template values of one context (space, task, session)."""

    def __init__(self, ctx: ReportContext, fig_dir: Path, rel: str, key: str) -> None:
        self.ctx = ctx
        self.fig_dir = fig_dir
        self.rel = rel
        self.maps = _visual_field_maps(ctx.maps)
        self.r2 = self.maps.get("r2", np.full(self._n_units(), np.nan))
        self.good = np.isfinite(self.r2) & (self.r2 >= ctx.r2_threshold)
        status = self.maps.get("status")
        self.doubtful = np.zeros_like(self.good)
        if status is not None:
            self.doubtful = self.good & catalog.doubtful(status)
            self.good &= ~self.doubtful
        self.prefix = f"sub-{ctx.subject.removeprefix('sub-')}_{key}"
        self.anchor = key
        self.warnings = list(ctx.warnings)
        self.atlas_drawn = False
        self.quality = [run_quality(run, ctx.dummy_scans) for run in ctx.run_inputs]

    def _n_units(self) -> int:
        return len(next(iter(self.ctx.maps.values()))) if self.ctx.maps else 0

    def _fig(self, name: str) -> tuple[Path, str]:
        filename = f"{self.prefix}_{name}.png"
        return self.fig_dir / filename, f"{self.rel}/{filename}"

    @property
    def threshold_text(self) -> str:
        text = f"shown: r² ≥ {self.ctx.r2_threshold:g}"
        if "status" in self.maps:
            text += f", not flagged doubtful in the status map ({int(self.doubtful.sum())} left out)"
        return text

    def _styles(self) -> list[tuple[MapStyle, np.ndarray]]:
        out = []
        for label in map_labels(self.maps):
            # the status map shows the doubtful estimates the other maps leave out
            good = (self.good | self.doubtful) if label == "status" else self.good
            shown = np.where(good, self.maps[label], np.nan)
            style = style_for(label, shown[good], self.ctx.fov_deg, self.r2[good])
            out.append((style, category_index(style, shown) if style.categories else shown))
        return out

    def _shown_text(self, style: MapStyle) -> str:
        if style.categories:
            return f"shown: r² ≥ {self.ctx.r2_threshold:g}, doubtful estimates included"
        return self.threshold_text

    def _describe(self, style: MapStyle, view: str) -> tuple[str, str]:
        shown = self._shown_text(style)
        if style.categories:
            names = "; ".join(name for _, name in style.categories)
            alt = f"{style.title} on the {view}; legend {style.bar_label}: {names}; {shown}"
            caption = (
                f"{style.bar_label} on the {view}, {shown}; {style.scale_note}. Bits: "
                + ", ".join(f"{bit} {name}" for bit, (name, _) in sorted(catalog.STATUS_FLAGS.items()))
                + "; doubtful: "
                + ", ".join(catalog.DOUBTFUL)
                + "."
            )
            return alt, caption
        alt = (
            f"{style.title} on the {view}; colour scale {style.bar_label} from {style.vmin:g} to "
            f"{style.vmax:g} {style.units}; {shown}"
        )
        caption = f"{style.bar_label} on the {view}, {shown}; colour scale {style.scale_note}."
        if style.cyclic:
            caption += (
                " Colour wheel: the visual field as the participant sees it (0° right horizontal meridian, "
                "+90° upper vertical); each hemisphere represents the opposite hemifield."
            )
        return alt, caption

    # --- maps -----------------------------------------------------------------------------------
    def surface_maps(self) -> tuple[list[Figure], list[Figure], list[str]]:
        ctx = self.ctx
        surface = ctx.surface
        try:
            meshes, source = find_meshes(
                ctx.subject.removeprefix("sub-"), ctx.space, ctx.den, ctx.fmriprep_dir, ctx.meshes
            )
        except (OSError, ValueError) as err:
            meshes, source = {}, f"the meshes could not be read ({err})"
        if not meshes:
            self.warnings.append(f"{NOT_DRAWN} the surface maps: {source}.")
            return [], [], []
        sizes = {h: v.size for h, v in surface.split(np.zeros(self._n_units())).items()}
        wrong = [h for h in sizes if h in meshes and sizes[h] != meshes[h].n_vertices]
        if wrong:
            h = wrong[0]
            self.warnings.append(
                f"{NOT_DRAWN} the surface maps: the data have {sizes[h]} vertices in hemisphere {h} "
                f"but the mesh ({source}) has {meshes[h].n_vertices}."
            )
            return [], [], []
        atlas, atlas_note = visual_areas(meshes)
        patches = {
            h: occipital_patch(m, h, atlas.labels.get(h) if atlas else None) for h, m in meshes.items()
        }
        notes = [f"Drawn on {source}. {atlas_note}"]
        if atlas is None:
            notes[0] += " No visual-area borders are drawn."
        self.atlas_drawn = atlas is not None
        flat, views = [], []
        for style, values in self._styles():
            per_hemi = surface.split(values)
            if all(p is not None for p in patches.values()):
                path, src = self._fig(f"flat-{style.label}")
                alt, caption = self._describe(style, "flattened occipital cortex")
                how = next(iter(patches.values())).centre_from
                patch_figure(style, per_hemi, meshes, patches, atlas, self._shown_text(style), path, alt)
                flat.append(
                    Figure(src, alt, f"{caption} Orthographic projection of the sphere, {how}.", "map")
                )
            path, src = self._fig(f"views-{style.label}")
            alt, caption = self._describe(
                style, "inflated occipital cortex (posterior-medial and inferior views)"
            )
            views_figure(style, per_hemi, meshes, self._shown_text(style), path, alt)
            views.append(Figure(src, alt, caption, "map wide"))
        if not all(p is not None for p in patches.values()):
            notes.append("The meshes have no registered sphere, so no flattened patch is drawn.")
        return flat, views, notes

    def _background(self, mask: np.ndarray, affine: np.ndarray) -> tuple[Any, str]:
        ctx = self.ctx
        anatomy = find_anatomy(ctx.subject.removeprefix("sub-"), ctx.space, ctx.fmriprep_dir)
        if anatomy is not None:
            return image.load_img(str(anatomy)), f"the participant's {anatomy.name}"
        means = [q.mean for q in self.quality if q.mean is not None and q.mean.size == mask.sum()]
        if means:
            return to_image(np.nan_to_num(means[0]), mask, affine), "the mean BOLD image of the first run"
        return to_image(mask[mask].astype(np.float32), mask, affine), "the brain mask"

    def volume_maps(self) -> tuple[list[Figure], list[str]]:
        grid = self.ctx.volume
        mask, affine = np.asarray(grid.mask, dtype=bool), np.asarray(grid.affine)
        if int(mask.sum()) != self._n_units():
            self.warnings.append(
                f"{NOT_DRAWN} the volume maps: the mask has {int(mask.sum())} voxels but the maps "
                f"{self._n_units()} units."
            )
            return [], []
        background, what = self._background(mask, affine)
        cut = centre_of(self.r2, self.good, mask, affine)
        shown = []
        for style, values in self._styles():
            path, src = self._fig(f"slices-{style.label}")
            alt, caption = self._describe(style, "slices through the occipital cortex")
            slices_figure(style, values, mask, affine, background, cut, self._shown_text(style), path, alt)
            shown.append(
                Figure(src, alt, f"{caption} Cut at ({', '.join(f'{c:.0f}' for c in cut)}) mm.", "map wide")
            )
        return shown, [
            f"Drawn on {what}; slices through the r²-weighted centre of the units shown. "
            "No visual-area atlas is available offline for volumes."
        ]

    def map_figures(self) -> dict[str, Any]:
        ctx = self.ctx
        if ctx.surface is not None:
            flat, views, notes = self.surface_maps()
            return {"maps": flat or views, "views": views if flat else [], "map_notes": notes}
        if ctx.volume is not None:
            shown, notes = self.volume_maps()
            return {"maps": shown, "views": [], "map_notes": notes}
        self.warnings.append(
            f"{NOT_DRAWN} the maps: the report was given neither the cortical geometry nor the volume "
            f"grid of space {ctx.space}."
        )
        return {"maps": [], "views": [], "map_notes": []}

    # --- visual field, fit, quality ---------------------------------------------------------------
    def _inside(self) -> tuple[np.ndarray, str]:
        """r² with units outside the stimulated field set to NaN, and a sentence about them."""
        m, ctx = self.maps, self.ctx
        if not ctx.fov_deg or "eccentricity" not in m or "sigma" not in m:
            return self.r2, ""
        limit = ctx.fov_deg / 2
        inside = (m["eccentricity"] <= limit) & (m["sigma"] > 0) & (m["sigma"] <= limit)
        outside = int(np.sum(self.good & ~inside))
        note = (
            f" Shown: units with eccentricity and σ up to {limit:g}° (the stimulated field); "
            f"{outside} units with r² ≥ {ctx.r2_threshold:g} lie beyond it."
        )
        return np.where(inside, self.r2, np.nan), note

    def visual_field(self) -> list[Figure]:
        ctx, m, thr = self.ctx, self.maps, self.ctx.r2_threshold
        r2, note = self._inside()
        shown = []
        if all(k in m for k in ("x", "y", "sigma")):
            path, src = self._fig("coverage")
            figures.visual_field_coverage(m["x"], m["y"], m["sigma"], r2, thr, ctx.fov_deg, path)
            shown.append(
                Figure(
                    src,
                    "pRF centres (x, y in deg) coloured by r² (fraction), and the visual-field "
                    "coverage (maximum pRF, fraction)",
                    f"Left: pRF centres of units with r² ≥ {thr:g}. Right: coverage, the maximum over "
                    f"their Gaussian pRFs; dashed: the stimulated field.{note}",
                )
            )
        if "eccentricity" in m and "sigma" in m:
            path, src = self._fig("ecc-sigma")
            _, line = figures.eccentricity_sigma(m["eccentricity"], m["sigma"], r2, thr, path)
            fit = (
                "fitted line (r²-weighted least squares): "
                f"sigma = {line[0]:.3f} × eccentricity + {line[1]:.3f}°"
                if line
                else "too few units to fit a line"
            )
            shown.append(
                Figure(
                    src,
                    "pRF size σ (deg) against eccentricity (deg), coloured by r² (fraction)",
                    f"Units with r² ≥ {thr:g}; {fit}.{note}",
                )
            )
        return shown

    def model_fit(self) -> tuple[list[Figure], list[str]]:
        ctx = self.ctx
        path, src = self._fig("r2-hist")
        extra = {k: self.maps[k] for k in self.maps if is_r2(k) and k != "r2"}
        figures.r2_histogram(self.r2, ctx.r2_threshold, path, extra)
        shown = [
            Figure(
                src,
                "histogram of variance explained r² (fraction) over units (count)",
                f"Variance explained by the {ctx.model} model"
                + (f", and {', '.join(extra)} on held-out data" if extra else "")
                + ".",
            )
        ]
        if ctx.data is None or ctx.predictions is None:
            return shown, ["The fitted predictions were not kept for this fit, so no time courses are shown."]
        if not np.isfinite(self.r2).any():
            return shown, ["No unit has a finite r²."]
        path, src = self._fig("timecourses")
        _, picks = figures.timecourses(
            np.asarray(ctx.data), np.asarray(ctx.predictions), self.r2, ctx.tr, path, ctx.r2_threshold
        )
        desc = ", ".join(f"{k} unit {v}" for k, v in picks.items())
        shown.append(
            Figure(
                src,
                "BOLD (% signal change) against time (s): data and model of three units",
                f"Preprocessed data (grey) and fitted prediction (red): {desc} (the best, the median of "
                f"units with r² ≥ {ctx.r2_threshold:g}, and one at the 10th percentile of r²).",
            )
        )
        return shown, []

    def data_quality(self) -> dict[str, Any]:
        header = (
            "run",
            "volumes",
            "median tSNR",
            f"median tSNR, r² ≥ {self.ctx.r2_threshold:g}",
            "mean FD (mm)",
            "max FD (mm)",
            "volumes FD > 0.5 mm",
        )
        rows, notes = [], []
        for q in self.quality:
            s = q.summary(self.good)
            rows.append(
                (
                    s["run"],
                    s["volumes"],
                    *(
                        f"{s[k]:.{d}f}" if s.get(k) is not None else "—"
                        for k, d in (("tsnr", 1), ("tsnr_good", 1), ("fd_mean", 3), ("fd_max", 3))
                    ),
                    s.get("fd_over", "—"),
                )
            )
            if q.problem:
                notes.append(f"{q.name}: {q.problem}.")
        if not self.quality:
            notes.append(
                "The runs were not passed to the report, so tSNR and framewise displacement are not shown."
            )
        path, src = self._fig("fd")
        fd = fd_figure(self.quality, self.ctx.tr, path)
        shown = (
            [
                Figure(
                    src,
                    "framewise displacement (mm) against time (s) per run",
                    "Framewise displacement from fMRIPrep's confounds (dummy scans dropped).",
                )
            ]
            if fd
            else []
        )
        return {
            "quality_header": header,
            "quality_rows": rows,
            "quality_notes": notes,
            "quality_figures": shown,
        }

    # --- text -------------------------------------------------------------------------------------
    def lead(self) -> str:
        ctx = self.ctx
        finite = np.isfinite(self.r2)
        text = (
            f"{int(finite.sum())} of {self._n_units()} units fitted; {int(self.good.sum())} with "
            f"r² ≥ {ctx.r2_threshold:g}"
        )
        median = _median(self.r2[self.good])
        if median is not None:
            text += f" (median r² {median:.2f}"
            for label in (k for k in self.maps if is_r2(k) and k != "r2"):
                other = _median(self.maps[label][self.good])
                if other is not None:
                    text += f", median {label} {other:.2f}"
            text += ")"
        runs = ", ".join(ctx.runs) or "runs not recorded"
        return f"{text}. {ctx.model} model; {runs}" + (f"; TR {ctx.tr:g} s." if ctx.tr else ".")

    def details(self) -> dict[str, Any]:
        ctx = self.ctx
        bases = [ctx.dataset_dir, ctx.fmriprep_dir.parent if ctx.fmriprep_dir else None]
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
            (f"Units with r² ≥ {ctx.r2_threshold:g}", int(self.good.sum())),
            (
                "Median r²",
                f"{np.median(self.r2[np.isfinite(self.r2)]):.3f}" if np.isfinite(self.r2).any() else "—",
            ),
        ]
        stimulus = None
        if ctx.design is not None:
            path, src = self._fig("stimulus")
            figures.stimulus_montage(ctx.design, ctx.fov_deg, path)
            frames, height, width = np.shape(ctx.design)
            fov = f"{ctx.fov_deg:g}°" if ctx.fov_deg else "unknown"
            stimulus = Figure(
                src,
                "stimulus aperture frames in the visual field (deg)",
                f"Aperture frames evenly spaced over the {frames} frames the model saw ({height}×{width} "
                f"pixels, field of view {fov} wide, x right, y up).",
            )
        timings = [(k, f"{v:.2f} s") for k, v in ctx.timings.items()]
        if "total" not in ctx.timings:
            timings.append(("total", f"{sum(ctx.timings.values()):.2f} s"))
        return {
            "summary_rows": rows,
            "stimulus": stimulus,
            "inputs": [relative_path(p, bases) for p in ctx.inputs],
            "settings_rows": dict_rows(ctx.settings) or [("settings", "not recorded")],
            "backend_rows": dict_rows(ctx.backend) or [("backend", "unknown")],
            "timing_rows": timings,
            "outputs": list(ctx.outputs),
        }

    def build(self) -> dict[str, Any]:
        ctx = self.ctx
        title = " · ".join(
            x
            for x in (
                f"ses-{ctx.session}" if ctx.session else "",
                f"task-{ctx.task}" if ctx.task else "",
                f"space-{ctx.space}" + (f" den-{ctx.den}" if ctx.den else ""),
                f"model-{ctx.model}",
            )
            if x
        )
        view = {"anchor": self.anchor, "title": title, "threshold": ctx.r2_threshold}
        view.update(self.map_figures())
        view["visual_field"] = self.visual_field()
        view["fit"], view["fit_notes"] = self.model_fit()
        view.update(self.data_quality())
        view["methods"], view["references"] = methods_text(
            model=ctx.model,
            settings=ctx.settings,
            backend=ctx.backend,
            preprocessing=ctx.preprocessing,
            dummy_scans=ctx.dummy_scans,
            tr=ctx.tr,
            fov_deg=ctx.fov_deg,
            maps=list(self.maps),
            atlas=self.atlas_drawn,
        )
        view.update(self.details())
        view["lead"] = self.lead()
        view["warnings"] = self.warnings
        return view


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
        _Section(ctx, fig_dir, f"sub-{label}/figures", key).build()
        for ctx, key in zip(contexts, unique, strict=True)
    ]
    command = next((ctx.command for ctx in contexts if ctx.command), None)
    about = [
        ("prfmap", __version__),
        ("Command", " ".join(command) if command else "not recorded"),
        ("Generated", datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")),
    ]
    nav = [(s["anchor"], s["title"]) for s in sections] + [("about", "About")]
    path = render_page(
        "participant.html.j2",
        output_dir / f"sub-{label}.html",
        title=f"prfmap: sub-{label}",
        subtitle="pRF maps, visual field, model fit, data quality and methods",
        nav=nav,
        sections=sections,
        about=about,
    )
    log.info("report written to %s", path)
    return path
