"""How the units of a run lie in its file format and on the cortex; writes (units,) maps back.

The one geometry module of prfmap: the readers (:mod:`prfmap.io.bold`), the group level and the
reports all describe GIFTI, CIFTI and volume units with these classes. A unit is a vertex
(GIFTI: the left then the right hemisphere), a grayordinate (CIFTI) or an in-mask voxel (NIfTI,
C order). :class:`SurfaceLayout` places surface units on the vertices of each hemisphere's mesh.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

from prfmap.io.atomic import atomic_path

STRUCTURES = {"L": "CortexLeft", "R": "CortexRight"}
CIFTI_CORTEX = {"CIFTI_STRUCTURE_CORTEX_LEFT": "L", "CIFTI_STRUCTURE_CORTEX_RIGHT": "R"}
PathFor = Callable[[str | None], Path]


def _float32(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values), dtype=np.float32)


@dataclass(frozen=True)
class SurfaceLayout:
    """How surface units lie on the vertices of each hemisphere's mesh.

    Attributes
    ----------
    hemis : dict of str to int
        Hemisphere (``"L"``, ``"R"``) to the number of units it holds, in the order the units
        appear in the arrays (all left units, then all right ones).
    vertices : dict of str to ndarray, optional
        Hemisphere to the mesh vertex of each of its units, for data that leave vertices out
        (CIFTI drops the medial wall). None: unit ``i`` of a hemisphere is vertex ``i``.
    n_vertices : dict of str to int, optional
        Vertices of each hemisphere's mesh; needed with ``vertices``.
    """

    hemis: dict[str, int]
    vertices: dict[str, np.ndarray] | None = None
    n_vertices: dict[str, int] | None = None

    def split(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Cut a (units,) array into per-hemisphere arrays over each mesh's vertices.

        Parameters
        ----------
        values : ndarray
            One value per unit; units past the cortical ones (CIFTI subcortex) are ignored.

        Returns
        -------
        dict of str to ndarray
            Hemisphere to a float64 array with one value per mesh vertex (NaN where the data
            have no unit).
        """
        out: dict[str, np.ndarray] = {}
        start = 0
        for hemi, count in self.hemis.items():
            part = np.asarray(values[start : start + count], dtype=np.float64)
            start += count
            if self.vertices is None or self.n_vertices is None:
                out[hemi] = part
                continue
            full = np.full(self.n_vertices[hemi], np.nan)
            full[self.vertices[hemi]] = part
            out[hemi] = full
        return out

    def gather(self, per_hemi: Mapping[str, np.ndarray], n_units: int | None = None) -> np.ndarray:
        """The inverse of :meth:`split`: per-hemisphere values over each mesh's vertices → (units,).

        Parameters
        ----------
        per_hemi : mapping of str to ndarray
            Hemisphere → one value per vertex of its mesh.
        n_units : int, optional
            The units of the data; units past the cortical ones (CIFTI subcortex) get zeros.

        Returns
        -------
        ndarray
            The values of the units, in their order (all left units, then all right ones).
        """
        parts = [
            np.asarray(per_hemi[hemi])[self.vertices[hemi] if self.vertices is not None else slice(count)]
            for hemi, count in self.hemis.items()
        ]
        units = np.concatenate(parts) if parts else np.zeros(0)
        if n_units is not None and n_units > units.size:
            units = np.concatenate([units, np.zeros(n_units - units.size, units.dtype)])
        return units


