"""The map figures of a fit's report section: surfaces (occipital patches and views) or volume slices."""

from __future__ import annotations

from typing import Any

import numpy as np
from nilearn import image

from prfmap.engine import catalog
from prfmap.report.atlas import visual_areas
from prfmap.report.html import Figure
from prfmap.report.legends import MapStyle, category_index, centre_se_style, map_labels, style_for
from prfmap.report.meshes import find_meshes
from prfmap.report.section_areas import report_atlas
from prfmap.report.surface import occipital_patch, patch_figure, views_figure
from prfmap.report.uncertainty import CENTRE_SE
from prfmap.report.volume import SliceView, centre_of, find_anatomy, slices_figure, to_image

NOT_DRAWN = "Could not draw"
"""How a warning about a figure that could not be drawn begins (tests look for it)."""


class MapFigures:
    """The map figures of :class:`prfmap.report.section.FitSection`, which it inherits.

    Reads the section's ``ctx``, ``maps``, ``good``, ``doubtful``, ``r2``, ``centre_se``,
    ``warnings``, ``threshold_text`` and ``_fig``; sets ``atlas_drawn`` and ``atlas`` (the
    visual areas the surface maps were drawn with, or None). ``draw_views`` False draws no 3-D
    views where flattened patches are drawn.
    """

    draw_views: bool = True

    def _styles(self) -> list[tuple[MapStyle, np.ndarray]]:
        out = []
        for label in map_labels(self.maps):
            # the status map shows the doubtful estimates the other maps leave out
            good = (self.good | self.doubtful) if label == "status" else self.good
            shown = np.where(good, self.maps[label], np.nan)
            style = style_for(label, shown[good], self.ctx.fov_deg, self.r2[good])
            out.append((style, category_index(style, shown) if style.categories else shown))
        if self.centre_se is not None:  # doubtful (uncertain) units included: where the centre is loose
            good = self.good | self.doubtful
            shown = np.where(good, self.centre_se, np.nan)
            style = centre_se_style(self.centre_se[self.good], self.ctx.fov_deg)  # scale: the settled
            out.append((style, np.where(shown > style.vmax, style.vmax, shown)))
        return out

    def _shown_text(self, style: MapStyle) -> str:
        if style.categories or style.label == CENTRE_SE:
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
        if style.label == CENTRE_SE:
            caption += (
                " The larger of the standard errors of x and y at each unit (Laplace approximation, see "
                f"Methods): the number the uncertain status flag compares with "
                f"{catalog.share_of(catalog.CENTRE_SE_LIMIT)}the stimulated radius."
            )
        if style.cyclic:
            caption += (
                " Colour wheel: the visual field as the participant sees it (0° right horizontal meridian, "
                "+90° upper vertical); each hemisphere represents the opposite hemifield."
            )
        return alt, caption

    # --- maps -----------------------------------------------------------------------------------
    def surface_maps(self) -> tuple[list[Figure], list[Figure], list[str]]:
        """Occipital patches and 3-D views of every map on the space's meshes, with notes."""
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
        atlas, atlas_note = self._atlas(meshes)
        patches = {
            h: occipital_patch(m, h, atlas.labels.get(h) if atlas else None) for h, m in meshes.items()
        }
        notes = [f"Drawn on {source}. {atlas_note}"]
        if atlas is None:
            notes[0] += " No visual-area borders are drawn."
        self.atlas_drawn = atlas.key if atlas is not None else False
        self.atlas = atlas
        flat, views = [], []
        flat_drawn = all(p is not None for p in patches.values())
        for style, values in self._styles():
            per_hemi = surface.split(values)
            if flat_drawn:
                path, src = self._fig(f"flat-{style.label}")
                alt, caption = self._describe(style, "flattened occipital cortex")
                how = next(iter(patches.values())).centre_from
                patch_figure(style, per_hemi, meshes, patches, atlas, self._shown_text(style), path, alt)
                flat.append(
                    Figure(src, alt, f"{caption} Orthographic projection of the sphere, {how}.", "map")
                )
                if not self.draw_views:
                    continue
            path, src = self._fig(f"views-{style.label}")
            alt, caption = self._describe(
                style, "inflated occipital cortex (posterior-medial and inferior views)"
            )
            views_figure(style, per_hemi, meshes, self._shown_text(style), path, alt)
            views.append(Figure(src, alt, caption, "map wide"))
        if not flat_drawn:
            notes.append("The meshes have no registered sphere, so no flattened patch is drawn.")
        return flat, views, notes

    def _atlas(self, meshes: dict[str, Any]) -> tuple[Any, str]:
        """The visual areas to draw: the fit's (``--atlas``), else HCP-MMP1.0 where it reaches the meshes."""
        areas = self.ctx.areas
        if areas is not None and all(
            h in meshes and labels.size == meshes[h].n_vertices for h, labels in areas.labels.hemis.items()
        ):
            atlas = report_atlas(areas)
            return atlas, f"Borders: {atlas.source}."
        return visual_areas(meshes)

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
        """Slices of every map over the participant's anatomy (or the brain mask), with notes."""
        grid = self.ctx.volume
        mask, affine = np.asarray(grid.mask, dtype=bool), np.asarray(grid.affine)
        if int(mask.sum()) != self._n_units():
            self.warnings.append(
                f"{NOT_DRAWN} the volume maps: the mask has {int(mask.sum())} voxels but the maps "
                f"{self._n_units()} units."
            )
            return [], []
        background, what = self._background(mask, affine)
        view = SliceView(mask, affine, background, centre_of(self.r2, self.good, mask, affine))
        shown = []
        for style, values in self._styles():
            path, src = self._fig(f"slices-{style.label}")
            alt, caption = self._describe(style, "slices through the occipital cortex")
            slices_figure(style, values, view, self._shown_text(style), path, alt)
            cut = ", ".join(f"{c:.0f}" for c in view.cut)
            shown.append(Figure(src, alt, f"{caption} Cut at ({cut}) mm.", "map wide"))
        return shown, [
            f"Drawn on {what}; slices through the r²-weighted centre of the units shown. "
            "No visual-area atlas is available offline for volumes."
        ]

    def map_figures(self) -> dict[str, Any]:
        """The section's map figures: surfaces, volumes, or a warning that neither could be drawn."""
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
