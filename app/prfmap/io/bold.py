"""Read BOLD runs as (units, volumes) arrays and write (units,) maps back in the same format."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from xml.parsers.expat import ExpatError

import nibabel as nib
import numpy as np
from nibabel.cifti2.cifti2 import Cifti2HeaderError
from nibabel.filebasedimages import ImageFileError
from nibabel.gifti.parse_gifti_fast import GiftiParseError
from nibabel.spatialimages import HeaderDataError

from prfmap.errors import BadDataError, MissingInputError
from prfmap.io.atomic import atomic_path

if TYPE_CHECKING:
    from prfmap.io.bids import RunInput

READ_ERRORS = (
    OSError, ValueError, EOFError, zlib.error, ExpatError, ImageFileError, HeaderDataError,
    struct.error, KeyError, IndexError, TypeError, AttributeError, OverflowError,
    Cifti2HeaderError, GiftiParseError,
)
STRUCTURES = {"L": "CortexLeft", "R": "CortexRight"}
PathFor = Callable[[str | None], Path]


def _bad(path: Path, err: BaseException) -> BadDataError:
    reason = " ".join(str(err).split())[:200] or type(err).__name__
    return BadDataError(
        f"cannot read {path} ({reason}); the file is corrupt or not the expected format, "
        "re-create it (e.g. re-run fMRIPrep)"
    )


def _check_exists(path: Path) -> None:
    if not Path(path).is_file():
        raise MissingInputError(f"BOLD file {path} does not exist")


def _float32(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values), dtype=np.float32)


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
        return int(sum(self.hemis.values()))

    def split(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Split an array whose first axis is units into ``{"L": ..., "R": ...}``."""
        out, start = {}, 0
        for hemi in ("L", "R"):
            out[hemi] = values[start : start + self.hemis[hemi]]
            start += self.hemis[hemi]
        return out

    def write_maps(self, maps, path_for, meta=None):
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
        return len(self.brain_models)

    def write_maps(self, maps, path_for, meta=None):
        labels = list(maps)
        stacked = self._check(np.stack([np.ravel(maps[k]) for k in labels], axis=1), "maps")
        meta_list = [{str(k): str(v) for k, v in (meta or {}).items()} for _ in labels]
        scalar = nib.cifti2.ScalarAxis(labels, meta=meta_list)
        img = nib.cifti2.Cifti2Image(stacked.T.copy(), header=(scalar, self.brain_models))
        img.nifti_header.set_intent("ConnDenseScalar")
        return [_save(img, path_for(None))]

    def write_series(self, data, path_for, tr, meta=None):
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
        labels = list(maps)
        stacked = self._check(np.stack([np.ravel(maps[k]) for k in labels], axis=1), "maps")
        img = self._image(stacked)
        if len(labels) == 1:
            img.header["descrip"] = labels[0][:79].encode()
        return [_save(img, path_for(None))]

    def write_series(self, data, path_for, tr, meta=None):
        data = self._check(data, "series")
        return [_save(self._image(data, tr=tr), path_for(None))]


def _save(img: Any, path: Path) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        nib.save(img, tmp)
    return path


def _load(path: Path) -> Any:
    _check_exists(path)
    try:
        return nib.load(path)
    except READ_ERRORS as err:
        raise _bad(path, err) from None


def read_gifti(path: Path) -> np.ndarray:
    """Read a GIFTI ``func.gii`` time series as (vertices, volumes) float32.

    Parameters
    ----------
    path : pathlib.Path
        A ``*.func.gii`` with one data array per volume (fMRIPrep) or one 2-D array.

    Returns
    -------
    ndarray
        (vertices, volumes) float32.

    Raises
    ------
    BadDataError
        Unreadable, corrupt or empty file, or data arrays of different lengths.
    """
    img = _load(path)
    try:
        arrays = [np.asarray(d.data) for d in img.darrays]
        if not arrays:
            raise ValueError("no data arrays")
        if len(arrays) == 1 and arrays[0].ndim == 2:
            data = arrays[0]
        else:
            if len({a.shape for a in arrays}) != 1 or arrays[0].ndim != 1:
                raise ValueError("data arrays differ in shape or are not one value per vertex")
            data = np.stack(arrays, axis=1)
        return _float32(data)
    except READ_ERRORS as err:
        raise _bad(path, err) from None


