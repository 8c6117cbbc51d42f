"""Read BOLD runs as (units, volumes) arrays with the geometry that writes maps back; read maps.

The geometry classes (:mod:`prfmap.io.geometry`) write (units,) maps and (units, frames) series
in the format a run was read from.
"""

from __future__ import annotations

import struct
import zlib
from pathlib import Path
from typing import Any
from xml.parsers.expat import ExpatError

import nibabel as nib
import numpy as np
from nibabel.cifti2.cifti2 import Cifti2HeaderError
from nibabel.filebasedimages import ImageFileError
from nibabel.gifti.parse_gifti_fast import GiftiParseError
from nibabel.spatialimages import HeaderDataError

from prfmap.errors import BadDataError, MissingInputError, one_line, why_missing
from prfmap.io.geometry import CiftiGeometry, GiftiGeometry, UnitGeometry, VolumeGeometry
from prfmap.io.runs import Kind, RunInput
from prfmap.io.smoothing import Smoothing, smooth_cifti, smooth_gifti, smooth_volume

READ_ERRORS = (
    OSError,
    ValueError,
    EOFError,
    zlib.error,
    ExpatError,
    ImageFileError,
    HeaderDataError,
    struct.error,
    LookupError,
    TypeError,
    AttributeError,
    OverflowError,  # LookupError: KeyError,
    # IndexError, and an XML header naming an unknown encoding
    Cifti2HeaderError,
    GiftiParseError,
)


def _bad(path: Path, err: BaseException, remedy: str = "e.g. re-run fMRIPrep") -> BadDataError:
    reason = one_line(err)[:200] or type(err).__name__
    return BadDataError(
        f"cannot read {path} ({reason}); the file is corrupt or not the expected format, "
        f"re-create it ({remedy})"
    )


def _check_exists(path: Path) -> None:
    if not Path(path).is_file():
        raise MissingInputError(f"BOLD file {path} {why_missing(path)}")


def _float32(values: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(values), dtype=np.float32)


def _load(path: Path, remedy: str = "e.g. re-run fMRIPrep") -> Any:
    _check_exists(path)
    try:
        return nib.load(path)
    except READ_ERRORS as err:
        raise _bad(path, err, remedy) from None


def read_gifti(path: Path, remedy: str = "e.g. re-run fMRIPrep") -> np.ndarray:
    """Read a GIFTI ``func.gii`` time series as (vertices, volumes) float32.

    Parameters
    ----------
    path : pathlib.Path
        A ``*.func.gii`` with one data array per volume (fMRIPrep) or one 2-D array.
    remedy : str
        How a corrupt file is re-created, for the message.

    Returns
    -------
    ndarray
        (vertices, volumes) float32.

    Raises
    ------
    BadDataError
        Unreadable, corrupt or empty file, or data arrays of different lengths.
    """
    img = _load(path, remedy)
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
        raise _bad(path, err, remedy) from None


def _load_gifti(run: RunInput, smoothing: Smoothing | None) -> tuple[np.ndarray, GiftiGeometry]:
    parts = {h: read_gifti(Path(run.bold[h])) for h in ("L", "R")}
    if parts["L"].shape[1] != parts["R"].shape[1]:
        raise BadDataError(
            f"{Path(run.bold['L']).name} has {parts['L'].shape[1]} volumes but "
            f"{Path(run.bold['R']).name} has {parts['R'].shape[1]}; re-create the run's outputs"
        )
    geom = GiftiGeometry(hemis={h: p.shape[0] for h, p in parts.items()})
    data = np.concatenate([parts["L"], parts["R"]], axis=0)
    return (smooth_gifti(data, geom.hemis, smoothing) if smoothing else data), geom


def _load_cifti(path: Path, smoothing: Smoothing | None) -> tuple[np.ndarray, CiftiGeometry]:
    _, models, data = _read_cifti(path, nib.cifti2.SeriesAxis, "a time series (dtseries)")
    data = _float32(data.T)
    return (smooth_cifti(data, models, smoothing) if smoothing else data), CiftiGeometry(brain_models=models)


