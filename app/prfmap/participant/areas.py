"""Visual areas of a fit's units (``--atlas``).

:func:`fit_areas` gives each unit of a surface fit its area in the chosen atlas
(:mod:`prfmap.io.area_labels`); :mod:`prfmap.derivatives.areas` writes them and the results per area.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from prfmap.derivatives.areas import UnitAreas
from prfmap.errors import MissingInputError, UsageError
from prfmap.io.area_labels import areas_on_mesh
from prfmap.io.atlases import default_atlas
from prfmap.io.geometry import UnitGeometry

logger = logging.getLogger(__name__)


def chosen_atlas(option: str, space: str) -> str | None:
    """The atlas of ``--atlas`` for a space: ``auto`` the space's own, ``none`` none.

    Parameters
    ----------
    option : str
        ``--atlas``.
    space : str
        The fit's space.

    Returns
    -------
    str or None
    """
    if option == "none":
        return None
    return default_atlas(space) if option == "auto" else option


def fit_areas(
    option: str,
    space: str,
    den: str | None,
    geometry: UnitGeometry,
    subject: str,
    fmriprep_dir: Path | None,
) -> tuple[UnitAreas | None, str]:
    """The areas of a fit's units, or why it has none.

    Parameters
    ----------
    option : str
        ``--atlas``.
    space, den : str
        The fit's space and density.
    geometry : UnitGeometry
        How its units lie on the meshes.
    subject : str
        Participant label.
    fmriprep_dir : Path, optional
        The fMRIPrep folder (fsnative's registered spheres).

    Returns
    -------
    tuple
        :class:`UnitAreas` (or None) and one sentence for the log and the report.

    Raises
    ------
    UsageError
        An atlas asked for on a volume.
    MissingInputError
        The atlas, or what carries it onto this mesh, is not on disk.
    """
    name = chosen_atlas(option, space)
    layout = geometry.surface()
    if layout is None:
        if option not in ("auto", "none"):
            raise UsageError(
                f"--atlas {option}: visual areas are on cortical surfaces, and space {space} is a "
                "volume (fit a surface space, or --atlas none)"
            )
        return None, f"No visual areas: space {space} is a volume (areas are given on surface spaces)."
    if name is None:
        return None, "No visual areas (--atlas none)."
    n_vertices = layout.n_vertices or layout.hemis
    try:
        labels = areas_on_mesh(name, space, den, n_vertices, subject, fmriprep_dir)
    except MissingInputError as err:
        if option != "auto":
            raise
        return None, f"No visual areas: {err} (the default, --atlas auto)."
    parts = []
    for hemi, count in layout.hemis.items():
        codes = labels.hemis[hemi]
        parts.append(codes[layout.vertices[hemi]] if layout.vertices is not None else codes[:count])
    codes = np.concatenate(parts) if parts else np.zeros(0, np.int64)
    codes = np.concatenate([codes, np.zeros(geometry.n_units - codes.size, np.int64)])
    areas = UnitAreas(labels, codes)
    return areas, areas.describe()
