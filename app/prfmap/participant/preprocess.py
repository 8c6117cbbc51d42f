"""Preprocessing of BOLD runs.

Dummy scans, DCT high-pass, percent signal change, confounds, and averaging or concatenating runs.

nilearn does the signal work: ``nilearn.signal.create_cosine_drift`` builds the DCT high-pass basis
(SPM's ``spm_dctmtx``) and ``nilearn.signal.clean`` converts to percent signal change and projects
out the drifts and confounds. The basis is built here and handed to ``clean`` as confounds (rather
than ``filter="cosine"``, which builds the same basis inside) because the engine must project the
very same regressors out of the model predictions.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from nilearn.signal import clean, create_cosine_drift
from scipy.linalg import block_diag

from prfmap.errors import BadDataError
from prfmap.participant.confounds import check_confound_rows
from prfmap.participant.repair import FrameRepair, repair_nonfinite


@dataclass(frozen=True)
class PreprocessedRun:
    """A preprocessed run.

    Attributes
    ----------
    data : ndarray
        float32 (units, frames) percent signal change with the nuisance regressors (and the
        mean) removed; NaN rows for units that cannot be used.
    nuisance : ndarray
        float64 (frames, k) regressors that were removed, without the constant.
    dummy_scans : int
        Initial volumes that were dropped.
    source : str
        The BOLD file the run came from, for messages (may be empty).
    repair : FrameRepair
        Units whose non-finite frames were interpolated, or that were refused for them.
    """

    data: np.ndarray
    nuisance: np.ndarray
    dummy_scans: int = 0
    source: str = ""
    repair: FrameRepair = FrameRepair()


@dataclass(frozen=True)
class CombinedData:
    """Runs averaged (same stimulus) and concatenated (different stimuli).

    Attributes
    ----------
    data : ndarray
        float32 (units, frames).
    nuisance : ndarray
        float64 (frames, k) orthonormal regressors removed from the data, orthogonal to a
        constant; block-diagonal over concatenated runs, with one constant per run after the
        first (the engine always adds the global constant).
    design : ndarray
        float32 (frames, rows, cols) aperture of the concatenated runs.
    run_lengths : list of int
        Frames of each concatenated run.
    """

    data: np.ndarray
    nuisance: np.ndarray
    design: np.ndarray
    run_lengths: list[int]


def dct_basis(n_frames: int, tr: float, high_pass_hz: float) -> np.ndarray:
    """Discrete cosine basis of the drifts below a cut-off frequency (SPM's ``spm_dctmtx``).

    nilearn's ``create_cosine_drift`` (the basis of ``nilearn.signal.clean(filter="cosine")``
    and of nilearn's first-level design matrices), without its constant column.

    Parameters
    ----------
    n_frames : int
        Number of volumes.
    tr : float
        Repetition time, seconds.
    high_pass_hz : float
        Cut-off in Hz; cosines of frequency ``k / (2 n_frames tr) <= high_pass_hz`` are
        returned. 0 gives an empty basis.

    Returns
    -------
    ndarray
        (n_frames, k) orthonormal columns, without the constant.
    """
    if high_pass_hz < 0 or tr <= 0 or n_frames < 1:
        raise ValueError("high_pass_hz must be >= 0, tr > 0 and n_frames >= 1")
    if high_pass_hz == 0 or n_frames < 2:
        return np.zeros((n_frames, 0))
    with warnings.catch_warnings():  # a cut-off above Nyquist: every cosine, as asked
        warnings.simplefilter("ignore", UserWarning)
        return create_cosine_drift(high_pass_hz, np.arange(n_frames) * tr)[:, :-1]


def _orthonormal(columns: np.ndarray, n_frames: int, *, drop_constant: bool) -> np.ndarray:
    """Orthonormal basis of the span of ``columns`` (minus the constant if asked)."""
    if columns.size == 0:
        return np.zeros((n_frames, 0))
    x = np.asarray(columns, dtype=np.float64)
    if drop_constant:
        x = x - x.mean(axis=0)
    u, s, _ = np.linalg.svd(x, full_matrices=False)
    keep = s > max(s.max(initial=0.0), 1e-12) * max(x.shape) * np.finfo(float).eps * 10
    return u[:, keep]


def preprocess_run(
    data: np.ndarray,
    tr: float,
    *,
    dummy_scans: int = 0,
    high_pass_hz: float | None = 0.01,
    confounds: np.ndarray | None = None,
    source: str = "",
    bold_scale: str = "raw",
) -> PreprocessedRun:
    """Drop dummy scans, convert to percent signal change and regress out drifts and confounds.

    Parameters
    ----------
    data : ndarray
        (units, volumes) raw BOLD.
    tr : float
        Repetition time, seconds.
    dummy_scans : int
        Initial volumes to drop (from data and confounds).
    high_pass_hz : float or None
        DCT high-pass cut-off; 0 or None disables it.
    confounds : ndarray, optional
        (volumes, k) regressors (all volumes, dummy scans included); NaN entries (e.g. the first
        row of ``framewise_displacement``) are replaced by the column mean.
    source : str
        The BOLD file name, kept for the messages of :func:`combine_runs`.
    bold_scale : {"raw", "percent"}
        ``raw``: the BOLD as acquired (its mean is the baseline of the percent signal change);
        ``percent``: series already in percent signal change (or another demeaned unit of signal
        change), fitted as given, their mean removed with the nuisance regressors.

    Returns
    -------
    PreprocessedRun
        ``data``: float32 (units, frames) percent signal change ``100 (y / mean - 1)`` with the
        constant, DCT and confounds projected out; a few non-finite frames of a unit are
        interpolated (:func:`repair_nonfinite`; ``repair`` counts them); units refused for their
        non-finite frames, without a finite frame, with a mean <= 0 or with zero variance are NaN
        rows. ``nuisance``: (frames, k) DCT then confound columns.

    Raises
    ------
    BadDataError
        Fewer than two volumes remain, the confounds have the wrong length, or raw BOLD whose mean is
        near zero against its variation (demeaned or z-scored: :data:`RAW_MEAN_OVER_SD_MIN`).
    """
    data = np.asarray(data)
    if data.ndim != 2:
        raise ValueError(f"data must be (units, volumes), got shape {data.shape}")
    n_vol = data.shape[1]
    if dummy_scans < 0 or n_vol - dummy_scans < 2:
        raise BadDataError(
            f"{n_vol} volumes with {dummy_scans} dummy scans leave fewer than 2; check --dummy-scans"
        )
    n = n_vol - dummy_scans
    columns = [dct_basis(n, tr, high_pass_hz or 0.0)]
    if confounds is not None:
        conf = np.asarray(confounds, dtype=np.float64)
        conf = conf.reshape(conf.shape[0], -1)
        check_confound_rows(conf.shape[0], n_vol)
        conf = conf[dummy_scans:]
        means = np.nanmean(np.where(np.isfinite(conf), conf, np.nan), axis=0)
        conf = np.where(np.isfinite(conf), conf, np.nan_to_num(means)[None, :])
        columns.append(conf - conf.mean(axis=0))
    nuisance = np.concatenate(columns, axis=1)

    blocks = [
        (start, min(start + _block_rows(n), data.shape[0]))
        for start in range(0, data.shape[0], _block_rows(n))
    ]
    if bold_scale != "percent":
        _check_raw(np.concatenate([_mean_over_sd(data[a:b, dummy_scans:]) for a, b in blocks]), source)
    convert = _signal_change if bold_scale == "percent" else _percent_signal_change
    out = np.empty((data.shape[0], n), dtype=np.float32)
    repair = FrameRepair()
    for start, stop in blocks:
        block, counts = repair_nonfinite(data[start:stop, dummy_scans:], tr)
        out[start:stop] = convert(block, nuisance)
        repair = repair + counts
    return PreprocessedRun(out, nuisance, dummy_scans, source, repair)


RAW_MEAN_OVER_SD_MIN = 1.0
"""Raw BOLD whose units' median |mean| / SD is below this is refused: BOLD as acquired sits on a
baseline many times its fluctuation (a temporal SNR of 10-100), demeaned or z-scored series at 0,
and percent signal change cannot be computed from them."""


def _mean_over_sd(block: np.ndarray) -> np.ndarray:
    """|mean| / SD of each usable (finite, not constant) row of ``block``."""
    y = np.asarray(block, dtype=np.float64)
    y = y[np.isfinite(y).all(axis=1)]
    sd = y.std(axis=1)
    return np.abs(y.mean(axis=1))[sd > 0] / sd[sd > 0]


def _check_raw(mean_over_sd: np.ndarray, source: str) -> None:
    """Refuse raw BOLD whose mean is near zero against its variation (:data:`RAW_MEAN_OVER_SD_MIN`)."""
    if mean_over_sd.size == 0:
        return
    median = float(np.median(mean_over_sd))
    if median < RAW_MEAN_OVER_SD_MIN:
        raise BadDataError(
            f"{source or 'the BOLD'} looks demeaned or z-scored (median |mean| / SD {median:.2g} over "
            f"{mean_over_sd.size} units; BOLD as acquired is 10-100): percent signal change needs the "
            "signal's mean; give the BOLD as fMRIPrep writes it (desc-preproc_bold), or, if the series "
            "already are percent signal change, --bold-scale percent"
        )


def _signal_change(block: np.ndarray, nuisance: np.ndarray) -> np.ndarray:
    """(rows, frames) series already in signal-change units with their mean and ``nuisance`` projected out.

    By ``nilearn.signal.clean``; non-finite or constant rows are NaN.
    """
    y = np.asarray(block, dtype=np.float64)
    finite = np.isfinite(y).all(axis=1)
    good = finite & (np.ptp(np.where(finite[:, None], y, 0), axis=1) > 0)
    out = np.full(y.shape, np.nan)
    if good.any():
        centred = y[good] - y[good].mean(axis=1, keepdims=True)
        out[good] = clean(
            centred.T,
            detrend=False,
            standardize=None,
            confounds=nuisance if nuisance.shape[1] else None,
            standardize_confounds=True,
            filter=False,
            ensure_finite=False,
        ).T
    return out


def _block_rows(n_frames: int, block_bytes: int = 2**26) -> int:
    """Rows of a (rows, n_frames) float64 block of about ``block_bytes`` (bounds the temporaries)."""
    return max(1, block_bytes // (8 * max(n_frames, 1)))


def _percent_signal_change(block: np.ndarray, nuisance: np.ndarray) -> np.ndarray:
    """Percent signal change of (rows, frames) raw data with ``nuisance`` (and the mean) projected out.

    By ``nilearn.signal.clean``; rows that cannot be used are NaN.
    """
    y = np.asarray(block, dtype=np.float64)
    finite = np.isfinite(y).all(axis=1)
    mean = np.where(finite, np.nan_to_num(y).mean(axis=1), np.nan)
    good = finite & (mean > 0) & (np.ptp(np.where(finite[:, None], y, 0), axis=1) > 0)
    psc = np.full(y.shape, np.nan)
    if good.any():
        psc[good] = clean(
            y[good].T,
            detrend=False,
            standardize="psc",
            confounds=nuisance if nuisance.shape[1] else None,
            standardize_confounds=True,
            filter=False,
            ensure_finite=False,
        ).T
    flat = good.copy()
    flat[good] = np.abs(psc[good]).max(axis=1) > 1e-9
    psc[good & ~flat] = np.nan
    return psc


def combine_runs(
    runs: Sequence[PreprocessedRun],
    stimulus_keys: Sequence[str],
    designs: Mapping[str, np.ndarray],
    *,
    names: Mapping[str, str] | None = None,
) -> CombinedData:
    """Average runs that saw the same stimulus; concatenate runs that saw different ones.

    Parameters
    ----------
    runs : sequence of PreprocessedRun
        Preprocessed runs (same units).
    stimulus_keys : sequence of str
        One key per run (``RunInput.stimulus_key``); equal keys are averaged, in the order of
        their first appearance.
    designs : mapping
        Key → (frames, rows, cols) aperture of that stimulus.
    names : mapping, optional
        Key → what messages call the aperture (its file name); default the key.

    Returns
    -------
    CombinedData
        The averaged/concatenated data, nuisance (for an averaged group: an orthonormal basis of
        the union of its runs' regressors; block-diagonal across groups plus one constant per
        group after the first), design and run lengths.

    Raises
    ------
    BadDataError
        Runs to average differ in length, runs differ in units, or a design's frame count
        differs from its runs'.
    """
    if not runs or len(runs) != len(stimulus_keys):
        raise ValueError("give one stimulus key per run, and at least one run")
    n_units = {r.data.shape[0] for r in runs}
    if len(n_units) != 1:
        raise BadDataError(f"runs differ in their number of units ({sorted(n_units)}); fit them in one space")
    order: list[str] = list(dict.fromkeys(stimulus_keys))
    groups, nuisance_blocks, design_blocks, lengths = [], [], [], []
    for key in order:
        members = [r for r, k in zip(runs, stimulus_keys, strict=True) if k == key]
        design = np.asarray(designs[key], dtype=np.float32)
        for run in (r for r in members if r.data.shape[1] != design.shape[0]):  # name the run that differs
            raise BadDataError(_frames_message((names or {}).get(key, key), design.shape[0], [run]))
        n = design.shape[0]
        groups.append(members)
        nuisance_blocks.append(
            _orthonormal(np.concatenate([r.nuisance for r in members], axis=1), n, drop_constant=True)
        )
        design_blocks.append(design)
        lengths.append(n)
    return CombinedData(
        data=_average_and_concatenate(groups, lengths),
        nuisance=_combined_nuisance(nuisance_blocks, lengths),
        design=np.concatenate(design_blocks, axis=0),
        run_lengths=lengths,
    )


def _combined_nuisance(blocks: list[np.ndarray], lengths: list[int]) -> np.ndarray:
    """Block-diagonal nuisance of concatenated runs, plus one constant per run after the first."""
    nuisance = block_diag(*blocks) if blocks else np.zeros((sum(lengths), 0))
    if len(lengths) > 1:
        starts = np.cumsum([0, *lengths])
        indicators = np.zeros((starts[-1], len(lengths) - 1))
        for i in range(1, len(lengths)):
            indicators[starts[i] : starts[i + 1], i - 1] = 1.0
        indicators -= indicators.mean(axis=0)
        nuisance = np.concatenate([nuisance, indicators], axis=1)
    return nuisance


def _average_and_concatenate(groups: list[list[PreprocessedRun]], lengths: list[int]) -> np.ndarray:
    """The mean of each group's runs, the groups side by side along frames (float32)."""
    n_rows = groups[0][0].data.shape[0]
    data = np.empty((n_rows, sum(lengths)), dtype=np.float32)
    for members, start, n in zip(groups, np.cumsum([0, *lengths[:-1]]), lengths, strict=True):
        for row in range(0, n_rows, _block_rows(n)):
            stop = min(row + _block_rows(n), n_rows)
            block = [r.data[row:stop] for r in members]
            data[row:stop, start : start + n] = np.mean(block, axis=0, dtype=np.float64)
    return data


def _frames_message(aperture: str, frames: int, runs: Sequence[PreprocessedRun]) -> str:
    n = runs[0].data.shape[1]
    example = next((r for r in runs if r.source), None)
    detail = ""
    if example is not None:
        detail = (
            f" ({example.source} has {n} volumes after {example.dummy_scans} dummy scans, "
            f"{n + example.dummy_scans} in all)"
        )
    return (
        f"the aperture {aperture} has {frames} frames but its runs have {n} volumes after dummy "
        f"scans{detail}; they must be equal (check the aperture or --dummy-scans)"
    )