def _read_cifti(
    path: Path, first: type, what: str, remedy: str = "e.g. re-run fMRIPrep"
) -> tuple[Any, nib.cifti2.BrainModelAxis, np.ndarray]:
    """A CIFTI file's first axis (of type ``first``), its grayordinates and its (rows, units) data."""
    img = _load(path, remedy)
    try:
        axis, models = img.header.get_axis(0), img.header.get_axis(1)
        if not isinstance(models, nib.cifti2.BrainModelAxis):
            raise ValueError("its second axis is not a BrainModel (grayordinate) axis")
        if not isinstance(axis, first):
            raise ValueError(f"its first axis is not {what}")
        shape = (len(axis), len(models))
        if tuple(img.dataobj.shape) != shape:  # a damaged header; reading it could ask for petabytes
            raise ValueError(f"its data shape {tuple(img.dataobj.shape)} does not match its axes {shape}")
        data = _float32(img.get_fdata(dtype=np.float32))
    except READ_ERRORS as err:
        raise _bad(path, err, remedy) from None
    return axis, models, data


def read_mask(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """A volume run's brain mask (``desc-brain_mask``) as a 3-D boolean array, and its affine.

    Parameters
    ----------
    path : Path
        The mask file.

    Returns
    -------
    mask : ndarray of bool
        True inside the brain.
    affine : ndarray
        4 × 4 voxel-to-world affine.

    Raises
    ------
    MissingInputError
        The file does not exist.
    BadDataError
        It cannot be read or is not 3-D.
    """
    mimg = _load(path)
    try:
        mask_data = np.asanyarray(mimg.dataobj)
        if mask_data.ndim < 3 or any(n != 1 for n in mask_data.shape[3:]):
            raise ValueError(f"the mask {Path(path).name} is not 3-D")
        return mask_data.reshape(mask_data.shape[:3]) > 0, np.asarray(mimg.affine)
    except READ_ERRORS as err:
        raise _bad(path, err) from None


GRID_TOLERANCE_VOXELS = 0.05
"""A mask's grid may lie this far (a share of the smallest voxel side) from its BOLD's: affines written
with different rounding differ by thousandths of a millimetre, not by a misregistration."""


def grid_distance(shape: tuple[int, ...], affine: np.ndarray, other: np.ndarray) -> tuple[float, float]:
    """How far apart two affines put the voxels of one grid: the largest distance, over the grid's corners.

    The affines are linear, so no voxel of the grid moves farther than its corners do.

    Parameters
    ----------
    shape : tuple of int
        The grid's first three dimensions.
    affine, other : ndarray, shape (4, 4)
        Voxel-to-world affines.

    Returns
    -------
    millimetres : float
        The largest distance.
    voxels : float
        The same over ``affine``'s smallest voxel side.
    """
    corners = np.array(np.meshgrid(*[[0, max(n - 1, 0)] for n in shape[:3]], indexing="ij")).reshape(3, -1)
    corners = np.vstack([corners, np.ones(corners.shape[1])])
    mm = float(np.max(np.linalg.norm((np.asarray(affine) - np.asarray(other))[:3] @ corners, axis=0)))
    side = float(np.min(np.linalg.norm(np.asarray(affine)[:3, :3], axis=0)))
    return mm, mm / side if side > 0 else float("inf")


def _load_volume(
    path: Path, mask_path: Path, smoothing: Smoothing | None
) -> tuple[np.ndarray, VolumeGeometry]:
    img = _load(path)
    mask, mask_affine = read_mask(mask_path)
    try:
        if len(img.shape) != 4:
            raise ValueError(f"expected a 4-D BOLD image, got shape {img.shape}")
    except READ_ERRORS as err:
        raise _bad(path, err) from None
    if mask.shape != img.shape[:3]:
        raise BadDataError(
            f"mask {mask_path.name} has {mask.shape} voxels but {path.name} has {img.shape[:3]}; use the "
            "mask of the same space and resolution"
        )
    mm, voxels = grid_distance(img.shape, img.affine, mask_affine)
    if voxels > GRID_TOLERANCE_VOXELS:
        raise BadDataError(
            f"mask {mask_path.name} does not match {path.name}: their affines place the voxels up to "
            f"{mm:.3g} mm ({voxels:.2g} voxels) apart (largest affine difference "
            f"{np.max(np.abs(np.asarray(mask_affine) - img.affine)):.3g}; {GRID_TOLERANCE_VOXELS:g} "
            "voxels are accepted); use the mask of the same space and resolution"
        )
    try:
        volumes = np.asanyarray(img.dataobj, dtype=np.float32)
        if smoothing:
            volumes = smooth_volume(np.require(volumes, requirements="W"), img.affine, smoothing.fwhm_mm)
        data = _float32(volumes[mask])
    except READ_ERRORS as err:
        raise _bad(path, err) from None
    geom = VolumeGeometry(mask=mask, affine=np.asarray(img.affine), header=img.header.copy())
    return data, geom


def load_bold(run: RunInput, smoothing: Smoothing | None = None) -> tuple[np.ndarray, UnitGeometry]:
    """Load a run's BOLD as (units, volumes) float32 and the geometry to write maps back.

    Parameters
    ----------
    run : RunInput
        From :func:`prfmap.io.bids.find_inputs`. GIFTI: units are the left then the right
        hemisphere's vertices; CIFTI: all grayordinates; volume: voxels inside ``run.mask``.
    smoothing : Smoothing, optional
        Spatial smoothing applied as the run is read (:mod:`prfmap.io.smoothing`): volumes before
        their brain mask is applied, surfaces on their meshes.

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
        return _load_gifti(run, smoothing)
    if run.kind == "cifti":
        return _load_cifti(Path(run.bold), smoothing)
    if run.mask is None:
        raise MissingInputError(f"no brain mask given for {Path(run.bold).name}")
    return _load_volume(Path(run.bold), Path(run.mask), smoothing)


def header_tr(path: Path, kind: Kind) -> float | None:
    """The repetition time in a CIFTI series axis or a NIfTI header (seconds), or None.

    Parameters
    ----------
    path : Path
        A ``.dtseries.nii`` (``kind="cifti"``) or a 4-D NIfTI (``kind="volume"``).
    kind : {"gifti", "cifti", "volume"}
        The file format family; GIFTI files carry no TR that prfmap reads.

    Returns
    -------
    float or None
    """
    if kind == "gifti":
        return None
    try:
        img = nib.load(path)
        if kind == "cifti":
            axis = img.header.get_axis(0)
            step = float(axis.step)
            return step / 1000 if getattr(axis, "unit", "SECOND") == "MSEC" else step
        if kind == "volume":
            zooms = img.header.get_zooms()
            units = img.header.get_xyzt_units()[1]
            if len(zooms) > 3 and zooms[3] > 0:
                return float(zooms[3]) / (1000 if units == "msec" else 1)
    except READ_ERRORS:
        return None
    return None


def read_volume_map(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read a 3-D NIfTI map (prfmap's volume outputs): its float32 values and its affine.

    Parameters
    ----------
    path : Path
        The ``*_boldmap.nii.gz`` (or ``.nii``).

    Returns
    -------
    data : ndarray
        float32 (x, y, z).
    affine : ndarray
        (4, 4) voxel-to-world.

    Raises
    ------
    MissingInputError
        The file does not exist.
    BadDataError
        The file is corrupt (a truncated gzip stream included) or not a 3-D image.
    """
    remedy = "re-run prfmap's participant level"
    img = _load(path, remedy)
    try:
        data = np.asanyarray(img.dataobj, dtype=np.float32)
        if data.ndim != 3:
            raise ValueError(f"expected a 3-D map, got shape {data.shape}")
    except READ_ERRORS as err:
        raise _bad(path, err, remedy) from None
    return data, np.asarray(img.affine)


def read_dscalar(path: Path) -> tuple[dict[str, np.ndarray], CiftiGeometry]:
    """Read a CIFTI ``.dscalar.nii``: each named map as a (grayordinates,) array, and its geometry.

    Parameters
    ----------
    path : Path
        The file.

    Returns
    -------
    maps : dict
        Map name → (grayordinates,) values.
    geometry : CiftiGeometry
        Its brain models.

    Raises
    ------
    MissingInputError
        The file does not exist.
    BadDataError
        The file is corrupt or not a dscalar of grayordinates.
    """
    names, models, data = _read_cifti(
        path, nib.cifti2.ScalarAxis, "a scalar (map name) axis", "re-run prfmap's participant level"
    )
    return {str(name): data[i] for i, name in enumerate(names.name)}, CiftiGeometry(brain_models=models)
