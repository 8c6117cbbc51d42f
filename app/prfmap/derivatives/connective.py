"""A connective-field fit's outputs: its per-area summary, and its maps read back for the reports.

The maps themselves are written by :mod:`prfmap.participant.connective`; what they are is in
:data:`prfmap.engine.catalog.connective.CF_MAPS`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from bids.layout import parse_file_entities

from prfmap.derivatives.areas import UnitAreas, read_fit_areas
from prfmap.derivatives.naming import MAP_SUFFIX, PYBIDS_CONFIG, OutputKey, sidecar_of
from prfmap.engine.catalog.connective import CF_MODEL
from prfmap.io.atlases import ATLASES
from prfmap.io.bold import read_dscalar, read_gifti
from prfmap.io.geometry import SurfaceLayout

CF_SUMMARY_COLUMNS = {
    "area": "the target area (areas the atlas splits into dorsal and ventral halves are pooled)",
    "units": "target units (vertices, grayordinates) in the area, both hemispheres",
    "units_fitted": "of those, units with a connective field (the others had no usable signal)",
    "units_shown": "of those, units whose variance explained (cvr2, or r2 without cross-validation) is "
    "at or above the threshold: the units of the median_size, median_gain and median_eccentricity columns",
    "median_r2": "median variance explained in the fitted runs, over the fitted units (fraction)",
    "median_cvr2": "median variance explained in held-out runs, over the fitted units (fraction; n/a "
    "without cross-validation)",
    "median_size": "median CF size of the units shown (mm of the source's surface)",
    "median_gain": "median gain of the units shown",
    "median_eccentricity": "median eccentricity the units shown inherit from the source's pRFs (deg; "
    "n/a without a pRF fit)",
}
"""The CF summary's columns and their descriptions (the TSV's JSON sidecar)."""


def shown_units(maps: Mapping[str, np.ndarray], threshold: float) -> np.ndarray:
    """The units a CF fit's report and summary show: variance explained at or above ``threshold``.

    Held-out variance explained (``cvr2``) where the fit was cross-validated, else ``r2``.

    Parameters
    ----------
    maps : mapping
        The fit's (units,) maps by label.
    threshold : float
        ``--r2-threshold``.

    Returns
    -------
    ndarray of bool
    """
    score = maps["cvr2"] if np.isfinite(maps.get("cvr2", np.nan * maps["r2"])).any() else maps["r2"]
    return np.isfinite(maps["cfsize"]) & (np.nan_to_num(score, nan=-np.inf) >= threshold)


def _median(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else float("nan")


def cf_area_rows(maps: Mapping[str, np.ndarray], areas: UnitAreas, threshold: float) -> list[dict[str, Any]]:
    """One row of :data:`CF_SUMMARY_COLUMNS` per target area of a CF fit.

    Parameters
    ----------
    maps : mapping
        The fit's (units,) maps by label (the units outside the targets NaN).
    areas : UnitAreas
        The units' areas.
    threshold : float
        ``--r2-threshold`` (:func:`shown_units`).

    Returns
    -------
    list of dict
        The areas with a target unit, in the atlas's order.
    """
    shown = shown_units(maps, threshold)
    fitted = np.isfinite(maps["cfsize"])
    target = fitted | np.isfinite(maps["status"])
    eccentricity = maps.get("eccentricity", np.full(len(fitted), np.nan))
    rows = []
    for region, codes in ATLASES[areas.labels.atlas.name].region_codes().items():
        inside = np.isin(areas.codes, codes) & target
        if not inside.any():
            continue
        here, fit = shown & inside, fitted & inside
        rows.append(
            {
                "area": region,
                "units": int(inside.sum()),
                "units_fitted": int(fit.sum()),
                "units_shown": int(here.sum()),
                "median_r2": _median(maps["r2"][fit]),
                "median_cvr2": _median(maps["cvr2"][fit]),
                "median_size": _median(maps["cfsize"][here]),
                "median_gain": _median(maps["gain"][here]),
                "median_eccentricity": _median(eccentricity[here]),
            }
        )
    return rows


@dataclass(frozen=True)
class CFFitOnDisk:
    """A connective-field fit read back from an output folder.

    Attributes
    ----------
    key : OutputKey
        Its entities.
    maps : dict of str to ndarray
        Its (units,) maps by label.
    surface : SurfaceLayout
        How its units lie on the hemispheres' meshes.
    settings : dict
        ``CFSettings`` of its sidecars.
    files : list of Path
        Its map files and sidecars.
    areas : UnitAreas or None
        Its units' areas, when the fit had an atlas.
    """

    key: OutputKey
    maps: dict[str, np.ndarray]
    surface: SurfaceLayout
    settings: dict[str, Any]
    files: list[Path]
    areas: UnitAreas | None


def read_cf_fits(output_dir: Path, subject: str) -> list[CFFitOnDisk]:
    """Every connective-field fit of a participant under ``output_dir``.

    Parameters
    ----------
    output_dir : Path
        The output folder (or a staging folder holding the participant's new set).
    subject : str
        Participant label without ``sub-``.

    Returns
    -------
    list of CFFitOnDisk
        In file-name order.
    """
    found: dict[OutputKey, list[tuple[Path, dict]]] = defaultdict(list)
    pattern = f"**/func/sub-{subject}_*_model-{CF_MODEL}_*{MAP_SUFFIX}.*"
    for path in sorted(Path(output_dir, f"sub-{subject}").glob(pattern)):
        if path.name.endswith(".json"):
            continue
        entities = parse_file_entities(str(path), config=["bids", "derivatives", PYBIDS_CONFIG])
        key = OutputKey(
            subject,
            entities.get("session"),
            str(entities.get("task")),
            str(entities.get("space")),
            entities.get("density"),
            entities.get("resolution"),
            CF_MODEL,
        )
        found[key].append((path, entities))
    fits = []
    for key, files in found.items():
        maps, hemis = _read_maps(files)
        surface = hemis if isinstance(hemis, SurfaceLayout) else SurfaceLayout(hemis)
        sidecar = json.loads(sidecar_of(files[0][0]).read_text())
        paths = [p for p, _ in files] + [sidecar_of(p) for p, _ in files]
        areas = read_fit_areas(files[0][0].parent, key, surface)
        fits.append(CFFitOnDisk(key, maps, surface, sidecar.get("CFSettings", {}), paths, areas))
    return fits


def _read_maps(files: list[tuple[Path, dict]]) -> tuple[dict[str, np.ndarray], Any]:
    """The maps of one fit's files as (units,) arrays, and its layout (CIFTI) or hemisphere sizes."""
    dscalar = [p for p, _ in files if p.name.endswith(".dscalar.nii")]
    if dscalar:
        maps, geometry = read_dscalar(dscalar[0])
        return {k: np.asarray(v, dtype=np.float64) for k, v in maps.items()}, geometry.surface()
    per: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for path, entities in files:
        per[str(entities["param"])][str(entities["hemi"])] = read_gifti(path)[:, 0].astype(np.float64)
    hemis = [h for h in ("L", "R") if all(h in v for v in per.values())]
    maps = {label: np.concatenate([values[h] for h in hemis]) for label, values in per.items()}
    return maps, {h: len(next(iter(per.values()))[h]) for h in hemis}
