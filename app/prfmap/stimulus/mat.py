"""An image stack and the sequence that showed it, from a MATLAB ``.mat`` file (v5 or v7.3).

This is how analyzePRF's and HCP's stimulus files and vistadisp's ``stimulus`` struct store what was on
the screen: ``images`` (rows × cols × N grey images, or rows × cols × 3 × N colour ones, in MATLAB's
dimension order) and ``seq`` (which image each presentation frame showed, 1-based, 0 = a blank screen),
optionally with ``seqtiming`` (each frame's onset in seconds). Variables inside a struct are named with
dots (``stimulus.images``). v4–v7 files are read with scipy, v7.3 (HDF5) with h5py.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import h5py
import numpy as np
from scipy.io import loadmat
from scipy.io.matlab import matfile_version

from prfmap.errors import BadDataError, MissingInputError, UsageError, one_line
from prfmap.stimulus.sources import Frame, FrameSource, spread, to_uint8, to_working, working_scale

MAT_ERRORS = (OSError, ValueError, TypeError, KeyError, NotImplementedError)


def _walk_v5(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not str(key).startswith("__"):
                _walk_v5(item, f"{prefix}{key}.", out)
    elif isinstance(value, np.ndarray) and value.dtype.kind in "biuf":
        out[prefix[:-1]] = value


def _walk_v73(group: h5py.Group, prefix: str, out: dict[str, Any]) -> None:
    for key, item in group.items():
        if key.startswith("#"):
            continue
        if isinstance(item, h5py.Group):
            _walk_v73(item, f"{prefix}{key}.", out)
        elif item.dtype.kind in "biuf" and not item.attrs.get("MATLAB_empty", 0):
            out[prefix + key] = item


def read_variables(path: Path) -> tuple[dict[str, Any], h5py.File | None]:
    """Every numeric variable of a ``.mat`` file by dotted name (struct fields included).

    Returns
    -------
    variables : dict
        name → ndarray (v4–v7, squeezed) or h5py.Dataset (v7.3, in reversed dimension order).
    handle : h5py.File or None
        The open v7.3 file (close it when done).
    """
    if not path.is_file():
        raise MissingInputError(f"input {path} does not exist")
    try:
        if matfile_version(str(path))[0] == 2:
            handle = h5py.File(path, "r")
            out: dict[str, Any] = {}
            _walk_v73(handle, "", out)
            return out, handle
        out = {}
        _walk_v5(loadmat(str(path), simplify_cells=True), "", out)
        return out, None
    except MAT_ERRORS as err:
        raise BadDataError(f"cannot read MATLAB file {path} ({one_line(err)[:160]}); re-save it") from None


def matlab_shape(value: Any) -> tuple[int, ...]:
    """The variable's shape in MATLAB's order, singleton dimensions dropped (but images' own)."""
    shape = value.shape[::-1] if isinstance(value, h5py.Dataset) else value.shape
    return tuple(int(n) for n in shape if n != 1) if len(shape) <= 2 else tuple(int(n) for n in shape)


def load_array(value: Any) -> np.ndarray:
    """The variable as an ndarray in MATLAB's dimension order."""
    if isinstance(value, h5py.Dataset):
        return np.asarray(value[()]).transpose()
    return np.asarray(value)


def _is_stack(shape: tuple[int, ...]) -> bool:
    return len(shape) == 3 or (len(shape) == 4 and shape[2] in (1, 3))


def _pick(kind: str, option: str, found: list[str], path: Path, name: str | None) -> str | None:
    if name is not None:
        return name
    if len(found) == 1:
        return found[0]
    if not found:
        return None
    raise UsageError(f"{path.name} holds several {kind} ({', '.join(sorted(found))}); name one with {option}")


def choose_variables(
    path: Path, variables: Mapping[str, Any], images: str | None, sequence: str | None, timing: str | None
) -> tuple[str, str | None, str | None]:
    """The image stack, the sequence and its timing: the ones named, else the only candidates.

    A stack is a 3-D (rows × cols × N) or rows × cols × 3 × N array; a sequence a vector of
    non-negative whole numbers; its timing the non-decreasing vector of the same length beside it
    whose name contains ``tim`` (vistadisp's ``seqtiming``).
    """
    for name, option in ((images, "--images"), (sequence, "--sequence"), (timing, "--sequence-timing")):
        if name is not None and name not in variables:
            raise UsageError(
                f"{path.name} has no numeric variable {name!r} for {option}; it has {sorted(variables)}"
            )
    shapes = {name: matlab_shape(value) for name, value in variables.items()}
    stacks = [n for n, s in shapes.items() if _is_stack(s)]
    stack = _pick("image stacks", "--images", stacks, path, images)
    if stack is None:
        raise BadDataError(f"{path.name} holds no image stack (rows × cols × N, or rows × cols × 3 × N)")
    if not _is_stack(shapes[stack]):
        raise UsageError(
            f"--images {stack} has shape {shapes[stack]}; expected rows × cols × N or rows × cols × 3 × N"
        )
    vectors = [n for n, s in shapes.items() if len(s) == 1 and s[0] >= 2 and _whole(variables[n])]
    seq = _pick("sequences", "--sequence", vectors, path, sequence)
    if timing is None and seq is not None:
        parent = seq.rpartition(".")[0]
        beside = [
            n
            for n, s in shapes.items()
            if n != seq
            and n.rpartition(".")[0] == parent
            and "tim" in n.rpartition(".")[2].lower()
            and s == shapes[seq]
        ]
        timing = beside[0] if len(beside) == 1 else None
    return stack, seq, timing


def _whole(value: Any) -> bool:
    data = load_array(value).ravel()
    return (
        bool(data.size)
        and bool(np.all(np.isfinite(data)))
        and bool(np.all(data == np.round(data)))
        and data.min() >= 0
    )


def _intensity_scale(stack: np.ndarray) -> float:
    """What divides the stack's values into [0, 1]: the integer type's maximum, else 1, 255 or the maximum."""
    if stack.dtype.kind == "b":
        return 1.0
    if stack.dtype.kind in "iu":
        return float(np.iinfo(stack.dtype).max)
    high = float(np.nanmax(stack)) if stack.size else 1.0
    if high <= 1.0 + 1e-6:
        return 1.0
    return 255.0 if high <= 255.0 + 1e-6 else high


class MatStack(FrameSource):
    """Frames from a ``.mat`` image stack shown in the order of a sequence (see the module's text).

    Parameters
    ----------
    path : Path
        The ``.mat`` file.
    images, sequence, timing : str, optional
        Variable names (dotted inside structs); found when unambiguous.
    frame_rate : float, optional
        Sequence entries per second (when there is no timing variable).
    start_time : float
        Seconds before the first volume began (skipped).
    base : {1, 0}
        The sequence's first image index; with 1 (MATLAB's), 0 shows a blank screen.
    """

    def __init__(
        self,
        path: Path,
        images: str | None = None,
        sequence: str | None = None,
        timing: str | None = None,
        frame_rate: float | None = None,
        start_time: float = 0.0,
        base: int = 1,
    ):
        variables, handle = read_variables(path)
        try:
            stack_name, seq_name, timing_name = choose_variables(path, variables, images, sequence, timing)
            stack = load_array(variables[stack_name])
            seq = load_array(variables[seq_name]).ravel() if seq_name else None
            onsets = load_array(variables[timing_name]).ravel().astype(float) if timing_name else None
        finally:
            if handle is not None:
                handle.close()
        if stack.ndim == 4:
            stack = stack[:, :, 0] if stack.shape[2] == 1 else stack
        n_images = stack.shape[-1]
        index = self._index(path, seq, n_images, base)
        if onsets is not None and (onsets.size != index.size or np.any(np.diff(onsets) < 0)):
            raise BadDataError(
                f"{timing_name} in {path.name} must list one non-decreasing onset per sequence entry"
            )
        rows, cols = stack.shape[:2]
        scale = working_scale(rows, cols)
        timed = onsets is not None or frame_rate is not None
        names = " + ".join(n for n in (stack_name, seq_name, timing_name) if n)
        super().__init__(
            description=f"{path.name}: {names} ({n_images} images, {index.size} frames)",
            shape=(rows // scale, cols // scale),
            scale=scale,
            recorded=(rows, cols),
            timed=timed,
            sources=[str(path)],
        )
        self.stack, self.index, self.divisor = stack, index, _intensity_scale(stack)
        self.variables = {"images": stack_name, "sequence": seq_name, "timing": timing_name}
        self.onsets = self._onsets(onsets, frame_rate, index.size, start_time)

    @staticmethod
    def _index(path: Path, seq: np.ndarray | None, n_images: int, base: int) -> np.ndarray:
        """0-based image per frame, −1 for a blank screen."""
        if seq is None:
            return np.arange(n_images)
        if seq.size == 0 or not np.all(np.isfinite(seq)) or np.any(seq != np.round(seq)):
            raise BadDataError(f"the sequence in {path.name} must hold whole image numbers")
        index = seq.astype(np.int64) - base
        if index.min() < -1 or (base == 0 and index.min() < 0) or index.max() >= n_images:
            raise BadDataError(
                f"the sequence in {path.name} runs from {int(seq.min())} to {int(seq.max())} but the "
                f"stack has {n_images} images ({base}-based{', 0 = blank' if base == 1 else ''}); check "
                "--sequence-base"
            )
        return index

    @staticmethod
    def _onsets(onsets: np.ndarray | None, rate: float | None, n: int, start: float) -> np.ndarray | None:
        """Each frame's (start, stop) in seconds from the first volume, or None (one frame per volume)."""
        if onsets is None and rate is None:
            return None
        times = onsets if onsets is not None else np.arange(n) / rate
        step = float(np.median(np.diff(times))) if n > 1 else 1.0 / (rate or 1.0)
        return np.stack([times, np.append(times[1:], times[-1] + step)], axis=1) - start

    def image(self, index: int) -> np.ndarray | None:
        """Image ``index`` (0-based) at the working resolution, None for a blank screen."""
        if index < 0:
            return None
        picture = self.stack[..., index].astype(np.float32) / np.float32(self.divisor)
        return to_working(np.clip(picture, 0, 1), self.scale)

    def frames(self) -> Iterator[Frame]:
        """The frames in presentation order (see :meth:`FrameSource.frames`)."""
        for j, index in enumerate(self.index):
            times = (None, None) if self.onsets is None else tuple(map(float, self.onsets[j]))
            yield Frame(self.image(int(index)), int(index), *times)

    def sample(self, n: int = 48) -> list[np.ndarray]:
        """Up to ``n`` frames spread evenly over the input (see :meth:`FrameSource.sample`)."""
        shown = np.flatnonzero(self.index >= 0)
        picks = shown[spread(shown.size, n)] if shown.size else shown
        return [to_uint8(self.image(int(self.index[j]))) for j in picks] if shown.size else []
