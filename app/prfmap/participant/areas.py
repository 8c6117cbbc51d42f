"""Visual areas of a fit's units (``--atlas``).

:func:`fit_areas` gives each unit of a surface fit its area in the chosen atlas
(:mod:`prfmap.io.area_labels`); :mod:`prfmap.derivatives.areas` writes them and the results per area.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np

from prfmap.derivatives.areas import UnitAreas
from prfmap.errors import BadDataError, MissingInputError, UsageError
from prfmap.io.area_labels import areas_on_mesh
from prfmap.io.atlases import default_atlas, is_label_file
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
    areas = UnitAreas(labels, layout.gather(labels.hemis, geometry.n_units).astype(np.int64))
    return areas, areas.describe()


@dataclass(frozen=True)
class RegionOfInterest:
    """The units ``--roi`` fits: those of some visual areas.

    Attributes
    ----------
    atlas : str or None
        The atlas the areas are named in (None: label files only).
    areas : tuple of str
        The areas as given, and the label files' names.
    units : ndarray of bool, shape (units,)
        The units inside them.
    """

    atlas: str | None
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
            f"{', '.join(self.areas)}{f' (the {self.atlas} atlas)' if self.atlas else ''} (--roi); the "
            "others are NaN in every map."
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


def _label_hemisphere(path: Path) -> str | None:
    name = path.name
    if name.startswith(("lh.", "rh.")):
        return "L" if name.startswith("lh.") else "R"
    for hemi in ("L", "R"):
        if f"hemi-{hemi}_" in name:
            return hemi
    if name.endswith(".label.gii"):
        structure = nib.load(str(path)).meta.get("AnatomicalStructurePrimary", "")
        return {"CortexLeft": "L", "CortexRight": "R"}.get(structure)
    return None


def label_vertices(path: Path, n_vertices: dict[str, int]) -> tuple[str, np.ndarray]:
    """A label file's hemisphere and the mesh vertices it holds.

    Parameters
    ----------
    path : Path
        A FreeSurfer ``.label`` (its vertex indices) or a GIFTI ``.label.gii`` (its non-zero
        vertices); the hemisphere comes from ``lh.``/``rh.``, ``hemi-L``/``hemi-R`` or the GIFTI's
        ``AnatomicalStructurePrimary``.
    n_vertices : dict of str to int
        Hemisphere → vertices of the fit's mesh.

    Returns
    -------
    tuple
        ``"L"`` or ``"R"``, and the vertex indices.

    Raises
    ------
    MissingInputError
        The file does not exist.
    UsageError
        Its hemisphere cannot be told, or it is not a hemisphere of the fit.
    BadDataError
        It does not fit the fit's mesh (another space's label).
    """
    if not path.is_file():
        raise MissingInputError(f"--roi {path}: no such label file")
    hemi = _label_hemisphere(path)
    if hemi is None:
        raise UsageError(f"--roi {path.name}: name its hemisphere (lh.*/rh.*, or hemi-L/hemi-R in the name)")
    if hemi not in n_vertices:
        raise UsageError(f"--roi {path.name}: hemisphere {hemi} is not in the fit")
    n = n_vertices[hemi]
    try:
        if path.name.endswith(".label.gii"):
            values = np.asarray(nib.load(str(path)).agg_data()).ravel()
            if values.size != n:
                raise BadDataError(
                    f"--roi {path.name} has {values.size} vertices, hemisphere {hemi} of the fit {n} "
                    "(a label of another space?)"
                )
            return hemi, np.flatnonzero(values)
        vertices = np.asarray(nib.freesurfer.read_label(str(path)), dtype=np.int64)
    except (OSError, ValueError) as err:
        raise BadDataError(f"--roi {path.name} cannot be read as a label file: {err}") from err
    if vertices.size and (vertices.min() < 0 or vertices.max() >= n):
        raise BadDataError(
            f"--roi {path.name} names vertex {int(vertices.max())}, and hemisphere {hemi} of the fit has "
            f"{n} vertices (a label of another space?)"
        )
    return hemi, vertices


def _label_units(paths: list[Path], geometry: UnitGeometry, space: str) -> np.ndarray:
    """The units inside any of the label files."""
    layout = geometry.surface()
    if layout is None:
        raise UsageError(
            f"--roi {paths[0].name}: label files are for surface spaces, and {space} is a volume"
        )
    n_vertices = dict(layout.n_vertices or layout.hemis)
    inside = {hemi: np.zeros(count, bool) for hemi, count in n_vertices.items()}
    for path in paths:
        hemi, vertices = label_vertices(path, n_vertices)
        inside[hemi][vertices] = True
    return layout.gather(inside, geometry.n_units).astype(bool)


def roi_units(
    roi: tuple[str, ...], areas: UnitAreas | None, areas_note: str, geometry: UnitGeometry, space: str
) -> RegionOfInterest | None:
    """The units of ``--roi``, or None without it.

    Parameters
    ----------
    roi : tuple of str
        ``--roi``: area names of the atlas, and label files (:func:`is_label_file`).
    areas : UnitAreas or None
        The fit's areas.
    areas_note : str
        Why there are none, when there are none.
    geometry : UnitGeometry
        How the fit's units lie on the meshes (label files).
    space : str
        The fit's space.

    Returns
    -------
    RegionOfInterest or None

    Raises
    ------
    UsageError
        Area names on a fit without areas, an area the atlas does not have, a label file on a volume.
    BadDataError
        None of the fit's units lies in the areas, or a label file does not fit the mesh.
    """
    if not roi:
        return None
    files = [Path(a) for a in roi if is_label_file(a)]
    names = [a for a in roi if not is_label_file(a)]
    inside = np.zeros(geometry.n_units, bool)
    atlas = None
    if names:
        if areas is None:
            raise UsageError(
                f"--roi {' '.join(names)} needs visual areas, and space {space} has none: {areas_note}"
            )
        atlas = areas.labels.atlas.name
        inside |= np.isin(areas.codes, areas.labels.atlas.codes_of(names))
    if files:
        inside |= _label_units(files, geometry, space)
    if not inside.any():
        raise BadDataError(f"--roi {' '.join(roi)}: no unit of space {space} lies in it")
    shown = tuple(names) + tuple(p.name for p in files)
    return RegionOfInterest(atlas, shown, inside)
