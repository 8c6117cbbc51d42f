"""Visual areas in the outputs: the ``desc-area`` label maps and the per-area summary of a fit.

The label maps are BIDS discrete surface segmentations in the participant's ``anat`` folder, one per
hemisphere (GIFTI) or one CIFTI ``dlabel`` (cortex; subcortical grayordinates 0), e.g.
``sub-01_hemi-L_space-fsaverage5_atlas-benson14_desc-area_dseg.label.gii``: the atlas is the
``atlas`` entity, the areas are the file's label table and its sidecar's ``Levels``. The summary,
``sub-01_task-prf_space-fsaverage5_model-gauss_desc-areas_summary.tsv`` beside the fit's maps, has
one row per area; its JSON sidecar describes the columns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
from matplotlib import colormaps

from prfmap.derivatives.naming import OutputKey
from prfmap.derivatives.sidecars import with_reference
from prfmap.engine import catalog
from prfmap.io.area_labels import AreaLabels
from prfmap.io.atlases import ATLASES, AtlasSource
from prfmap.io.atomic import atomic_path, write_json_atomic, write_text_atomic
from prfmap.io.geometry import UnitGeometry
from prfmap.io.naming import bids_name

MIN_LINE_UNITS = 5
"""Fewest units a line of σ against eccentricity is fitted to (fewer: no line)."""

SUMMARY_COLUMNS = {
    "area": "the area (areas the atlas splits into dorsal and ventral halves are pooled)",
    "units": "units (vertices, grayordinates) of the fit in the area, both hemispheres",
    "units_fitted": "of those, units with a finite r2 (the others had no usable signal)",
    "units_shown": "of those, units with r2 at or above the threshold, not flagged doubtful in the "
    "status map, and with eccentricity and sigma within the stimulated radius: the units of the "
    "median_* (but r2 and cvr2) and sigma_* columns",
    "median_r2": "median variance explained in the fitted data, over the fitted units (fraction)",
    "median_cvr2": "median variance explained in held-out runs, over the fitted units (fraction; "
    "n/a without cross-validation)",
    "median_eccentricity": "median eccentricity of the units shown (deg)",
    "median_sigma": "median pRF size sigma of the units shown (deg)",
    "sigma_slope": "slope of sigma against eccentricity, r2-weighted least squares over the units "
    "shown (deg per deg; n/a with fewer than 5 units)",
    "sigma_slope_se": "its heteroskedasticity-robust (HC1) standard error",
    "sigma_intercept": "sigma at eccentricity 0 of that line (deg)",
    "sigma_intercept_se": "its heteroskedasticity-robust (HC1) standard error (deg)",
}
"""The summary's columns and their descriptions (the TSV's JSON sidecar)."""

AREA_DESC = "area"
SUMMARY_DESC = "areas"
STRUCTURES = {"L": "CortexLeft", "R": "CortexRight"}
CIFTI_STRUCTURES = {"L": "CIFTI_STRUCTURE_CORTEX_LEFT", "R": "CIFTI_STRUCTURE_CORTEX_RIGHT"}


@dataclass(frozen=True)
class UnitAreas:
    """An atlas's areas on a fit's units.

    Attributes
    ----------
    labels : AreaLabels
        The areas on each hemisphere's whole mesh (what the label maps hold).
    codes : ndarray of int, shape (units,)
        Each unit's area code (0: none, CIFTI's subcortical units included).
    """

    labels: AreaLabels
    codes: np.ndarray

    def describe(self) -> str:
        """The atlas and how it reached the mesh, in one sentence.

        Returns
        -------
        str
        """
        atlas = self.labels.atlas
        return f"Areas: {atlas.title} (--atlas {atlas.name}), {self.labels.how}."


def area_colours(n: int) -> list[tuple[float, float, float, float]]:
    """One RGBA colour per area (tab10, Dark2, tab20b), for the label tables and the report.

    Parameters
    ----------
    n : int
        Areas.

    Returns
    -------
    list of tuple
    """
    palette = [*colormaps["tab10"].colors, *colormaps["Dark2"].colors, *colormaps["tab20b"].colors]
    return [(*palette[k % len(palette)], 1.0) for k in range(n)]


def area_stem(key: OutputKey, atlas: str, hemi: str | None = None) -> str:
    """File stem of a participant's area label map (no task, no model: areas belong to the mesh).

    Parameters
    ----------
    key : OutputKey
        A fit's entities (subject, session, space, density).
    atlas : str
        The atlas.
    hemi : {"L", "R"}, optional
        Hemisphere (GIFTI).

    Returns
    -------
    str
    """
    entities = {"sub": key.subject, "ses": key.session, "hemi": hemi, "space": key.space}
    entities |= {"atlas": atlas, "res": key.res, "den": key.den, "desc": AREA_DESC}
    return bids_name(entities)


def write_area_files(
    anat: Path,
    key: OutputKey,
    geometry: UnitGeometry,
    labels: AreaLabels,
    reference_dir: Path | None = None,
) -> list[Path]:
    """Write the area label maps of a participant's space and their sidecars into ``anat``.

    Parameters
    ----------
    anat : Path
        The participant's (and session's) ``anat`` folder in the staging area.
    key : OutputKey
        A fit in that space.
    geometry : UnitGeometry
        How the fit's units lie on the meshes (CIFTI: its grayordinates).
    labels : AreaLabels
        The areas on each hemisphere's mesh.
    reference_dir : Path, optional
        The fMRIPrep dataset (``SpatialReference`` of native spaces).

    Returns
    -------
    list of Path
        Data files and sidecars.
    """
    anat.mkdir(parents=True, exist_ok=True)
    atlas = labels.atlas
    colours = area_colours(len(atlas.areas))
    sidecar = {
        "Description": f"visual areas of {atlas.title}",
        "Atlas": atlas.name,
        "AtlasSource": atlas.licence,
        "Method": f"the atlas's labels {labels.how}",
        "Levels": atlas.levels(),
    }
    if key.den:
        sidecar["Density"] = {key.den: f"the mesh density of the fit's data ({key.space}, den-{key.den})"}
    written: list[Path] = []
    if geometry.kind == "cifti":
        path = anat / f"{area_stem(key, atlas.name)}_dseg.dlabel.nii"
        written.append(_write_dlabel(path, geometry, labels, colours))
        written.append(
            write_json_atomic(
                path.with_name(path.name.replace(".dlabel.nii", ".json")),
                with_reference(sidecar, key, None, reference_dir),
            )
        )
        return written
    for hemi, codes in labels.hemis.items():
        path = anat / f"{area_stem(key, atlas.name, hemi)}_dseg.label.gii"
        written.append(_write_label_gifti(path, hemi, codes, atlas.areas, colours))
        written.append(
            write_json_atomic(
                path.with_name(path.name.replace(".label.gii", ".json")),
                with_reference(sidecar, key, hemi, reference_dir),
            )
        )
    return written


def _label_table(areas: Sequence[str], colours: Sequence[tuple[float, ...]]) -> nib.gifti.GiftiLabelTable:
    table = nib.gifti.GiftiLabelTable()
    for code, (name, rgba) in enumerate(zip(("none", *areas), [(0.0, 0.0, 0.0, 0.0), *colours], strict=True)):
        label = nib.gifti.GiftiLabel(code, *rgba)
        label.label = name
        table.labels.append(label)
    return table


def _write_label_gifti(
    path: Path, hemi: str, codes: np.ndarray, areas: Sequence[str], colours: Sequence[tuple[float, ...]]
) -> Path:
    array = nib.gifti.GiftiDataArray(
        np.asarray(codes, dtype=np.int32), intent="NIFTI_INTENT_LABEL", datatype="NIFTI_TYPE_INT32"
    )
    image = nib.gifti.GiftiImage(
        darrays=[array],
        labeltable=_label_table(areas, colours),
        meta=nib.gifti.GiftiMetaData({"AnatomicalStructurePrimary": STRUCTURES[hemi]}),
    )
    with atomic_path(path) as tmp:
        nib.save(image, tmp)
    return path


def _write_dlabel(
    path: Path, geometry: Any, labels: AreaLabels, colours: Sequence[tuple[float, ...]]
) -> Path:
    brain_models = geometry.brain_models
    values = np.zeros(len(brain_models), dtype=np.float32)
    for name, slc, model in brain_models.iter_structures():
        hemi = next((h for h, s in CIFTI_STRUCTURES.items() if s == name), None)
        if hemi is not None and hemi in labels.hemis:
            values[slc] = labels.hemis[hemi][np.asarray(model.vertex)]
    table = {0: ("none", (0.0, 0.0, 0.0, 0.0))}
    table |= {k: (area, colours[k - 1]) for k, area in enumerate(labels.atlas.areas, start=1)}
    axis = nib.cifti2.LabelAxis([labels.atlas.name], [table])
    image = nib.cifti2.Cifti2Image(values[None, :], header=(axis, brain_models))
    image.nifti_header.set_intent("ConnDenseLabel")
    with atomic_path(path) as tmp:
        nib.save(image, tmp)
    return path


def write_atlas_description(output_dir: Path, atlas: AtlasSource) -> Path:
    """Write the dataset's ``atlas-<label>_description.json`` of an atlas its label maps use.

    Parameters
    ----------
    output_dir : Path
        The output dataset.
    atlas : AtlasSource
        The atlas.

    Returns
    -------
    Path
    """
    described = {
        "Name": atlas.name,
        "Description": f"{atlas.title}: {', '.join(atlas.areas)}",
        "Template": atlas.template,
        "License": atlas.licence,
        "ReferencesAndLinks": list(atlas.references),
        "Species": "Homo sapiens",
    }
    return write_json_atomic(Path(output_dir) / f"atlas-{atlas.name}_description.json", described)


def summary_path(func: Path, key: OutputKey) -> Path:
    """A fit's ``desc-areas_summary.tsv`` (its JSON sidecar has the same stem).

    Parameters
    ----------
    func : Path
        The folder of the fit's maps.
    key : OutputKey
        The fit.

    Returns
    -------
    Path
    """
    return func / f"{key.stem(param=SUMMARY_DESC)}_summary.tsv"


def read_fit_areas(func: Path, key: OutputKey, surface: Any) -> UnitAreas | None:
    """A fit's areas read back from its outputs (``--reports-only``), or None where it has none.

    The fit's summary sidecar names the atlas; the label maps beside it in ``anat`` give the areas.

    Parameters
    ----------
    func : Path
        The folder of the fit's maps.
    key : OutputKey
        The fit.
    surface : SurfaceLayout or None
        How its units lie on the meshes (None: a volume, no areas).

    Returns
    -------
    UnitAreas or None
    """
    summary = summary_path(func, key).with_suffix(".json")
    if surface is None or not summary.is_file():
        return None
    described = json.loads(summary.read_text())
    atlas = ATLASES.get(str(described.get("Atlas")))
    if atlas is None:
        return None
    anat = func.parent / "anat"
    hemis: dict[str, np.ndarray] = {}
    dlabel = anat / f"{area_stem(key, atlas.name)}_dseg.dlabel.nii"
    if dlabel.is_file():
        image = nib.load(str(dlabel))
        values = np.rint(np.asarray(image.get_fdata())[0]).astype(np.int64)
        for name, slc, model in image.header.get_axis(1).iter_structures():
            hemi = next((h for h, s in CIFTI_STRUCTURES.items() if s == name), None)
            if hemi is not None:
                full = np.zeros(int(model.nvertices[name]), np.int64)
                full[np.asarray(model.vertex)] = values[slc]
                hemis[hemi] = full
    else:
        for hemi in surface.hemis:
            path = anat / f"{area_stem(key, atlas.name, hemi)}_dseg.label.gii"
            if not path.is_file():
                return None
            hemis[hemi] = np.asarray(nib.load(str(path)).agg_data(), dtype=np.int64).ravel()
    how = str(described.get("AtlasMethod", "")).removeprefix("the atlas's labels ")
    labels = AreaLabels(atlas, hemis, how)
    if not set(surface.hemis) <= set(hemis):
        return None
    return UnitAreas(labels, surface.gather(hemis).astype(np.int64))


def write_area_summary(
    folder: Path,
    stem: str,
    rows: Sequence[Mapping[str, Any]],
    columns: Mapping[str, str],
    described: Mapping[str, Any],
) -> list[Path]:
    """Write a per-area summary (TSV, ``n/a`` for missing values) and its JSON sidecar.

    Parameters
    ----------
    folder : Path
        The participant's ``func`` folder (or the group's) in the staging area.
    stem : str
        The file stem, ``..._desc-areas`` (``_summary.tsv`` is appended).
    rows : sequence of mapping
        One per area, keyed by ``columns``.
    columns : mapping of str to str
        Column → description.
    described : mapping
        Added to the sidecar (the atlas, the threshold).

    Returns
    -------
    list of Path
    """
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["\t".join(columns)]
    for row in rows:
        lines.append("\t".join(_cell(row[c]) for c in columns))
    tsv = write_text_atomic(folder / f"{stem}_summary.tsv", "\n".join(lines) + "\n")
    sidecar = {**{c: {"Description": d} for c, d in columns.items()}, **described}
    return [tsv, write_json_atomic(folder / f"{stem}_summary.json", sidecar)]


def _cell(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    value = float(value)
    return "n/a" if math.isnan(value) else f"{value:.6g}"


def weighted_line(x: np.ndarray, y: np.ndarray, weights: np.ndarray) -> dict[str, float]:
    """Weighted least-squares line ``y = slope · x + intercept`` with HC1 standard errors.

    Parameters
    ----------
    x, y, weights : ndarray
        Points and their positive weights.

    Returns
    -------
    dict
        ``slope``, ``slope_se``, ``intercept``, ``intercept_se`` (NaN with fewer than
        :data:`MIN_LINE_UNITS` points or no spread in ``x``).
    """
    nan = {"slope": np.nan, "slope_se": np.nan, "intercept": np.nan, "intercept_se": np.nan}
    n = x.size
    if n < MIN_LINE_UNITS or np.ptp(x) == 0:
        return nan
    root = np.sqrt(weights)
    design = np.stack([x, np.ones_like(x)], axis=1) * root[:, None]
    target = y * root
    coef, *_ = np.linalg.lstsq(design, target, rcond=None)
    residual = target - design @ coef
    bread = np.linalg.inv(design.T @ design)
    meat = (design * residual[:, None] ** 2).T @ design
    cov = bread @ meat @ bread * n / (n - 2)
    se = np.sqrt(np.diag(cov))
    return {"slope": coef[0], "slope_se": se[0], "intercept": coef[1], "intercept_se": se[1]}


def shown_units(maps: Mapping[str, np.ndarray], threshold: float, radius: float) -> np.ndarray:
    """The units a per-area line of σ uses: r² at least ``threshold``, not doubtful, inside the field.

    Parameters
    ----------
    maps : mapping of str to ndarray
        ``r2``, ``eccentricity``, ``sigma`` and, when written, ``status``.
    threshold : float
        The r² threshold.
    radius : float
        The stimulated radius (degrees): eccentricity and σ up to it.

    Returns
    -------
    ndarray of bool
    """
    r2 = np.asarray(maps["r2"], dtype=np.float64)
    ecc = np.asarray(maps["eccentricity"], dtype=np.float64)
    sigma = np.asarray(maps["sigma"], dtype=np.float64)
    doubtful = catalog.doubtful(maps["status"]) if "status" in maps else np.zeros(r2.shape, bool)
    with np.errstate(invalid="ignore"):
        return (r2 >= threshold) & ~doubtful & (ecc <= radius) & (sigma > 0) & (sigma <= radius)


def area_summary(
    maps: dict[str, np.ndarray], codes: np.ndarray, atlas_name: str, r2_threshold: float, fov_deg: float
) -> list[dict[str, Any]]:
    """One row per area of the atlas with units in the fit (:data:`SUMMARY_COLUMNS`).

    Parameters
    ----------
    maps : dict of str to ndarray
        The fit's (units,) maps: ``r2``, ``eccentricity``, ``sigma``, and ``cvr2`` and ``status``
        when written.
    codes : ndarray of int, shape (units,)
        Each unit's area.
    atlas_name : str
        The atlas.
    r2_threshold : float
        The units shown have r² at least this.
    fov_deg : float
        The stimulated field's width: eccentricity and σ up to half of it are shown.

    Returns
    -------
    list of dict
    """
    r2 = np.asarray(maps["r2"], dtype=np.float64)
    ecc = np.asarray(maps["eccentricity"], dtype=np.float64)
    sigma = np.asarray(maps["sigma"], dtype=np.float64)
    cvr2 = np.asarray(maps["cvr2"], dtype=np.float64) if "cvr2" in maps else None
    shown = shown_units(maps, r2_threshold, fov_deg / 2)
    rows = []
    for region, region_codes in ATLASES[atlas_name].region_codes().items():
        inside = np.isin(codes, region_codes)
        if not inside.any():
            continue
        fitted = inside & np.isfinite(r2)
        use = inside & shown
        line = weighted_line(ecc[use], sigma[use], r2[use])
        rows.append(
            {
                "area": region,
                "units": int(inside.sum()),
                "units_fitted": int(fitted.sum()),
                "units_shown": int(use.sum()),
                "median_r2": _median(r2[fitted]),
                "median_cvr2": _median(cvr2[fitted]) if cvr2 is not None else np.nan,
                "median_eccentricity": _median(ecc[use]),
                "median_sigma": _median(sigma[use]),
                **{f"sigma_{k}": v for k, v in line.items()},
            }
        )
    return rows


def _median(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(np.median(values)) if values.size else np.nan
