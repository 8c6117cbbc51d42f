"""Read stimulus apertures (NIfTI, .npy, MATLAB .mat) as float32 (frames, rows, cols)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import h5py
import nibabel as nib
import numpy as np
from scipy.io import loadmat, whosmat
from scipy.io.matlab import matfile_version

from prfmap.errors import BadDataError, MissingInputError, UsageError, one_line, why_missing
from prfmap.io.bold import READ_ERRORS
from prfmap.io.datasets import check_fov_deg
from prfmap.io.resample import AreaResampler

MAT_VARIABLES = ("stimulus", "stim", "images", "apertures", "aperture")
MAT_NUMERIC = (
    "double",
    "single",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "logical",
)
READ_BLOCK_BYTES = 32 * 2**20


@dataclass(frozen=True)
class Aperture:
    """A stimulus aperture sampled once per TR.

    Attributes
    ----------
    design : ndarray
        float32 (frames, rows, cols) in [0, 1]; row 0 = top of the screen, column 0 = left.
    fov_deg : float
        Full width of the aperture in degrees of visual angle; pixel centres lie at
        ``linspace(-fov_deg/2, fov_deg/2, n)``.
    path : pathlib.Path or None
        The file it was read from.
    source_shape : tuple of int or None
        (rows, cols) in the file.
    source_fov_deg : float or None
        The file's field of view (``fov_deg`` differs from it when the design was resampled).
    source_frames : int or None
        The file's frames, one per TR, before ``frame_index`` chose among them.
    """

    design: np.ndarray
    fov_deg: float
    path: Path | None = None
    source_shape: tuple[int, int] | None = None
    source_fov_deg: float | None = None
    source_frames: int | None = None

    @property
    def resampled(self) -> bool:
        """True when the design is coarser than the file (see ``load_aperture(resample=True)``)."""
        return self.source_shape is not None and self.source_shape != self.design.shape[1:]


def sidecar_path(path: Path) -> Path:
    """The JSON sidecar of an aperture file (``stim.nii.gz`` → ``stim.json``).

    Parameters
    ----------
    path : Path
        An aperture file.

    Returns
    -------
    Path
    """
    name = path.name
    for ext in (".nii.gz", ".nii", ".npy", ".mat"):
        if name.endswith(ext):
            return path.with_name(name[: -len(ext)] + ".json")
    return path.with_suffix(".json")


def _read_sidecar(path: Path) -> dict:
    side = sidecar_path(path)
    if not side.is_file():
        return {}
    try:
        meta = json.loads(side.read_text())
    except (OSError, ValueError) as err:
        raise BadDataError(f"aperture sidecar {side} is not valid JSON ({one_line(err)}); fix it") from None
    if not isinstance(meta, dict):
        raise BadDataError(f"aperture sidecar {side} must hold a JSON object")
    return meta


@dataclass(frozen=True)
class _FrameSource:
    """An aperture file opened for reading a few frames at a time.

    ``read(start, stop)`` returns frames ``start:stop`` as (frames, rows, cols), in the file's dtype;
    ``close()`` releases the file.
    """

    shape: tuple[int, int, int]
    read: Callable[[int, int], np.ndarray]
    close: Callable[[], None] = lambda: None


def _open_nifti(path: Path) -> _FrameSource:
    img = nib.load(path, keep_file_open=True)
    shape, proxy = img.shape, img.dataobj
    if len(shape) == 4 and shape[2] == 1:
        return _FrameSource(
            (shape[3], shape[0], shape[1]),
            lambda a, b: np.moveaxis(np.asanyarray(proxy[:, :, 0, a:b]), -1, 0),
        )
    if len(shape) == 3:
        return _FrameSource(
            (shape[2], shape[0], shape[1]), lambda a, b: np.moveaxis(np.asanyarray(proxy[:, :, a:b]), -1, 0)
        )
    if len(shape) == 2:
        return _FrameSource((1, *shape), lambda a, b: np.asanyarray(proxy)[None, :, :][a:b])
    raise ValueError(f"expected rows × cols [× 1] × frames, got shape {shape}")


def _open_npy(path: Path) -> _FrameSource:
    data = np.load(path, mmap_mode="r", allow_pickle=False)
    if data.ndim != 3:
        raise ValueError(f"expected frames × rows × cols, got shape {data.shape}")
    return _FrameSource(data.shape, lambda a, b: np.asarray(data[a:b]))


def _pick_variable(shapes: dict[str, tuple[int, ...]]) -> str:
    """The aperture variable among a MAT file's numeric 3-D/4-D ones (MATLAB dimension order)."""
    name = next((k for k in MAT_VARIABLES if k in shapes), None)
    if name is None:
        if len(shapes) != 1:
            raise ValueError(
                f"expected one 3-D array (rows × cols × frames), or one named "
                f"{'/'.join(MAT_VARIABLES)}; found {sorted(shapes) or 'none'}"
            )
        name = next(iter(shapes))
    shape = shapes[name]
    if len(shape) == 4 and shape[2] != 1:
        raise ValueError(f"variable {name!r} has shape {shape}; expected rows×cols×frames")
    return name


