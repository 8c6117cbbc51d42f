"""Spatial smoothing of BOLD runs before the fit (``--smooth-fwhm``), with nilearn's smoothers.

- **Volumes**: :func:`nilearn.image.smooth_img`, a Gaussian of the given FWHM along the voxel axes,
  applied to the whole image before the brain mask is applied, exactly as
  ``NiftiMasker(smoothing_fwhm=...)`` does (values outside the mask take part; non-finite ones count
  as 0).
- **Surfaces** (GIFTI, and the cortex of CIFTI): :func:`nilearn.image.smooth_img` on a
  :class:`nilearn.surface.SurfaceImage` of each hemisphere's midthickness surface
  (:func:`prfmap.io.meshes.find_midthickness`): FreeSurfer's nearest-neighbour smoothing (each
  iteration averages a vertex with the mean of its neighbours, half and half), with FreeSurfer's
  number of iterations for the FWHM on a mesh of that average vertex area (``MRISfwhm2niters``).
  Vertices whose series cannot be fitted (non-finite, or constant such as a medial wall of zeros),
  and the vertices a CIFTI file leaves out, do not take part: the smoothing is normalised by the
  smoothed weight of the vertices that do, so they pull no neighbour towards 0.
- **CIFTI subcortical voxels**: nilearn's volume smoothing of the grayordinate voxels, normalised
  in the same way (voxels outside the grayordinates take no part; all structures together).

Each unit's series is then a weighted mean of its neighbours': the per-unit standard errors stay
valid for its smoothed series, but neighbouring units' errors are correlated, so a count of units
overstates how many independent measurements there are.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import nibabel as nib
import numpy as np
from nilearn.image import smooth_img
from nilearn.surface import InMemoryMesh, PolyMesh, SurfaceImage

from prfmap.config import MAX_SMOOTH_FWHM_MM
from prfmap.errors import BadDataError, MissingInputError, UsageError
from prfmap.io.meshes import TemplateMeshes, find_midthickness
from prfmap.io.runs import RunInput

BLOCK_BYTES = 2**28
"""The volumes smoothed at a time hold at most this many bytes (the smoothing copies them)."""


@dataclass(frozen=True)
class Smoothing:
    """What ``--smooth-fwhm`` does to one space's runs.

    Attributes
    ----------
    fwhm_mm : float
        Full width at half maximum of the kernel, in millimetres.
    meshes : dict
        Surface data: each hemisphere's midthickness surface (coordinates, triangles); empty for volumes.
    source : str
        Which surfaces they are.
    iterations : dict
        Surface data: FreeSurfer's number of smoothing iterations on each hemisphere.
    """

    fwhm_mm: float
    meshes: TemplateMeshes = field(default_factory=dict)
    source: str = ""
    iterations: dict[str, int] = field(default_factory=dict)

    def describe(self) -> str:
        """One phrase for the log and the sidecar: the kernel and where it was applied.

        Returns
        -------
        str
        """
        if not self.meshes:
            return f"a {self.fwhm_mm:g} mm FWHM Gaussian in the volume (nilearn.image.smooth_img)"
        steps = ", ".join(f"{h} {n}" for h, n in self.iterations.items())
        return (
            f"a {self.fwhm_mm:g} mm FWHM kernel on {self.source} (nilearn.image.smooth_img: FreeSurfer's "
            f"nearest-neighbour smoothing, iterations {steps})"
        )


def mean_vertex_area(coords: np.ndarray, faces: np.ndarray) -> float:
    """A mesh's area over its number of vertices, in square millimetres.

    Parameters
    ----------
    coords : ndarray, shape (vertices, 3)
        Vertex coordinates (mm).
    faces : ndarray, shape (faces, 3)
        Triangles.

    Returns
    -------
    float
    """
    a, b, c = (coords[faces[:, k]] for k in range(3))
    return float(np.sum(np.linalg.norm(np.cross(b - a, c - a), axis=1)) / 2 / len(coords))


def surface_iterations(fwhm_mm: float, area_per_vertex: float) -> int:
    """FreeSurfer's number of nearest-neighbour iterations for a FWHM (``MRISfwhm2niters``, as nilearn).

    Parameters
    ----------
    fwhm_mm : float
        Kernel FWHM in millimetres.
    area_per_vertex : float
        The mesh's mean area per vertex, in square millimetres.

    Returns
    -------
    int
    """
    sigma = fwhm_mm / math.sqrt(math.log(256.0))
    return math.floor(1.14 * 4 * math.pi * sigma**2 / (7 * area_per_vertex) + 0.5)


def smallest_surface_fwhm(area_per_vertex: float) -> float:
    """The smallest FWHM (mm, rounded up to 0.1) that gives at least one iteration on a mesh.

    Parameters
    ----------
    area_per_vertex : float
        The mesh's mean area per vertex, in square millimetres.

    Returns
    -------
    float
    """
    sigma = math.sqrt(0.5 * 7 * area_per_vertex / (1.14 * 4 * math.pi))
    return math.ceil(sigma * math.sqrt(math.log(256.0)) * 10 + 1e-9) / 10


def smoothing_for(run: RunInput, fwhm_mm: float | None, fmriprep_dir: Any) -> Smoothing | None:
    """The smoothing of a run's space: its surfaces found and checked, or the volume's kernel.

    Parameters
    ----------
    run : RunInput
        Any run of the space (all runs of a fit share it).
    fwhm_mm : float or None
        ``--smooth-fwhm``; None or 0 for none.
    fmriprep_dir : path-like or None
        Searched for the participant's surfaces (fsnative).

    Returns
    -------
    Smoothing or None

    Raises
    ------
    MissingInputError
        No midthickness surface of the run's space is on disk.
    UsageError
        The FWHM is too small for the mesh (FreeSurfer's smoothing would do no iteration), or wider
        than :data:`prfmap.config.MAX_SMOOTH_FWHM_MM`.
    """
    if not fwhm_mm:
        return None
    if not 0 < fwhm_mm <= MAX_SMOOTH_FWHM_MM:
        raise UsageError(f"--smooth-fwhm {fwhm_mm:g} is not in (0, {MAX_SMOOTH_FWHM_MM:g}] mm")
    if run.kind == "volume":
        return Smoothing(float(fwhm_mm))
    meshes, source = find_midthickness(run.subject, run.space, run.den, fmriprep_dir)
    if not meshes:
        raise MissingInputError(
            f"--smooth-fwhm smooths surface data on the midthickness surface, but {source}"
        )
    iterations = {}
    for hemi, (coords, faces) in meshes.items():
        area = mean_vertex_area(coords, faces)
        iterations[hemi] = surface_iterations(fwhm_mm, area)
        if iterations[hemi] < 1:
            raise UsageError(
                f"--smooth-fwhm {fwhm_mm:g} smooths nothing on {run.space}'s mesh (its vertices are "
                f"{math.sqrt(area):.2g} mm apart, so FreeSurfer's smoothing does no iteration); use at least "
                f"{smallest_surface_fwhm(area):g} mm"
            )
    return Smoothing(float(fwhm_mm), meshes, source, iterations)


def smooth_volume(data: np.ndarray, affine: np.ndarray, fwhm_mm: float) -> np.ndarray:
    """Smooth a 4-D image's volumes in place with :func:`nilearn.image.smooth_img`, a block at a time.

    Parameters
    ----------
    data : ndarray, shape (x, y, z, volumes)
        float32; overwritten with the smoothed volumes.
    affine : ndarray, shape (4, 4)
        The image's affine (its voxel sizes set the kernel in voxels).
    fwhm_mm : float
        Kernel FWHM in millimetres.

    Returns
    -------
    ndarray
        ``data``.
    """
    frames = max(1, BLOCK_BYTES // max(1, data[..., :1].nbytes))
    for start in range(0, data.shape[3], frames):
        block = nib.Nifti1Image(data[..., start : start + frames], affine)
        data[..., start : start + frames] = smooth_img(block, fwhm_mm).get_fdata(dtype=np.float32)
    return data


def usable(series: np.ndarray) -> np.ndarray:
    """Units whose series can take part in smoothing: finite at every volume and not constant.

    Parameters
    ----------
    series : ndarray, shape (units, volumes)

    Returns
    -------
    ndarray of bool, shape (units,)
    """
    finite = np.isfinite(series).all(axis=1)
    spread = np.zeros(len(series), bool)
    spread[finite] = np.ptp(series[finite], axis=1) > 0
    return spread


def _smooth_on_mesh(values: np.ndarray, mesh: tuple[np.ndarray, np.ndarray], fwhm_mm: float) -> np.ndarray:
    surface = PolyMesh(left=InMemoryMesh(*mesh))
    smoothed = smooth_img(SurfaceImage(mesh=surface, data={"left": values}), fwhm_mm)
    return np.asarray(smoothed.data.parts["left"], dtype=np.float64)


def smooth_surface(
    series: np.ndarray,
    mesh: tuple[np.ndarray, np.ndarray],
    fwhm_mm: float,
    vertices: np.ndarray | None = None,
) -> np.ndarray:
    """Smooth one hemisphere's series on its mesh, over the usable vertices only.

    Parameters
    ----------
    series : ndarray, shape (units, volumes)
        The hemisphere's series (all its mesh's vertices, or those named by ``vertices``).
    mesh : tuple of ndarray
        (vertices, 3) coordinates and (faces, 3) triangles.
    fwhm_mm : float
        Kernel FWHM in millimetres.
    vertices : ndarray of int, optional
        The mesh vertex of each row (a CIFTI file's cortex); default: row i is vertex i.

    Returns
    -------
    ndarray, shape (units, volumes)
        float32; the units that are not usable (:func:`usable`) are returned unchanged.
    """
    n_mesh = len(mesh[0])
    rows = np.arange(len(series)) if vertices is None else np.asarray(vertices)
    if vertices is None and len(series) != n_mesh:
        raise ValueError(f"{len(series)} series for a mesh of {n_mesh} vertices")
    ok = usable(series)
    values = np.zeros((n_mesh, series.shape[1]), np.float64)
    weight = np.zeros(n_mesh, np.float64)
    values[rows[ok]] = series[ok]
    weight[rows[ok]] = 1.0
    smoothed = _smooth_on_mesh(np.column_stack([values, weight]), mesh, fwhm_mm)
    out = np.array(series, dtype=np.float32, copy=True)
    out[ok] = smoothed[rows[ok], :-1] / smoothed[rows[ok], -1:]
    return out


def smooth_gifti(series: np.ndarray, hemis: dict[str, int], smoothing: Smoothing) -> np.ndarray:
    """Smooth a GIFTI run's series (left then right hemisphere's vertices) on each hemisphere's mesh.

    Parameters
    ----------
    series : ndarray, shape (units, volumes)
        Left then right hemisphere.
    hemis : dict
        ``{"L": n_left, "R": n_right}``.
    smoothing : Smoothing
        With the two hemispheres' meshes.

    Returns
    -------
    ndarray
        float32, same shape.

    Raises
    ------
    BadDataError
        A hemisphere has another number of vertices than its mesh.
    """
    out, start = [], 0
    for hemi, n in hemis.items():
        mesh = _mesh(smoothing, hemi, n, f"the hemi-{hemi} BOLD has {n} vertices")
        out.append(smooth_surface(series[start : start + n], mesh, smoothing.fwhm_mm))
        start += n
    return np.concatenate(out, axis=0)


def _mesh(smoothing: Smoothing, hemi: str, n_vertices: int, what: str) -> tuple[np.ndarray, np.ndarray]:
    """A hemisphere's mesh, checked to have the data's number of vertices."""
    mesh = smoothing.meshes[hemi]
    if len(mesh[0]) != n_vertices:
        raise BadDataError(
            f"{what} but the surface it is smoothed on has {len(mesh[0])} ({smoothing.source}); check the "
            "space of the BOLD files"
        )
    return mesh


CIFTI_CORTEX = {"CIFTI_STRUCTURE_CORTEX_LEFT": "L", "CIFTI_STRUCTURE_CORTEX_RIGHT": "R"}


def smooth_cifti(series: np.ndarray, models: Any, smoothing: Smoothing) -> np.ndarray:
    """Smooth a CIFTI run's grayordinates: the cortex on its meshes, the subcortical voxels in the volume.

    Parameters
    ----------
    series : ndarray, shape (grayordinates, volumes)
        The run's series.
    models : nibabel.cifti2.BrainModelAxis
        Its grayordinates.
    smoothing : Smoothing
        With the two hemispheres' meshes.

    Returns
    -------
    ndarray
        float32, same shape.
    """
    out = np.array(series, dtype=np.float32, copy=True)
    for structure, part, _ in models.iter_structures():
        hemi = CIFTI_CORTEX.get(structure)
        if hemi is None:
            continue
        n = models.nvertices[structure]
        mesh = _mesh(smoothing, hemi, n, f"the CIFTI's {structure} lies on a {n}-vertex mesh")
        rows = np.arange(len(models))[part]
        out[rows] = smooth_surface(series[rows], mesh, smoothing.fwhm_mm, models.vertex[part])
    voxels = np.flatnonzero(models.volume_mask)
    if voxels.size:
        out[voxels] = _smooth_voxels(
            series[voxels], models.voxel[voxels], models.volume_shape, models.affine, smoothing
        )
    return out


def _smooth_voxels(
    series: np.ndarray, ijk: np.ndarray, shape: tuple[int, ...], affine: np.ndarray, smoothing: Smoothing
) -> np.ndarray:
    """Grayordinate voxels smoothed in their volume, normalised over the usable ones."""
    ok = usable(series)
    where = tuple(ijk[ok].T)
    out = np.array(series, dtype=np.float32, copy=True)
    frames = max(1, BLOCK_BYTES // max(1, 4 * int(np.prod(shape))))
    weight = np.zeros((*shape, 1), np.float32)
    weight[(*where, 0)] = 1.0
    norm = smooth_volume(weight, affine, smoothing.fwhm_mm)[(*where, 0)]
    for start in range(0, series.shape[1], frames):
        block = np.zeros((*shape, min(frames, series.shape[1] - start)), np.float32)
        block[where] = series[ok, start : start + block.shape[3]]
        out[ok, start : start + block.shape[3]] = (
            smooth_volume(block, affine, smoothing.fwhm_mm)[where] / norm[:, None]
        )
    return out
