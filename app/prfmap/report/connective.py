"""A connective-field fit's section of the participant report: maps, the table per area, methods.

Built from the fit's files (:func:`prfmap.derivatives.connective.read_cf_fits`), so a run that fits
connective fields, a later pRF run and ``--reports-only`` all show the same section.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from prfmap import __version__
from prfmap.derivatives.connective import CFFitOnDisk, cf_area_rows, shown_units
from prfmap.engine.catalog.connective import CF_REFERENCE, GEODESIC_REFERENCE
from prfmap.report.html import Figure, dict_rows
from prfmap.report.legends import MapStyle, style_for
from prfmap.report.meshes import find_meshes
from prfmap.report.section_areas import report_atlas
from prfmap.report.section_maps import NOT_DRAWN
from prfmap.report.surface import occipital_patch, patch_figure

MAPS = ("cvr2", "r2", "cfsize", "polarangle", "eccentricity")
"""The maps drawn, in order: cvr2 (r2 without cross-validation), the size, the inherited visual field."""


def _number(value: Any, digits: int = 3) -> str:
    return "—" if value is None or not np.isfinite(value) else f"{value:.{digits}f}"


class ConnectiveSection:
    """The report section of one connective-field fit.

    Parameters
    ----------
    fit : CFFitOnDisk
        The fit, read back.
    fig_dir : Path
        Where its figures are written.
    rel : str
        ``fig_dir`` relative to the page.
    threshold : float
        ``--r2-threshold``: the units shown have cvr2 (r2 without cross-validation) at or above it.
    fmriprep_dir : Path, optional
        Where fsnative meshes are found.
    """

    def __init__(
        self,
        fit: CFFitOnDisk,
        fig_dir: Path,
        rel: str,
        threshold: float,
        fmriprep_dir: Path | None = None,
    ) -> None:
        self.fit, self.fig_dir, self.rel, self.threshold = fit, fig_dir, rel, threshold
        self.fmriprep_dir = fmriprep_dir
        self.prefix = fit.key.stem()
        self.warnings: list[str] = []

    def _fig(self, name: str) -> tuple[Path, str]:
        filename = f"{self.prefix}_{name}.png"
        return self.fig_dir / filename, f"{self.rel}/{filename}"

    @property
    def cross_validated(self) -> bool:
        """Whether the fit has held-out variance explained."""
        return bool(np.isfinite(self.fit.maps.get("cvr2", np.array([np.nan]))).any())

    @property
    def score(self) -> str:
        """The map the units shown are chosen by."""
        return "cvr2" if self.cross_validated else "r2"

    def build(self) -> dict[str, Any]:
        """The section's content for the page template.

        Returns
        -------
        dict
        """
        fit, settings = self.fit, self.fit.settings
        maps, shown = fit.maps, shown_units(fit.maps, self.threshold)
        fitted = np.isfinite(maps["cfsize"])
        targets = int((fitted | np.isfinite(maps["status"])).sum())
        source = settings.get("SourceArea", "the source")
        lead = (
            f"{int(fitted.sum())} of {targets} target units have a connective field from {source}; "
            f"{int(shown.sum())} explain at least {self.threshold:g} of the variance "
            f"{'of the held-out runs (cvr2)' if self.cross_validated else 'of the fitted runs (r2; one run)'}"
            f", median CF size {_number(np.nanmedian(maps['cfsize'][shown]) if shown.any() else None, 2)} mm."
        )
        figures, map_notes = self._maps(shown)
        area_rows, area_header, area_note = self._areas()
        return {
            "anchor": self.prefix,
            "title": f"Connective fields: {self._entities()} from {source}",
            "lead": lead,
            "warnings": self.warnings,
            "maps": figures,
            "map_notes": map_notes,
            "area_rows": area_rows,
            "area_header": area_header,
            "area_note": area_note,
            "methods": self._methods(),
            "references": [CF_REFERENCE, GEODESIC_REFERENCE],
            "settings_rows": dict_rows(settings),
            "outputs": self._outputs(),
        }

    def _entities(self) -> str:
        key = self.fit.key
        words = [f"ses-{key.session}"] if key.session else []
        words += [f"task-{key.task}", f"space-{key.space}"] + ([f"den-{key.den}"] if key.den else [])
        return " ".join(words)

    def _styles(self, shown: np.ndarray) -> list[tuple[MapStyle, np.ndarray]]:
        maps, out = self.fit.maps, []
        for label in MAPS:
            if label not in maps or (label == "r2" and self.cross_validated):
                continue
            if label == "cvr2" and not self.cross_validated:
                continue
            values = np.where(shown, maps[label], np.nan)
            if not np.isfinite(values).any():
                continue
            if label == "cfsize":
                top = float(np.nanpercentile(values, 95))
                style = MapStyle(
                    "cfsize",
                    "CF size",
                    "mm",
                    "viridis",
                    0.0,
                    max(top, 0.1),
                    scale_note="0 to the 95th percentile",
                )
            else:
                style = style_for(label, values[np.isfinite(values)], None)
            out.append((style, values))
        return out

    def _maps(self, shown: np.ndarray) -> tuple[list[Figure], list[str]]:
        key = self.fit.key
        try:
            meshes, where = find_meshes(key.subject, key.space, key.den, self.fmriprep_dir)
        except (OSError, ValueError) as err:
            meshes, where = {}, f"the meshes could not be read ({err})"
        surface = self.fit.surface
        sizes = {h: v.size for h, v in surface.split(np.zeros(len(shown))).items()}
        if not meshes or any(h not in meshes or meshes[h].n_vertices != n for h, n in sizes.items()):
            self.warnings.append(f"{NOT_DRAWN} the connective-field maps: {where}.")
            return [], []
        atlas = report_atlas(self.fit.areas) if self.fit.areas is not None else None
        patches = {
            h: occipital_patch(m, h, atlas.labels.get(h) if atlas else None) for h, m in meshes.items()
        }
        if any(p is None for p in patches.values()):
            self.warnings.append(
                f"{NOT_DRAWN} the connective-field maps: the meshes have no registered sphere."
            )
            return [], []
        shown_text = f"shown: {self.score} ≥ {self.threshold:g}"
        figures = []
        for style, values in self._styles(shown):
            path, src = self._fig(f"cf-{style.label}")
            alt = (
                f"{style.title} of the connective fields on the flattened occipital cortex; colour scale "
                f"{style.bar_label} from {style.vmin:g} to {style.vmax:g}; {shown_text}"
            )
            patch_figure(style, surface.split(values), meshes, patches, atlas, shown_text, path, alt)
            caption = f"{style.bar_label} on the flattened occipital cortex, {shown_text}."
            if style.label in ("polarangle", "eccentricity"):
                caption += (
                    f" Inherited from the source's pRFs ({self.fit.settings.get('InheritedFrom', '')})."
                )
            figures.append(Figure(src, alt, caption, "map"))
        notes = [f"Drawn on {where}." + (f" Borders: {atlas.source}." if atlas else "")]
        return figures, notes

    def _areas(self) -> tuple[list[list[str]], list[str], str]:
        if self.fit.areas is None:
            return [], [], "No visual areas: the fit had no atlas."
        rows = cf_area_rows(self.fit.maps, self.fit.areas, self.threshold)
        header = [
            "area",
            "units",
            "with a CF",
            "shown",
            "median r²",
            "median cvr2",
            "median size (mm)",
            "median gain",
        ]
        cells = [
            [
                r["area"],
                str(r["units"]),
                str(r["units_fitted"]),
                str(r["units_shown"]),
                _number(r["median_r2"]),
                _number(r["median_cvr2"]),
                _number(r["median_size"], 2),
                _number(r["median_gain"], 2),
            ]
            for r in rows
        ]
        shown = f"{self.score} ≥ {self.threshold:g}"
        return (
            cells,
            header,
            f"The target units per area of the atlas; shown: {shown}, the units of the medians of size "
            "and gain.",
        )

    def _methods(self) -> str:
        s = self.fit.settings
        vertices = s.get("SourceVertices", {})
        size_range = s.get("SizeRangeMm") or [float("nan"), float("nan")]
        return (
            f"Connective fields (Haak et al., 2013) were fitted with prfmap {__version__}: each target "
            f"unit's preprocessed time series was modelled as a gain times the Gaussian-weighted mean of "
            f"the time series of the source area {s.get('SourceArea', '')} in the same hemisphere ("
            + ", ".join(f"{n} vertices in hemisphere {h}" for h, n in vertices.items())
            + f"), the weights falling with the {s.get('Distances', 'geodesic distance')} (Kimmel & "
            f"Sethian, 1998). Every source vertex was tried as the centre with 16 sizes from "
            f"{size_range[0]:.2f} to {size_range[1]:.1f} mm (log-spaced), the size refined by "
            f"Levenberg–Marquardt with the centre held and the gain solved for; data and predictions "
            f"were projected off the same nuisance regressors. {s.get('Runs', '?')} run(s) were "
            f"concatenated, never averaged; cross-validation: {s.get('CrossValidation', 'none')}. "
            f"Visual field inherited from {s.get('InheritedFrom', 'none')}."
        )

    def _outputs(self) -> list[str]:
        name = f"sub-{self.fit.key.subject}"
        return sorted(str(Path(*p.parts[p.parts.index(name) :])) for p in self.fit.files)