def _open_mat(path: Path) -> _FrameSource:
    """MATLAB v4-v7 files through scipy; v7.3 (HDF5) through h5py."""
    if matfile_version(path)[0] == 2:
        return _open_mat73(path)
    shapes = {
        name: tuple(shape)
        for name, shape, kind in whosmat(path)
        if kind in MAT_NUMERIC and len(shape) in (3, 4)
    }
    name = _pick_variable(shapes)
    data = loadmat(path, variable_names=[name])[name]
    if data.ndim == 4:
        data = data[:, :, 0, :]
    return _FrameSource(
        (data.shape[2], data.shape[0], data.shape[1]), lambda a, b: np.moveaxis(data[:, :, a:b], -1, 0)
    )


def _open_mat73(path: Path) -> _FrameSource:
    """A MATLAB v7.3 file: HDF5, each variable a dataset in reversed (column-major) dimension order."""
    handle = h5py.File(path, "r")
    shapes = {}
    for name, item in handle.items():
        if not isinstance(item, h5py.Dataset) or item.attrs.get("MATLAB_empty", 0):
            continue
        kind = item.attrs.get("MATLAB_class", b"")
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind in MAT_NUMERIC and item.dtype.kind in "biuf" and item.ndim in (3, 4):
            shapes[name] = item.shape[::-1]
    try:
        dataset = handle[_pick_variable(shapes)]
    except ValueError:
        handle.close()
        raise
    shape = (dataset.shape[0], dataset.shape[-1], dataset.shape[-2])
    if dataset.ndim == 4:
        return _FrameSource(shape, lambda a, b: dataset[a:b, 0].transpose(0, 2, 1), handle.close)
    return _FrameSource(shape, lambda a, b: dataset[a:b].transpose(0, 2, 1), handle.close)


def _open(path: Path) -> _FrameSource:
    name = path.name.lower()
    if name.endswith((".nii", ".nii.gz")):
        return _open_nifti(path)
    if name.endswith(".npy"):
        return _open_npy(path)
    if name.endswith(".mat"):
        return _open_mat(path)
    raise UsageError(f"aperture {path} has an unknown format; use NIfTI (.nii/.nii.gz), .npy or MATLAB .mat")


def _frame_period(meta: dict, path: Path) -> float | None:
    if "RepetitionTime" in meta:
        value = meta["RepetitionTime"]
    elif "SamplingFrequency" in meta:
        freq = meta["SamplingFrequency"]
        if not isinstance(freq, (int, float)) or freq <= 0:
            raise BadDataError(f"SamplingFrequency in {sidecar_path(path).name} must be positive")
        return 1.0 / float(freq)
    else:
        return None
    if not isinstance(value, (int, float)) or value <= 0:
        raise BadDataError(f"RepetitionTime in {sidecar_path(path).name} must be positive")
    return float(value)


def average_per_tr(frames: np.ndarray, period: float, tr: float, path: Path) -> np.ndarray:
    """Average an aperture sampled every ``period`` seconds into one frame per ``tr``.

    Parameters
    ----------
    frames : ndarray
        (frames, rows, cols).
    period, tr : float
        Seconds per aperture frame and per volume.
    path : pathlib.Path
        For messages.

    Returns
    -------
    ndarray
        (frames * period / tr, rows, cols).

    Raises
    ------
    BadDataError
        ``tr`` is not a whole multiple of ``period``, the frames do not fill whole TRs, or the
        aperture is sampled slower than the TR.
    """
    ratio = tr / period
    factor = int(round(ratio))
    if abs(ratio - factor) > 1e-3 * ratio or factor < 1:
        raise BadDataError(
            f"aperture {path.name} has one frame every {period:g} s, which does not divide the "
            f"TR of {tr:g} s; resample it to a whole number of frames per TR"
        )
    if factor == 1:
        return frames
    if frames.shape[0] % factor:
        raise BadDataError(
            f"aperture {path.name} has {frames.shape[0]} frames at {factor} per TR, not a whole "
            "number of TRs; trim or pad it"
        )
    return frames.reshape(-1, factor, *frames.shape[1:]).mean(axis=1)