@dataclass
class UnitGeometry:
    """How the units of a run lie in its file format; writes (units,) maps back.

    Subclasses: :class:`GiftiGeometry`, :class:`CiftiGeometry`, :class:`VolumeGeometry`.
    """

    kind: str = field(init=False, default="")

    @property
    def n_units(self) -> int:
        """Number of units (vertices, grayordinates or in-mask voxels)."""
        raise NotImplementedError

    def write_maps(
        self,
        maps: Mapping[str, np.ndarray],
        path_for: PathFor,
        meta: Mapping[str, Any] | None = None,
    ) -> list[Path]:
        """Write (units,) maps in the run's format, atomically.

        Parameters
        ----------
        maps : mapping of str to ndarray
            Map label → (units,) array. All maps go into one file per hemisphere (GIFTI: one
            data array per map named by its label), one file (CIFTI ``.dscalar.nii``: one named
            map per label) or one file (NIfTI: 3-D for one map, 4-D with the maps in order along
            the last axis for several). Call once per label for one file per parameter.
        path_for : callable
            ``path_for(hemi)`` → destination path; ``hemi`` is ``"L"``/``"R"`` for GIFTI, None
            otherwise.
        meta : mapping, optional
            String metadata stored in the file (GIFTI file metadata; CIFTI map metadata).

        Returns
        -------
        list of pathlib.Path
            The files written.
        """
        raise NotImplementedError

    def write_series(
        self,
        data: np.ndarray,
        path_for: PathFor,
        tr: float,
        meta: Mapping[str, Any] | None = None,
    ) -> list[Path]:
        """Write a (units, frames) time series (e.g. model predictions) in the run's format.

        Parameters
        ----------
        data : ndarray
            (units, frames) values.
        path_for : callable
            As for :meth:`write_maps`.
        tr : float
            Seconds between frames.
        meta : mapping, optional
            String metadata stored in the file where the format allows.

        Returns
        -------
        list of pathlib.Path
            The files written.
        """
        raise NotImplementedError

    def surface(self) -> SurfaceLayout | None:
        """Where the units lie on the cortical meshes; None for volumes.

        Returns
        -------
        SurfaceLayout or None
        """
        return None

    def _check(self, values: np.ndarray, what: str) -> np.ndarray:
        values = _float32(values)
        if values.shape[0] != self.n_units:
            raise ValueError(f"{what} has {values.shape[0]} units, the geometry {self.n_units}")
        return values


def _gifti_meta(meta: Mapping[str, Any] | None, hemi: str) -> nib.gifti.GiftiMetaData:
    out = {"AnatomicalStructurePrimary": STRUCTURES[hemi]}
    out.update({str(k): str(v) for k, v in (meta or {}).items()})
    return nib.gifti.GiftiMetaData(out)


