"""Writing a fit's maps and time series, with their sidecars; every file is written atomically."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from prfmap.derivatives.naming import MAP_SUFFIX, OutputKey, sidecar_of
from prfmap.derivatives.sidecars import map_sidecar, with_reference
from prfmap.engine.settings import FitSettings
from prfmap.io.atomic import write_json_atomic
from prfmap.io.geometry import UnitGeometry


def write_map_files(
    folder: Path,
    key: OutputKey,
    geometry: UnitGeometry,
    maps: Mapping[str, np.ndarray],
    settings: FitSettings | None,
    provenance: Mapping[str, Any],
    reference_dir: Path | None = None,
) -> list[Path]:
    """Write a fit's parameter maps and their sidecars into ``folder``.

    GIFTI and NIfTI: one file per parameter (and hemisphere); CIFTI: one ``dscalar`` holding
    every parameter.

    Parameters
    ----------
    folder : Path
        The participant's ``func`` folder (inside the staging folder).
    key : OutputKey
        The entities of the fit.
    geometry : UnitGeometry
        How the units lie in the BOLD's format.
    maps : mapping
        Parameter label → (units,) float32 values.
    settings : mapping
        ``FitResult.settings``.
    provenance : mapping
        Added to every sidecar (:func:`map_sidecar`).
    reference_dir : Path, optional
        The fMRIPrep dataset, where the ``SpatialReference`` of native spaces is looked up.

    Returns
    -------
    list of Path
        The data files and sidecars written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if geometry.kind == "cifti":
        path = folder / f"{key.stem()}_{MAP_SUFFIX}.dscalar.nii"
        written += geometry.write_maps(maps, lambda hemi: path, {"Model": key.model})
        sidecar = map_sidecar(None, key.model, settings, {**provenance, "MapNames": list(maps)})
        sidecar["MapNames"] = list(maps)
        sidecar = with_reference(sidecar, key, None, reference_dir)
        return written + [write_json_atomic(sidecar_of(path), sidecar)]
    extension = ".func.gii" if geometry.kind == "gifti" else ".nii.gz"
    hemis: dict[Path, str | None] = {}
    for label, values in maps.items():

        def path_for(hemi: str | None, label: str = label) -> Path:
            path = folder / f"{key.stem(hemi=hemi, param=label)}_{MAP_SUFFIX}{extension}"
            hemis[path] = hemi
            return path

        files = geometry.write_maps({label: values}, path_for, {"Model": key.model, "Parameter": label})
        written += files
        sidecar = map_sidecar(label, key.model, settings, provenance)
        written += [
            write_json_atomic(sidecar_of(path), with_reference(sidecar, key, hemis.get(path), reference_dir))
            for path in files
        ]
    return written


def write_series_files(
    folder: Path,
    key: OutputKey,
    geometry: UnitGeometry,
    series: Mapping[str, tuple[np.ndarray, str]],
    tr: float,
    provenance: Mapping[str, Any],
    reference_dir: Path | None = None,
) -> list[Path]:
    """Write (units, frames) time series (``desc-<label>_bold``) and their sidecars into ``folder``.

    Parameters
    ----------
    series : mapping
        ``desc`` label → (values, description), e.g. ``{"gaussprediction": (predictions,
        "fitted model time series")}``.
    tr : float
        Seconds between frames.

    Other parameters are those of :func:`write_map_files`.

    Returns
    -------
    list of Path
        The data files and sidecars written.
    """
    extension = {"gifti": ".func.gii", "cifti": ".dtseries.nii"}.get(geometry.kind, ".nii.gz")
    written: list[Path] = []
    hemis: dict[Path, str | None] = {}
    for desc, (values, description) in series.items():

        def path_for(hemi: str | None, desc: str = desc) -> Path:
            path = folder / f"{key.stem(hemi=hemi, desc=desc)}_bold{extension}"
            hemis[path] = hemi
            return path

        files = geometry.write_series(np.asarray(values, np.float32), path_for, tr)
        sidecar = {
            "Description": f"{description}, after removing the nuisance subspace (DCT "
            "high-pass, confounds, run means) from data and predictions alike",
            "RepetitionTime": tr,
            "Model": key.model,
            "Units": "percent signal change",
            **provenance,
        }
        if geometry.kind == "volume":  # only the brain mask's voxels are written (NaN elsewhere)
            sidecar["SkullStripped"] = True
        for path in files:
            own = with_reference(sidecar, key, hemis.get(path), reference_dir)
            written += [path, write_json_atomic(sidecar_of(path), own)]
    return written