def load_aperture(
    path: str | os.PathLike,
    *,
    tr: float,
    fov_deg: float | None = None,
    frame_index: Sequence[int] | None = None,
    resample: bool = False,
) -> Aperture:
    """Load a stimulus aperture as float32 (frames, rows, cols), one frame per TR.

    File layouts (row 0 = top of the screen, column 0 = left in every case):

    - NIfTI: axis 0 rows top→bottom, axis 1 columns left→right, an optional singleton axis,
      last axis frames (the prfanalyze convention).
    - ``.npy``: (frames, rows, cols).
    - MATLAB ``.mat``: a numeric variable rows × cols × frames (the layout of analyzePRF and
      mrVista ``images``), named ``stimulus``, ``stim``, ``images``, ``apertures`` or ``aperture``,
      or the file's only 3-D numeric variable; v4–v7 files are read with scipy, v7.3 (HDF5, MATLAB's
      format for variables over 2 GB and a common default) with h5py, under the same rules.

    A JSON sidecar with the same stem (``bars.nii.gz`` → ``bars.json``) may give
    ``FieldOfViewDeg`` and the aperture's own frame period (``RepetitionTime``, seconds) or
    ``SamplingFrequency`` (Hz). Apertures sampled faster than ``tr`` are averaged per TR.

    The file is read a few frames at a time (about 32 MB), so with ``resample`` a large aperture
    never needs more memory than its resampled copy and one block.

    Parameters
    ----------
    path : path-like
        Aperture file.
    tr : float
        Repetition time of the BOLD run, seconds.
    fov_deg : float, optional
        Full width in degrees; overrides the sidecar's ``FieldOfViewDeg``.
    frame_index : sequence of int, optional
        0-based aperture frame (after averaging per TR) shown in each volume, as given by an
        events file's ``stim_file_index`` (see ``RunInput.stim_file_index``).
    resample : bool
        Area-average the aperture onto pixels no larger than the model needs
        (:mod:`prfmap.io.resample`: at most the fitting grid's smallest σ) where it is finer.

    Returns
    -------
    Aperture
        design float32 (frames, rows, cols) in [0, 1], its fov_deg (first to last pixel centre of
        the returned grid), and the file's own size and field of view.

    Raises
    ------
    MissingInputError
        The file does not exist.
    UsageError
        No field of view (neither ``fov_deg`` nor ``FieldOfViewDeg``), or unknown format.
    BadDataError
        Unreadable file, wrong shape, values outside [0, 1] or NaN, all zeros, no spatial
        information (every frame uniform, or every frame the same), a field of view outside
        ``io.datasets.FOV_RANGE_DEG`` or not a number, inconsistent timing or frame index out of range.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"aperture file {path} {why_missing(path)}; add it or pass --stimulus")
    meta = _read_sidecar(path)
    fov_deg = _field_of_view(path, meta, fov_deg)
    period = _frame_period(meta, path)
    frames, resampler, (rows, cols) = _read_resampled(path, fov_deg, resample)
    if period is not None:
        frames = average_per_tr(frames, period, float(tr), path)
    source_frames = frames.shape[0]
    if frame_index is not None:
        index = np.asarray(frame_index, dtype=int)
        if index.size and (index.min() < 0 or index.max() >= frames.shape[0]):
            raise BadDataError(
                f"stim_file_index runs to {index.max()} but aperture {path.name} has "
                f"{frames.shape[0]} frames; fix the events' stim_file_index"
            )
        frames = frames[index]
    _check_informative(frames, path)
    return Aperture(
        np.ascontiguousarray(frames, dtype=np.float32),
        resampler.fov_out,
        path,
        (rows, cols),
        float(fov_deg),
        source_frames,
    )


def _field_of_view(path: Path, meta: dict, fov_deg: float | None) -> float:
    """The given field of view, else the sidecar's ``FieldOfViewDeg``; within ``FOV_RANGE_DEG``."""
    if fov_deg is None:
        fov_deg = meta.get("FieldOfViewDeg")
        if fov_deg is None:
            raise UsageError(
                f"no field of view for aperture {path.name}; pass --stimulus-fov-deg or add "
                f"FieldOfViewDeg to {sidecar_path(path).name}"
            )
        source, remedy = f"FieldOfViewDeg in {sidecar_path(path).name}", "fix it or pass --stimulus-fov-deg"
    else:
        source, remedy = f"the field of view of aperture {path.name}", "give the full width in degrees"
    try:
        return check_fov_deg(fov_deg, source)
    except ValueError as err:
        raise BadDataError(f"{err}; {remedy}") from None


