"""Visual areas of a fit's units (``--atlas``).

:func:`fit_areas` gives each unit of a surface fit its area in the chosen atlas
(:mod:`prfmap.io.area_labels`); :mod:`prfmap.derivatives.areas` writes them and the results per area.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prfmap.derivatives.areas import UnitAreas
from prfmap.errors import BadDataError, MissingInputError, UsageError
from prfmap.io.area_labels import areas_on_mesh
from prfmap.io.atlases import default_atlas
from prfmap.io.geometry import UnitGeometry


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


@dataclass(frozen=True)
class RegionOfInterest:
    """The units ``--roi`` fits: those of some visual areas.

    Attributes
    ----------
    atlas : str
        The atlas the areas are named in.
    areas : tuple of str
        The areas, as given.
    units : ndarray of bool, shape (units,)
        The units inside them.
    """

    atlas: str
    areas: tuple[str, ...]
    units: np.ndarray

    def describe(self) -> str:
        """What was fitted, in one sentence (the log, the report and the sidecars).

        Returns
        -------
        str
        """
        return (
            f"Only {int(self.units.sum())} of {self.units.size} units fitted: those of "
            f"{', '.join(self.areas)} in the {self.atlas} atlas (--roi); the others are NaN in every map."
        )

    def record(self) -> dict[str, object]:
        """The sidecars' ``RegionOfInterest``.

        Returns
        -------
        dict
        """
        return {
            "Atlas": self.atlas,
            "Areas": list(self.areas),
            "Units": int(self.units.sum()),
            "Description": "only these units were fitted (--roi); the others are NaN in every map, "
            "status bit 1 (no signal) included",
        }


def roi_units(
    roi: tuple[str, ...], areas: UnitAreas | None, areas_note: str, space: str
) -> RegionOfInterest | None:
    """The units of ``--roi``, or None without it.

    Parameters
    ----------
    roi : tuple of str
        ``--roi``: area names of the atlas.
    areas : UnitAreas or None
        The fit's areas.
    areas_note : str
        Why there are none, when there are none.
    space : str
        The fit's space.

    Returns
    -------
    RegionOfInterest or None

    Raises
    ------
    UsageError
        ``--roi`` on a fit without areas, or an area the atlas does not have.
    BadDataError
        None of the fit's units lies in the areas.
    """
    if not roi:
        return None
    if areas is None:
        raise UsageError(
            f"--roi {' '.join(roi)} needs visual areas, and space {space} has none: {areas_note}"
        )
    atlas = areas.labels.atlas
    inside = np.isin(areas.codes, atlas.codes_of(roi))
    if not inside.any():
        raise BadDataError(
            f"--roi {' '.join(roi)}: no unit of space {space} lies in these {atlas.name} areas"
        )
    return RegionOfInterest(atlas.name, tuple(roi), inside)
