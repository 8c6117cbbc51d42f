"""Read stimulus apertures (NIfTI, .npy, MATLAB .mat) as float32 (frames, rows, cols)."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import scipy.io

from prfmap.errors import BadDataError, MissingInputError, UsageError, one_line
from prfmap.io.bold import READ_ERRORS

MAT_VARIABLES = ("stimulus", "stim", "images", "apertures", "aperture")


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
    """

    design: np.ndarray
    fov_deg: float
    path: Path | None = None


def sidecar_path(path: Path) -> Path:
    """The JSON sidecar of an aperture file (``stim.nii.gz`` → ``stim.json``)."""
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


def _read_nifti(path: Path) -> np.ndarray:
    img = nib.load(path)
    data = np.asanyarray(img.dataobj)
    if data.ndim == 4 and data.shape[2] == 1:
        data = data[:, :, 0, :]
    if data.ndim == 2:
        data = data[:, :, None]
    if data.ndim != 3:
        raise ValueError(
            f"expected rows × cols [× 1] × frames, got shape {data.shape}"
        )
    return np.moveaxis(data, -1, 0)


def _read_mat(path: Path) -> np.ndarray:
    try:
        content = scipy.io.loadmat(path)
    except NotImplementedError:
        raise ValueError("MATLAB v7.3 (HDF5) files are not supported; save with -v7") from None
    arrays = {
        k: v for k, v in content.items()
        if not k.startswith("__") and isinstance(v, np.ndarray) and v.ndim in (3, 4)
        and v.dtype.kind in "biuf"
    }
    name = next((k for k in MAT_VARIABLES if k in arrays), None)
    if name is None:
        if len(arrays) != 1:
            raise ValueError(
                f"expected one 3-D array (rows × cols × frames), or one named "
                f"{'/'.join(MAT_VARIABLES)}; found {sorted(arrays) or 'none'}"
            )
        name = next(iter(arrays))
    data = arrays[name]
    if data.ndim == 4:
        if data.shape[2] != 1:
            raise ValueError(f"variable {name!r} has shape {data.shape}; expected rows×cols×frames")
        data = data[:, :, 0, :]
    return np.moveaxis(data, -1, 0)


def _read_array(path: Path) -> np.ndarray:
    name = path.name.lower()
    if name.endswith((".nii", ".nii.gz")):
        return _read_nifti(path)
    if name.endswith(".npy"):
        data = np.load(path, allow_pickle=False)
        if data.ndim != 3:
            raise ValueError(f"expected frames × rows × cols, got shape {data.shape}")
        return data
    if name.endswith(".mat"):
        return _read_mat(path)
    raise UsageError(
        f"aperture {path} has an unknown format; use NIfTI (.nii/.nii.gz), .npy or MATLAB .mat"
    )


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
) -> Aperture:
    """Load a stimulus aperture as float32 (frames, rows, cols), one frame per TR.

    File layouts (row 0 = top of the screen, column 0 = left in every case):

    - NIfTI: axis 0 rows top→bottom, axis 1 columns left→right, an optional singleton axis,
      last axis frames (the prfanalyze convention).
    - ``.npy``: (frames, rows, cols).
    - MATLAB ``.mat`` (v4–v7, read with scipy): a numeric variable rows × cols × frames (the
      layout of analyzePRF and mrVista ``images``), named ``stimulus``, ``stim``, ``images``,
      ``apertures`` or ``aperture``, or the file's only 3-D numeric variable.

    A JSON sidecar with the same stem (``bars.nii.gz`` → ``bars.json``) may give
    ``FieldOfViewDeg`` and the aperture's own frame period (``RepetitionTime``, seconds) or
    ``SamplingFrequency`` (Hz). Apertures sampled faster than ``tr`` are averaged per TR.

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

    Returns
    -------
    Aperture
        design float32 (frames, rows, cols) in [0, 1], and fov_deg.

    Raises
    ------
    MissingInputError
        The file does not exist.
    UsageError
        No field of view (neither ``fov_deg`` nor ``FieldOfViewDeg``), or unknown format.
    BadDataError
        Unreadable file, wrong shape, values outside [0, 1] or NaN, all zeros, inconsistent
        timing or frame index out of range.
    """
    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"aperture file {path} does not exist; add it or pass --stimulus")
    meta = _read_sidecar(path)
    fov_deg = _field_of_view(path, meta, fov_deg)
    frames = _checked_frames(path)
    period = _frame_period(meta, path)
    if period is not None:
        frames = average_per_tr(frames, period, float(tr), path)
    if frame_index is not None:
        index = np.asarray(frame_index, dtype=int)
        if index.size and (index.min() < 0 or index.max() >= frames.shape[0]):
            raise BadDataError(
                f"stim_file_index runs to {index.max()} but aperture {path.name} has "
                f"{frames.shape[0]} frames; fix the events' stim_file_index"
            )
        frames = frames[index]
    return Aperture(np.ascontiguousarray(frames, dtype=np.float32), float(fov_deg), path)


def _field_of_view(path: Path, meta: dict, fov_deg: float | None) -> float:
    """The given field of view, else the sidecar's ``FieldOfViewDeg``; positive."""
    if fov_deg is None:
        fov_deg = meta.get("FieldOfViewDeg")
        if fov_deg is None:
            raise UsageError(
                f"no field of view for aperture {path.name}; pass --stimulus-fov-deg or add "
                f"FieldOfViewDeg to {sidecar_path(path).name}"
            )
    if not isinstance(fov_deg, (int, float)) or not 0 < fov_deg < np.inf:
        raise BadDataError(f"field of view of aperture {path.name} must be positive: {fov_deg!r}")
    return fov_deg


def _checked_frames(path: Path) -> np.ndarray:
    """The aperture's frames as float64 (frames, rows, cols) in [0, 1], with at least one stimulus."""
    try:
        raw = _read_array(path)
    except UsageError:
        raise
    except READ_ERRORS as err:
        reason = one_line(err)[:200]
        raise BadDataError(f"cannot read aperture {path} ({reason}); fix or re-create it") from None
    if raw.dtype.kind not in "biuf":
        raise BadDataError(f"aperture {path.name} holds {raw.dtype} values; expected numbers")
    frames = np.asarray(raw, dtype=np.float64)
    if frames.shape[0] == 0 or min(frames.shape[1:]) < 2:
        raise BadDataError(f"aperture {path.name} has shape {frames.shape}; it is empty")
    if not np.isfinite(frames).all():
        raise BadDataError(f"aperture {path.name} contains NaN or infinite values; fix it")
    low, high = float(frames.min()), float(frames.max())
    if low < -1e-6 or high > 1 + 1e-6:
        raise BadDataError(
            f"aperture {path.name} has values in [{low:g}, {high:g}]; apertures must lie in "
            "[0, 1] (1 = stimulus; e.g. divide 8-bit images by 255)"
        )
    frames = np.clip(frames, 0.0, 1.0)
    if not frames.any():
        raise BadDataError(
            f"aperture {path.name} is all zeros (no frame shows a stimulus); check the file"
        )
    return frames