def _check_informative(frames: np.ndarray, path: Path) -> None:
    """Refuse an aperture from which no pRF position can be told from another.

    Every pRF sees the same time course when each frame is uniform across the screen (an all-ones
    aperture, a full-field flicker), and a constant one when no frame differs from the first (a
    static image): the fit would then return positions the data cannot support.
    """
    uniform = all(np.ptp(frame) <= 1e-6 for frame in frames)
    if uniform:
        raise BadDataError(
            f"aperture {path.name} is uniform across the screen in every frame (e.g. all ones), so it "
            "carries no information on pRF positions; apertures mark where the stimulus was "
            "(1) and was not (0) in each frame"
        )
    if all(np.abs(frame - frames[0]).max() <= 1e-6 for frame in frames[1:]):
        raise BadDataError(
            f"aperture {path.name} never changes: all its {len(frames)} frames are the same image, "
            "so it cannot map pRFs; give the aperture of each frame (or volume)"
        )


def _read_resampled(
    path: Path, fov_deg: float, resample: bool
) -> tuple[np.ndarray, AreaResampler, tuple[int, int]]:
    """The file's frames (resampled when asked), the resampler and the file's (rows, cols)."""
    try:
        source = _open(path)
        n_frames, rows, cols = source.shape
        if n_frames == 0 or min(rows, cols) < 2:
            raise BadDataError(f"aperture {path.name} has shape {source.shape}; it is empty")
        if resample:
            resampler = AreaResampler.for_model(rows, cols, float(fov_deg))
        else:
            resampler = AreaResampler.identity_for(rows, cols, float(fov_deg))
        try:
            frames = _read_frames(source, resampler, path)
        finally:
            source.close()
    except (UsageError, BadDataError):
        raise
    except READ_ERRORS as err:
        reason = one_line(err)[:200]
        raise BadDataError(f"cannot read aperture {path} ({reason}); fix or re-create it") from None
    return frames, resampler, (rows, cols)


def _read_frames(source: _FrameSource, resampler: AreaResampler, path: Path) -> np.ndarray:
    """Every frame, checked and clipped to [0, 1], resampled block by block (float32)."""
    n_frames, rows, cols = source.shape
    out = np.empty((n_frames, *resampler.shape_out), dtype=np.float32)
    step = max(1, READ_BLOCK_BYTES // (8 * rows * cols))
    low, high = np.inf, -np.inf
    for start in range(0, n_frames, step):
        block = source.read(start, min(start + step, n_frames))
        if block.dtype.kind not in "biuf":
            raise BadDataError(f"aperture {path.name} holds {block.dtype} values; expected numbers")
        block = np.array(block, dtype=np.float64)  # a copy: a float64 .npy is a read-only memmap
        if not np.isfinite(block).all():
            raise BadDataError(f"aperture {path.name} contains NaN or infinite values; fix it")
        low, high = min(low, float(block.min())), max(high, float(block.max()))
        out[start : start + len(block)] = resampler(np.clip(block, 0.0, 1.0, out=block))
    if low < -1e-6 or high > 1 + 1e-6:
        raise BadDataError(
            f"aperture {path.name} has values in [{low:g}, {high:g}]; apertures must lie in "
            "[0, 1] (1 = stimulus; e.g. divide 8-bit images by 255)"
        )
    if high <= 0:
        raise BadDataError(f"aperture {path.name} is all zeros (no frame shows a stimulus); check the file")
    return out
