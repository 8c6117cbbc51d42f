"""Maps written by the participant level, read back as (units,) arrays in a fit's unit order."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prfmap.io.bold import read_dscalar, read_gifti, read_volume_map
from prfmap.io.geometry import SurfaceLayout

log = logging.getLogger(__name__)

READ_REMEDY = "run the participant level again (without --reports-only) to re-create it"
"""What a message about a map that cannot be read tells the user to do."""


def read_unit_maps(
    files: Sequence[tuple[Path, Mapping[str, Any]]],
    surface: SurfaceLayout | None,
    mask: np.ndarray | None,
    key: Callable[[Mapping[str, Any], str], Any],
) -> dict[Any, np.ndarray]:
    """Map files as (units,) arrays in the unit order of the fit they belong to.

    CIFTI ``dscalar`` maps are taken as written; GIFTI maps (one per parameter and hemisphere) are
    joined over ``surface``'s hemispheres, a map without every hemisphere left out; volumes are read
    at the voxels of ``mask``, a volume on another grid left out with a warning.

    Parameters
    ----------
    files : sequence of (Path, mapping)
        The files and their pybids entities (GIFTI and volumes need ``param``).
    surface : SurfaceLayout or None
        How the fit's units lie on the hemispheres (GIFTI).
    mask : ndarray of bool or None
        The fit's voxels (volumes).
    key : callable
        ``(entities, label) -> key`` of a map in the result (``label`` is the map's parameter, or
        a CIFTI map's name).

    Returns
    -------
    dict
    """
    out: dict[Any, np.ndarray] = {}
    per: dict[Any, dict[str, np.ndarray]] = defaultdict(dict)
    for path, entities in files:
        if path.name.endswith(".dscalar.nii"):
            maps, _ = read_dscalar(path)
            out.update({key(entities, label): np.asarray(v) for label, v in maps.items()})
        elif path.name.endswith(".func.gii") and "param" in entities and "hemi" in entities:
            per[key(entities, str(entities["param"]))][str(entities["hemi"])] = read_gifti(path, READ_REMEDY)[
                :, 0
            ]
        elif path.name.endswith((".nii.gz", ".nii")) and "param" in entities and mask is not None:
            data, _ = read_volume_map(path)
            if data.shape == mask.shape:
                out[key(entities, str(entities["param"]))] = data[mask]
            else:
                log.warning("%s does not match the parameter maps' grid; the report leaves it out", path.name)
    hemis = list(surface.hemis) if surface is not None else []
    for label, values in per.items():
        if hemis and set(values) >= set(hemis):
            out[label] = np.concatenate([values[h] for h in hemis])
    return out
