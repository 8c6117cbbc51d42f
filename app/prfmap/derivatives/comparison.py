"""Writing the per-unit comparison of several models (``model-best`` maps) with their sidecars.

``..._model-best_desc-winner_boldmap`` holds each unit's winning model as an integer whose sidecar's
``Levels`` name the models; ``desc-cvr2`` the winner's cross-validated r², ``desc-deltacvr2`` its gain
over the Gaussian and ``stat-z_desc-deltacvr2`` the test of that gain (sharing ``desc-deltacvr2``'s
sidecar, as every statistic map shares its parameter's). CIFTI: one dscalar of the three maps and
one of the statistic.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from prfmap.derivatives.naming import MAP_SUFFIX, OutputKey, sidecar_of
from prfmap.derivatives.sidecars import with_reference
from prfmap.io.atomic import write_json_atomic
from prfmap.io.geometry import UnitGeometry

COMPARISON_MODEL = "best"
"""The ``model`` entity of the comparison's maps."""

COMPARISON_MAPS = {
    "winner": ("1", "the model that wins the unit (its code; Levels name the models)"),
    "cvr2": ("1", "cross-validated variance explained of the winning model"),
    "deltacvr2": (
        "1",
        "the winning model's cross-validated variance explained less the Gaussian's (0 where the "
        "Gaussian wins)",
    ),
}
"""Label → (units, description) of each comparison map."""

Z_STATISTIC = (
    "z of the test that the winning model's held-out predictions add to the Gaussian's (NaN where "
    "the Gaussian wins): the cross-product of the held-out data with the part of the model's "
    "prediction the Gaussian's does not contain, summed over the folds, over its standard deviation "
    "were the two unrelated (Bartlett's formula for autocorrelated series)"
)


def write_comparison_files(
    folder: Path,
    key: OutputKey,
    geometry: UnitGeometry,
    maps: Mapping[str, np.ndarray],
    z: np.ndarray,
    described: Mapping[str, Any],
    reference_dir: Path | None = None,
) -> list[Path]:
    """Write the comparison's maps and their sidecars into ``folder``.

    Parameters
    ----------
    folder : Path
        The participant's ``func`` folder in the staging area.
    key : OutputKey
        The fit's entities with ``model`` :data:`COMPARISON_MODEL`.
    geometry : UnitGeometry
        How the units lie in the BOLD's format.
    maps : mapping
        :data:`COMPARISON_MAPS` label → (units,) values.
    z : ndarray, shape (units,)
        The test statistic of ``deltacvr2``.
    described : mapping
        Added to every sidecar: ``Levels`` (winner code → model), the comparison's definition,
        settings and provenance.
    reference_dir : Path, optional
        The fMRIPrep dataset (``SpatialReference`` of native spaces).

    Returns
    -------
    list of Path
        Data files and sidecars.
    """
    folder.mkdir(parents=True, exist_ok=True)
    maps = {label: np.asarray(values, dtype=np.float32) for label, values in maps.items()}
    levels = dict(described.get("Levels", {}))
    common = {k: v for k, v in described.items() if k != "Levels"}
    meta = {"Model": COMPARISON_MODEL}
    written: list[Path] = []
    if geometry.kind == "cifti":
        stat_path = folder / f"{key.stem(stat='z')}_{MAP_SUFFIX}.dscalar.nii"
        written += geometry.write_maps({"deltacvr2": np.asarray(z, np.float32)}, lambda hemi: stat_path, meta)
        path = folder / f"{key.stem()}_{MAP_SUFFIX}.dscalar.nii"
        written += geometry.write_maps(maps, lambda hemi: path, meta)
        sidecar = {
            **_head(),
            "MapNames": list(maps),
            "Parameters": {label: _parameter(label) for label in maps},
            "Levels": levels,
            "Statistics": {
                "z": {"Description": Z_STATISTIC, "File": stat_path.name, "MapNames": ["deltacvr2"]}
            },
            **common,
        }
        return written + [
            write_json_atomic(sidecar_of(path), with_reference(sidecar, key, None, reference_dir))
        ]
    extension = ".func.gii" if geometry.kind == "gifti" else ".nii.gz"
    for label, values in maps.items():
        hemis: dict[Path, str | None] = {}

        def path_for(hemi: str | None, label: str = label, stat: str | None = None, hemis=hemis) -> Path:
            path = folder / f"{key.stem(hemi=hemi, param=label, stat=stat)}_{MAP_SUFFIX}{extension}"
            if stat is None:
                hemis[path] = hemi
            return path

        files = geometry.write_maps({label: values}, path_for, {**meta, "Parameter": label})
        stat_files: list[Path] = []
        if label == "deltacvr2":
            stat_files = geometry.write_maps(
                {label: np.asarray(z, np.float32)},
                lambda hemi: path_for(hemi, stat="z"),
                {**meta, "Parameter": label, "Statistic": "z"},
            )
        written += files + stat_files
        for path in files:
            hemi = hemis.get(path)
            sidecar = {**_head(), "Parameter": label, **_parameter(label), **common}
            if label == "winner":
                sidecar["Levels"] = levels
            if stat_files:
                own = next(p.name for p in stat_files if hemi is None or f"_hemi-{hemi}_" in p.name)
                sidecar["Statistics"] = {"z": {"Description": Z_STATISTIC, "File": own}}
            written.append(
                write_json_atomic(sidecar_of(path), with_reference(sidecar, key, hemi, reference_dir))
            )
    return written


def _head() -> dict[str, str]:
    return {
        "Model": COMPARISON_MODEL,
        "ModelDescription": "per-unit comparison of the models fitted: the winner on held-out runs",
    }


def _parameter(label: str) -> dict[str, str]:
    units, description = COMPARISON_MAPS[label]
    return {"Units": units, "Description": description}
