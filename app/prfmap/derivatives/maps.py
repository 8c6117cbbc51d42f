"""Writing a fit's maps and time series, with their sidecars; every file is written atomically."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from prfmap.derivatives.naming import MAP_SUFFIX, OutputKey, sidecar_of
from prfmap.derivatives.sidecars import map_sidecar, with_reference
from prfmap.engine.catalog.settings import FitSettings
from prfmap.io.atomic import write_json_atomic
from prfmap.io.geometry import UnitGeometry

STATISTICS = {
    "se": (
        "standard error of the parameter: Laplace (Gauss-Newton) approximation at the unit's final "
        "estimate, from the information matrix of every parameter (the linear weights included) built "
        "from the Jacobian of the prewhitened residual (FitSettings.noise_model), times the residual "
        "variance (residual sum of squares over frames minus nuisance regressors minus fitted "
        "parameters), plus the sandwich term where FitSettings.covariance is 'sandwich'; x's and y's "
        "widened where the residual sum of squares along their profile path rises more slowly than "
        "that curvature says (to where it has risen by 1.96 squared residual variances); derived "
        "parameters (eccentricity, polar angle, model extras) by the delta method; inf where the "
        "information matrix is singular, NaN where the unit was not fitted"
    ),
    "ci95lower": (
        "lower end of the parameter's 95 % interval: the Laplace interval of its internal "
        "(transformed: log for sigma) value mapped back, so it respects the parameter's range and is "
        "asymmetric where a symmetric one would be wrong (sigma near its floor)"
    ),
    "ci95upper": "upper end of the parameter's 95 % interval (see ci95lower)",
}
"""What each ``stat`` of a participant's maps is, for the sidecars."""


def write_map_files(
    folder: Path,
    key: OutputKey,
    geometry: UnitGeometry,
    maps: Mapping[str, np.ndarray],
    settings: FitSettings | None,
    provenance: Mapping[str, Any],
    reference_dir: Path | None = None,
    statistics: Mapping[str, Mapping[str, np.ndarray]] | None = None,
) -> list[Path]:
    """Write a fit's parameter maps, their statistics' maps and the sidecars into ``folder``.

    GIFTI and NIfTI: one file per parameter (and hemisphere); CIFTI: one ``dscalar`` holding
    every parameter (and one per statistic). A statistic's map (the ``stat`` entity) has no sidecar
    of its own: its parameter's describes it under ``Statistics``. pybids hands it that sidecar,
    the only one whose entities it has, since plain pybids does not know ``stat`` and would see a
    statistic's own sidecar as its parameter's.

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
    statistics : mapping, optional
        Statistic (:data:`STATISTICS`: ``se``, ``ci95lower``, ``ci95upper``) → parameter label →
        (units,) values.

    Returns
    -------
    list of Path
        The data files and sidecars written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    statistics = statistics or {}
    written: list[Path] = []
    if geometry.kind == "cifti":
        described: dict[str, Any] = {}
        for stat, stat_maps in statistics.items():
            stat_path = folder / f"{key.stem(stat=stat)}_{MAP_SUFFIX}.dscalar.nii"
            written += geometry.write_maps(stat_maps, lambda hemi, p=stat_path: p, {"Model": key.model})
            described[stat] = {
                "Description": STATISTICS[stat],
                "File": stat_path.name,
                "MapNames": list(stat_maps),
            }
        path = folder / f"{key.stem()}_{MAP_SUFFIX}.dscalar.nii"
        written += geometry.write_maps(maps, lambda hemi: path, {"Model": key.model})
        sidecar = map_sidecar(None, key.model, settings, {**provenance, "MapNames": list(maps)})
        sidecar["MapNames"] = list(maps)
        if described:
            sidecar["Statistics"] = described
        sidecar = with_reference(sidecar, key, None, reference_dir)
        return written + [write_json_atomic(sidecar_of(path), sidecar)]
    extension = ".func.gii" if geometry.kind == "gifti" else ".nii.gz"
    for label, values in maps.items():
        hemis: dict[Path, str | None] = {}

        def path_for(hemi: str | None, label: str = label, stat: str | None = None, hemis=hemis) -> Path:
            path = folder / f"{key.stem(hemi=hemi, param=label, stat=stat)}_{MAP_SUFFIX}{extension}"
            if stat is None:
                hemis[path] = hemi
            return path

        files = geometry.write_maps({label: values}, path_for, {"Model": key.model, "Parameter": label})
        written += files
        described = {}
        for stat, stat_maps in statistics.items():
            if label in stat_maps:
                stat_files = geometry.write_maps(
                    {label: stat_maps[label]},
                    lambda hemi, stat=stat: path_for(hemi, stat=stat),
                    {"Model": key.model, "Parameter": label, "Statistic": stat},
                )
                written += stat_files
                described[stat] = stat_files
        sidecar = map_sidecar(label, key.model, settings, provenance)
        for path in files:
            own = dict(sidecar)
            if described:  # the statistics' files of this map's hemisphere
                hemi = hemis.get(path)
                own["Statistics"] = {
                    stat: {
                        "Description": STATISTICS[stat],
                        "File": next(p.name for p in paths if hemi is None or f"_hemi-{hemi}_" in p.name),
                    }
                    for stat, paths in described.items()
                }
            written.append(
                write_json_atomic(sidecar_of(path), with_reference(own, key, hemis.get(path), reference_dir))
            )
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