def _load_gifti(run: RunInput) -> tuple[np.ndarray, GiftiGeometry]:
    parts = {h: read_gifti(Path(run.bold[h])) for h in ("L", "R")}
    if parts["L"].shape[1] != parts["R"].shape[1]:
        raise BadDataError(
            f"{Path(run.bold['L']).name} has {parts['L'].shape[1]} volumes but "
            f"{Path(run.bold['R']).name} has {parts['R'].shape[1]}; re-create the run's outputs"
        )
    geom = GiftiGeometry(hemis={h: p.shape[0] for h, p in parts.items()})
    return np.concatenate([parts["L"], parts["R"]], axis=0), geom


def _load_cifti(path: Path) -> tuple[np.ndarray, CiftiGeometry]:
    img = _load(path)
    try:
        series, models = img.header.get_axis(0), img.header.get_axis(1)
        if not isinstance(models, nib.cifti2.BrainModelAxis):
            raise ValueError("its second axis is not a BrainModel (grayordinate) axis")
        if not isinstance(series, nib.cifti2.SeriesAxis):
            raise ValueError("its first axis is not a time series (dtseries)")
        data = _float32(img.get_fdata(dtype=np.float32).T)
    except READ_ERRORS as err:
        raise _bad(path, err) from None
    return data, CiftiGeometry(brain_models=models)


def _load_volume(path: Path, mask_path: Path) -> tuple[np.ndarray, VolumeGeometry]:
    img, mimg = _load(path), _load(mask_path)
    try:
        if len(img.shape) != 4:
            raise ValueError(f"expected a 4-D BOLD image, got shape {img.shape}")
        mask_data = np.asanyarray(mimg.dataobj)
        mask = mask_data.reshape(mask_data.shape[:3]) > 0 if mask_data.ndim >= 3 else None
        if mask is None:
            raise ValueError(f"the mask {mask_path.name} is not 3-D")
    except READ_ERRORS as err:
        raise _bad(path, err) from None
    if mask.shape != img.shape[:3] or not np.allclose(mimg.affine, img.affine, atol=1e-3):
        raise BadDataError(
            f"mask {mask_path.name} ({mask.shape}) does not match {path.name} "
            f"({img.shape[:3]}) in shape or affine; use the mask of the same space and resolution"
        )
    try:
        data = _float32(np.asanyarray(img.dataobj, dtype=np.float32)[mask])
    except READ_ERRORS as err:
        raise _bad(path, err) from None
    geom = VolumeGeometry(mask=mask, affine=np.asarray(img.affine), header=img.header.copy())
    return data, geom


def load_bold(run: RunInput) -> tuple[np.ndarray, UnitGeometry]:
    """Load a run's BOLD as (units, volumes) float32 and the geometry to write maps back.

    Parameters
    ----------
    run : RunInput
        From :func:`prfmap.io.bids.find_inputs`. GIFTI: units are the left then the right
        hemisphere's vertices; CIFTI: all grayordinates; volume: voxels inside ``run.mask``.

    Returns
    -------
    data : ndarray
        (units, volumes) float32.
    geometry : UnitGeometry
        Writes (units,) maps and (units, frames) series in the same format.

    Raises
    ------
    MissingInputError
        A file does not exist.
    BadDataError
        A file is corrupt, unreadable or inconsistent (hemispheres, mask).
    """
    if run.kind == "gifti":
        return _load_gifti(run)
    if run.kind == "cifti":
        return _load_cifti(Path(run.bold))
    if run.mask is None:
        raise MissingInputError(f"no brain mask given for {Path(run.bold).name}")
    return _load_volume(Path(run.bold), Path(run.mask))