@dataclass
class GiftiGeometry(UnitGeometry):
    """Units are the left then the right hemisphere's vertices.

    Attributes
    ----------
    hemis : dict
        ``{"L": n_left, "R": n_right}`` vertex counts.
    """

    hemis: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.kind = "gifti"

    @property
    def n_units(self) -> int:
        """Units of the geometry (vertices, grayordinates or in-mask voxels)."""
        return int(sum(self.hemis.values()))

    def surface(self) -> SurfaceLayout:
        """Unit ``i`` of a hemisphere is vertex ``i`` of its mesh."""
        return SurfaceLayout(hemis=dict(self.hemis))

    def split(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Split an array whose first axis is units into ``{"L": ..., "R": ...}``.

        Parameters
        ----------
        values : ndarray
            First axis: units (L then R vertices).

        Returns
        -------
        dict
            ``{"L": ..., "R": ...}``.
        """
        out, start = {}, 0
        for hemi in ("L", "R"):
            out[hemi] = values[start : start + self.hemis[hemi]]
            start += self.hemis[hemi]
        return out

    def write_maps(self, maps, path_for, meta=None):
        """Write (units,) maps; see :meth:`UnitGeometry.write_maps`."""
        labels = list(maps)
        stacked = self._check(np.stack([np.ravel(maps[k]) for k in labels], axis=1), "maps")
        written = []
        for hemi, part in self.split(stacked).items():
            arrays = [
                nib.gifti.GiftiDataArray(
                    np.ascontiguousarray(part[:, i]),
                    intent="NIFTI_INTENT_ESTIMATE",
                    datatype="NIFTI_TYPE_FLOAT32",
                    meta=nib.gifti.GiftiMetaData({"Name": label}),
                )
                for i, label in enumerate(labels)
            ]
            img = nib.gifti.GiftiImage(darrays=arrays, meta=_gifti_meta(meta, hemi))
            written.append(_save(img, path_for(hemi)))
        return written

    def write_series(self, data, path_for, tr, meta=None):
        """Write (units, frames) series; see :meth:`UnitGeometry.write_series`."""
        data = self._check(data, "series")
        written = []
        for hemi, part in self.split(data).items():
            arrays = [
                nib.gifti.GiftiDataArray(
                    np.ascontiguousarray(part[:, t]),
                    intent="NIFTI_INTENT_TIME_SERIES",
                    datatype="NIFTI_TYPE_FLOAT32",
                )
                for t in range(part.shape[1])
            ]
            file_meta = {"TimeStep": str(float(tr) * 1000), **(meta or {})}
            img = nib.gifti.GiftiImage(darrays=arrays, meta=_gifti_meta(file_meta, hemi))
            written.append(_save(img, path_for(hemi)))
        return written


@dataclass
class CiftiGeometry(UnitGeometry):
    """Units are the grayordinates of a CIFTI file (cortex and subcortical voxels).

    Attributes
    ----------
    brain_models : nibabel.cifti2.BrainModelAxis
        The grayordinate axis of the BOLD file, reused for every output.
    """

    brain_models: Any = None

    def __post_init__(self) -> None:
        self.kind = "cifti"

    @property
    def n_units(self) -> int:
        """Units of the geometry (vertices, grayordinates or in-mask voxels)."""
        return len(self.brain_models)

    def surface(self) -> SurfaceLayout:
        """The cortical grayordinates on their fsLR meshes.

        The subcortical ones, which follow the cortex, have no vertex and are left out.
        """
        hemis: dict[str, int] = {}
        vertices: dict[str, np.ndarray] = {}
        n_vertices: dict[str, int] = {}
        for name, slc, brain_model in self.brain_models.iter_structures():
            hemi = CIFTI_CORTEX.get(name)
            if hemi is None:
                continue
            if slc.start != sum(hemis.values()):
                break
            hemis[hemi] = len(brain_model)
            vertices[hemi] = np.asarray(brain_model.vertex, dtype=np.int64)
            n_vertices[hemi] = int(brain_model.nvertices[name])
        return SurfaceLayout(hemis=hemis, vertices=vertices, n_vertices=n_vertices)

    def write_maps(self, maps, path_for, meta=None):
        """Write (units,) maps; see :meth:`UnitGeometry.write_maps`."""
        labels = list(maps)
        stacked = self._check(np.stack([np.ravel(maps[k]) for k in labels], axis=1), "maps")
        meta_list = [{str(k): str(v) for k, v in (meta or {}).items()} for _ in labels]
        scalar = nib.cifti2.ScalarAxis(labels, meta=meta_list)
        img = nib.cifti2.Cifti2Image(stacked.T.copy(), header=(scalar, self.brain_models))
        img.nifti_header.set_intent("ConnDenseScalar")
        return [_save(img, path_for(None))]

    def write_series(self, data, path_for, tr, meta=None):
        """Write (units, frames) series; see :meth:`UnitGeometry.write_series`."""
        data = self._check(data, "series")
        series = nib.cifti2.SeriesAxis(start=0.0, step=float(tr), size=data.shape[1], unit="second")
        img = nib.cifti2.Cifti2Image(data.T.copy(), header=(series, self.brain_models))
        img.nifti_header.set_intent("ConnDenseSeries")
        return [_save(img, path_for(None))]


@dataclass
class VolumeGeometry(UnitGeometry):
    """Units are the in-mask voxels of a volume, in C order.

    Attributes
    ----------
    mask : ndarray of bool
        3-D brain mask.
    affine : ndarray
        4 × 4 voxel-to-world affine of the BOLD file.
    header : nibabel.Nifti1Header
        The BOLD header (for qform/sform codes).
    """

    mask: np.ndarray = field(default_factory=lambda: np.zeros((0, 0, 0), bool))
    affine: np.ndarray = field(default_factory=lambda: np.eye(4))
    header: Any = None

    def __post_init__(self) -> None:
        self.kind = "volume"

    @property
    def n_units(self) -> int:
        """Units of the geometry (vertices, grayordinates or in-mask voxels)."""
        return int(self.mask.sum())

    def _image(self, values: np.ndarray, tr: float | None = None) -> nib.Nifti1Image:
        shape = self.mask.shape + values.shape[1:]
        vol = np.full(shape, np.nan, dtype=np.float32)
        vol[self.mask] = values
        if vol.ndim == 4 and vol.shape[3] == 1:
            vol = vol[..., 0]
        img = nib.Nifti1Image(vol, self.affine)
        if self.header is not None:
            img.set_qform(self.affine, code=int(self.header["qform_code"]) or 1)
            img.set_sform(self.affine, code=int(self.header["sform_code"]) or 1)
        img.header.set_xyzt_units("mm", "sec")
        if tr is not None:
            img.header.set_zooms(img.header.get_zooms()[:3] + (float(tr),))
        return img

    def write_maps(self, maps, path_for, meta=None):
        """Write (units,) maps; see :meth:`UnitGeometry.write_maps`."""
        labels = list(maps)
        stacked = self._check(np.stack([np.ravel(maps[k]) for k in labels], axis=1), "maps")
        img = self._image(stacked)
        if len(labels) == 1:
            img.header["descrip"] = labels[0][:79].encode()
        return [_save(img, path_for(None))]

    def write_series(self, data, path_for, tr, meta=None):
        """Write (units, frames) series; see :meth:`UnitGeometry.write_series`."""
        data = self._check(data, "series")
        return [_save(self._image(data, tr=tr), path_for(None))]


def _save(img: Any, path: Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        nib.save(img, tmp)
    return path
