"""The load stage: a plan's runs read, checked, preprocessed and combined (:class:`LoadedFit`).

Runs that saw the same stimulus are averaged, different stimuli concatenated
(:func:`prfmap.participant.preprocess.combine_runs`).
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prfmap.config import Config
from prfmap.derivatives.areas import UnitAreas
from prfmap.errors import BadDataError, MissingInputError, UsageError
from prfmap.io.aperture import Aperture, load_aperture
from prfmap.io.bold import GRID_TOLERANCE_VOXELS, grid_distance, load_bold, read_mask
from prfmap.io.geometry import UnitGeometry, VolumeGeometry
from prfmap.io.runs import RunInput
from prfmap.io.smoothing import Smoothing, smoothing_for
from prfmap.io.timing import RULES, SliceTimeReference
from prfmap.participant.areas import RegionOfInterest, fit_areas, roi_units
from prfmap.participant.confounds import run_confounds
from prfmap.participant.plan import FitPlan
from prfmap.participant.preprocess import CombinedData, PreprocessedRun, combine_runs, preprocess_run
from prfmap.runtime.memory import participant_need_gb

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True)
class LoadedFit:
    """The preprocessed, combined data of a plan, ready to fit.

    Attributes
    ----------
    plan : FitPlan
        What was loaded.
    geometry : UnitGeometry
        How the units lie in the BOLD's format (writes the maps back).
    combined : CombinedData
        Averaged/concatenated data, nuisance regressors, design and run lengths.
    tr : float
        Repetition time shared by the runs, seconds.
    fov_deg : float
        Field of view of the fitted aperture grid (first to last pixel centre), degrees.
    pixels : tuple of int
        (rows, cols) of the fitted aperture grid.
    source_fov_deg : float
        Field of view of the aperture files, degrees.
    source_pixels : tuple of int
        (rows, cols) of the aperture files (more than ``pixels`` when they were area-averaged).
    dummy_scans : tuple of int
        Volumes dropped from each run.
    inputs : tuple of str
        Every file read (BOLD, masks, events, confounds, apertures), without repeats.
    seconds : float
        Time spent loading and preprocessing.
    slice_time : SliceTimeReference
        Where within each TR the runs' volumes sample the signal (:func:`slice_time_of`).
    runs : tuple of PreprocessedRun
        Each run preprocessed, before averaging (held-out runs of the cross-validation; their
        ``repair`` counts the units whose non-finite frames were interpolated or refused).
    designs : dict
        ``RunInput.stimulus_key`` → (frames, rows, cols) aperture of the runs.
    left_out : dict
        Run name → why it was left out of the fit (a run without a usable unit); ``plan`` holds
        the runs that were fitted.
    mask_voxels_left_out : dict
        Run name → voxels of its brain mask outside the other runs' masks (volume runs whose masks
        differ: the fit uses the voxels in every run's mask); empty when the masks agree.
    smoothing : Smoothing or None
        The spatial smoothing applied as the runs were read (``--smooth-fwhm``), or None.
    areas : UnitAreas or None
        Each unit's visual area in the atlas of ``--atlas`` (surface spaces), or None.
    areas_note : str
        Which atlas gave the areas and how, or why there are none (the log and the report).
    roi : RegionOfInterest or None
        The units ``--roi`` selects; the others are NaN in ``combined`` and ``runs`` (not fitted).
    """

    plan: FitPlan
    geometry: UnitGeometry
    combined: CombinedData
    tr: float
    fov_deg: float
    pixels: tuple[int, int]
    source_fov_deg: float
    source_pixels: tuple[int, int]
    dummy_scans: tuple[int, ...]
    inputs: tuple[str, ...]
    seconds: float
    slice_time: SliceTimeReference = SliceTimeReference(0.5, "option")
    runs: tuple[PreprocessedRun, ...] = ()
    designs: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)
    left_out: dict[str, str] = dataclasses.field(default_factory=dict)
    mask_voxels_left_out: dict[str, int] = dataclasses.field(default_factory=dict)
    smoothing: Smoothing | None = None
    areas: UnitAreas | None = None
    areas_note: str = ""
    roi: RegionOfInterest | None = None

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the report should say about the loaded data (runs left out, units repaired or refused)."""
        names = [run.name for run in self.plan.runs]
        found = (pre.repair.message(name) for pre, name in zip(self.runs, names, strict=False))
        left_out = (f"{name} left out of the fit: {why}" for name, why in self.left_out.items())
        roi = (self.roi.describe(),) if self.roi is not None else ()
        return (*roi, *left_out, *(m for m in found if m))


@dataclass(frozen=True)
class _Run:
    """One run read, before preprocessing."""

    data: np.ndarray
    geometry: UnitGeometry
    aperture: Aperture
    dummy_scans: int
    confounds: np.ndarray | None


def load_fit(plan: FitPlan, config: Config, progress: ProgressFn) -> LoadedFit:
    """Load, check and preprocess a plan's runs and combine them.

    Parameters
    ----------
    plan : FitPlan
        The runs fitted together.
    config : Config
        The run's configuration.
    progress : callable
        ``progress(stage, done, total)``.

    Returns
    -------
    LoadedFit

    Raises
    ------
    BadDataError
        The runs differ in units (other than brain masks of one grid, which are intersected), TR
        or aperture grid, a run's volumes do not match its aperture's frames, or no run has a
        usable unit (a run without one is left out with a warning when others have).
    MissingInputError
        A run has no aperture, or ``--confounds`` was given and a run has no confounds file.
    UsageError
        An explicit ``--mem-gb`` is below what the plan must hold, or ``--high-pass-hz`` is not below
        a run's Nyquist frequency.
    """
    start = time.perf_counter()
    preprocessed: list[PreprocessedRun] = []
    kept: list[RunInput] = []
    left_out: dict[str, str] = {}
    designs: dict[str, np.ndarray] = {}
    names: dict[str, str] = {}
    first: _Run | None = None
    common, lacked = common_mask(plan)
    smoothing = smoothing_for(plan.runs[0], config.preprocessing.smooth_fwhm, config.inputs.fmriprep_dir)
    if smoothing:
        logger.info("%s: smoothing every run with %s", plan.name, smoothing.describe())
    for i, run in enumerate(plan.runs):
        progress("load runs", i, len(plan.runs))
        check_high_pass(config.preprocessing.high_pass_hz, run)
        read = _in_mask(_read_run(run, config, smoothing), common)
        if first is None:
            first = dataclasses.replace(read, data=read.data[:, :0], confounds=None)
            _log_resampling(run, read.aperture)
            check_memory(
                plan,
                config,
                read.data.shape[0],
                read.data.shape[1] - read.dummy_scans,
                read.aperture.design[0].size,
            )
        else:
            _check_alike(run, read, plan.runs[0], first)
        pre = preprocess_run(
            read.data,
            run.tr,
            dummy_scans=read.dummy_scans,
            high_pass_hz=config.preprocessing.high_pass_hz,
            confounds=read.confounds,
            source=run.bold_files[0].name,
            bold_scale=config.preprocessing.bold_scale,
        )
        if not np.isfinite(pre.data).any():
            left_out[run.name] = _UNUSABLE
            logger.warning("%s: %s; it is left out of the fit", run.name, _UNUSABLE)
            continue
        repaired = pre.repair.message(run.name)
        if repaired:
            logger.warning(repaired)
        preprocessed.append(pre)
        kept.append(run)
        designs.setdefault(run.stimulus_key, read.aperture.design)
        names.setdefault(run.stimulus_key, run.aperture_label(read.aperture.source_frames))
    progress("load runs", len(plan.runs), len(plan.runs))
    if not kept:
        raise BadDataError(
            f"no run of {plan.name} has a usable unit: {_UNUSABLE} in "
            f"{', '.join(run.bold_files[0].name for run in plan.runs)}; check the BOLD files"
        )
    plan = dataclasses.replace(plan, runs=tuple(kept))
    keys = [run.stimulus_key for run in plan.runs]
    combined = combine_runs(preprocessed, keys, designs, names=names)
    logger.info(
        "%s: %d run(s), %d stimulus sequence(s) → %d units × %d frames",
        plan.name,
        len(plan.runs),
        len(designs),
        *combined.data.shape,
    )
    aperture = first.aperture
    key = plan.key
    areas, areas_note = fit_areas(
        config.outputs.atlas, key.space, key.den, first.geometry, key.subject, config.inputs.fmriprep_dir
    )
    logger.info("%s: %s", plan.name, areas_note)
    roi = roi_units(config.inputs.roi, areas, areas_note, first.geometry, key.space)
    if roi is not None:
        combined, preprocessed = _only(combined, preprocessed, roi.units)
        logger.info("%s: %s", plan.name, roi.describe())
    return LoadedFit(
        plan=plan,
        geometry=first.geometry,
        combined=combined,
        tr=plan.runs[0].tr,
        fov_deg=float(aperture.fov_deg),
        pixels=tuple(aperture.design.shape[1:]),
        source_fov_deg=float(aperture.source_fov_deg),
        source_pixels=tuple(aperture.source_shape),
        dummy_scans=tuple(r.dummy_scans for r in preprocessed),
        inputs=_inputs(plan.runs),
        seconds=time.perf_counter() - start,
        slice_time=slice_time_of(plan, config),
        runs=tuple(preprocessed),
        designs=designs,
        left_out=left_out,
        mask_voxels_left_out=lacked,
        smoothing=smoothing,
        areas=areas,
        areas_note=areas_note,
        roi=roi,
    )


def _only(
    combined: CombinedData, runs: list[PreprocessedRun], inside: np.ndarray
) -> tuple[CombinedData, list[PreprocessedRun]]:
    """The data with every unit outside ``inside`` set to NaN: the engine leaves such units out."""

    def masked(data: np.ndarray) -> np.ndarray:
        out = np.array(data, copy=True)
        out[~inside] = np.nan
        return out

    return (
        dataclasses.replace(combined, data=masked(combined.data)),
        [dataclasses.replace(run, data=masked(run.data)) for run in runs],
    )


_UNUSABLE = "every vertex/voxel is constant (e.g. all zeros), non-positive or non-finite"


def common_mask(plan: FitPlan) -> tuple[np.ndarray | None, dict[str, int]]:
    """The voxels inside every run's brain mask, when the volume runs' masks differ.

    fMRIPrep writes one mask per run, and they routinely differ by a few voxels at the edge of the
    brain; the fit uses the voxels all runs have, and says how many of its own each run lost.

    Parameters
    ----------
    plan : FitPlan
        The runs fitted together.

    Returns
    -------
    mask : ndarray of bool or None
        The intersection of the masks; None when they agree, the runs are not volumes or the masks
        do not share one grid (then :func:`_check_alike` refuses the runs).
    lacked : dict
        Run name → voxels of its mask left out (every run, zeros included); empty with ``mask`` None.

    Raises
    ------
    BadDataError
        The masks share no voxel.
    """
    runs = [run for run in plan.runs if run.kind == "volume" and run.mask is not None]
    if len(runs) < 2:
        return None, {}
    masks = [read_mask(Path(run.mask)) for run in runs]
    (first, affine), rest = masks[0], masks[1:]
    if any(
        m.shape != first.shape or grid_distance(m.shape, affine, a)[1] > GRID_TOLERANCE_VOXELS
        for m, a in rest
    ):
        return None, {}
    if all(np.array_equal(m, first) for m, _ in rest):
        return None, {}
    common = np.logical_and.reduce([m for m, _ in masks])
    lacked = {run.name: int(m.sum() - common.sum()) for run, (m, _) in zip(runs, masks, strict=True)}
    if not common.any():
        raise BadDataError(
            f"the brain masks of {plan.name}'s runs share no voxel "
            f"({', '.join(Path(run.mask).name for run in runs)}); fit the runs separately (--run)"
        )
    logger.warning(
        "%s: the runs' brain masks differ; fitting the %d voxels inside all of them (left out: %s)",
        plan.name,
        int(common.sum()),
        ", ".join(
            f"{n} of {int(m.sum())} voxels of {name}"
            for (name, n), (m, _) in zip(lacked.items(), masks, strict=True)
        ),
    )
    return common, lacked


def _in_mask(read: _Run, common: np.ndarray | None) -> _Run:
    """A volume run restricted to the voxels of ``common`` (inside its own mask)."""
    geometry = read.geometry
    if common is None or not isinstance(geometry, VolumeGeometry):
        return read
    keep = common[geometry.mask]
    restricted = dataclasses.replace(geometry, mask=common)
    return dataclasses.replace(read, data=read.data[keep], geometry=restricted)


def check_high_pass(high_pass_hz: float | None, run: RunInput) -> None:
    """Refuse a high-pass cut-off at or above a run's Nyquist frequency, ``1 / (2 TR)``.

    Its DCT basis holds every cosine the run can carry, so it removes the whole signal and every unit
    would be left unfitted.

    Parameters
    ----------
    high_pass_hz : float or None
        ``--high-pass-hz`` (0 or None: no high-pass).
    run : RunInput
        The run (its TR).

    Raises
    ------
    UsageError
        The cut-off is at or above the Nyquist frequency.
    """
    nyquist = 1.0 / (2.0 * run.tr)
    if high_pass_hz and high_pass_hz >= nyquist:
        raise UsageError(
            f"--high-pass-hz {high_pass_hz:g} is not below the Nyquist frequency of {run.name} "
            f"({nyquist:.3g} Hz at RepetitionTime {run.tr:g} s): the filter would remove the whole "
            "signal; give a cut-off well below it (default 0.01 Hz; 0 disables the filter)"
        )


def slice_time_of(plan: FitPlan, config: Config) -> SliceTimeReference:
    """The slice-time reference of a plan's runs.

    ``--slice-time-ref``, else the one their sidecars imply (:mod:`prfmap.io.timing`), logged with the rule
    that chose it.

    Parameters
    ----------
    plan : FitPlan
        The runs.
    config : Config
        The run's configuration. (``--slice-time-ref``)

    Returns
    -------
    SliceTimeReference

    Raises
    ------
    BadDataError
    The runs' sidecars imply different references (without ``--slice-time-ref``).
    """
    if config.fit.slice_time_ref is not None:
        chosen = SliceTimeReference(config.fit.slice_time_ref, "option")
    else:
        found = {run.name: run.slice_time or SliceTimeReference(0.0, "no_information") for run in plan.runs}
        if len({round(ref.fraction, 6) for ref in found.values()}) > 1:
            listed = ", ".join(f"{name} {ref.fraction:g}" for name, ref in found.items())
            raise BadDataError(
                f"the sidecars of {plan.name}'s runs imply different slice-time references "
                f"(fractions of the TR: {listed}); fit them separately (--run) or pass --slice-time-ref"
            )
        chosen = next(iter(found.values()))
    tr = plan.runs[0].tr
    log = logger.warning if chosen.rule == "no_information" else logger.info
    log(
        "%s: volumes sample the signal %.3f s into each TR (slice-time reference %.3g: %s)%s",
        plan.name,
        chosen.fraction * tr,
        chosen.fraction,
        RULES[chosen.rule],
        "; pass --slice-time-ref if the acquisition is known" if chosen.rule == "no_information" else "",
    )
    return chosen


def _read_run(run: RunInput, config: Config, smoothing: Smoothing | None = None) -> _Run:
    """A run's BOLD (smoothed as asked), its aperture at the fitting resolution, dummy scans and confounds."""
    data, geometry = load_bold(run, smoothing)
    if run.stim_file is None:
        raise MissingInputError(f"no stimulus aperture for {run.name}; pass --stimulus")
    aperture = load_aperture(
        run.stim_file,
        tr=run.tr,
        fov_deg=config.inputs.stimulus_fov_deg,
        frame_index=run.stim_file_index,
        resample=True,
    )
    prep = config.preprocessing
    dummy, confounds = run_confounds(
        run.confounds,
        data.shape[1],
        columns=prep.confounds,
        dummy_scans=prep.dummy_scans,
        run=run.name,
        bold=" and ".join(p.name for p in run.bold_files),
    )
    return _Run(data, geometry, aperture, dummy, confounds)


def _log_resampling(run: RunInput, aperture: Aperture) -> None:
    if aperture.resampled:
        rows, cols = aperture.design.shape[1:]
        logger.info(
            "aperture %s: %d × %d pixels area-averaged to %d × %d (%.3f° each, the grid's smallest pRF size)",
            Path(run.stim_file).name,
            *aperture.source_shape,
            rows,
            cols,
            aperture.fov_deg / (cols - 1),
        )


def _check_alike(run: RunInput, read: _Run, first_run: RunInput, first: _Run) -> None:
    """The runs of a plan must share their units, TR and aperture grid."""
    if read.data.shape[0] != first.data.shape[0]:
        raise BadDataError(
            f"{run.name} has {read.data.shape[0]} units but {first_run.name} has "
            f"{first.data.shape[0]} in space {run.space}; the runs of one space must share their "
            "vertices/voxels"
        )
    if abs(run.tr - first_run.tr) > 1e-6:
        raise BadDataError(
            f"{run.name} has RepetitionTime {run.tr} s but {first_run.name} {first_run.tr} s; "
            "fit runs with different TRs separately (--run or --task)"
        )
    this, ref = read.aperture, first.aperture
    if (this.design.shape[1:], round(this.fov_deg, 6)) != (ref.design.shape[1:], round(ref.fov_deg, 6)):
        raise BadDataError(
            f"aperture {Path(run.stim_file).name} spans {this.source_fov_deg}° in "
            f"{this.source_shape[0]} × {this.source_shape[1]} pixels but another run's "
            f"{ref.source_fov_deg}° in {ref.source_shape[0]} × {ref.source_shape[1]}; "
            "apertures fitted together need one field of view (--stimulus-fov-deg) and size"
        )


def check_memory(plan: FitPlan, config: Config, units: int, volumes: int, pixels: int) -> None:
    """Refuse an explicit ``--mem-gb`` below what a plan must hold (estimated from its first run).

    Warn when the default is below it.

    Parameters
    ----------
    plan : FitPlan
        The runs.
    config : Config
        The run's configuration.
    units, volumes, pixels : int
        Of its first run.
    """
    execution = config.execution
    predictions = config.outputs.keep_predictions
    n_stimuli = len({run.stimulus_key for run in plan.runs})
    need = participant_need_gb(units, volumes * len(plan.runs), volumes * n_stimuli, pixels, predictions)
    if need <= execution.mem_gb:
        return
    minimum = math.ceil(need * 100) / 100
    what = (
        f"{plan.name} of sub-{plan.key.subject} needs {minimum:g} GB ({units} units × "
        f"{volumes} volumes × {len(plan.runs)} run(s){', with predictions' if predictions else ''})"
    )
    if execution.mem_gb_auto:
        logger.warning(
            "%s, more than the default --mem-gb %.2f GB; it may run out of memory", what, execution.mem_gb
        )
        return
    raise UsageError(f"--mem-gb {execution.mem_gb:g} is too small: {what}; pass --mem-gb {minimum:g} or more")


def _inputs(runs: Sequence[RunInput]) -> tuple[str, ...]:
    """Every file the runs read, in order, without repeats."""
    files: list[str] = []
    for run in runs:
        files += [str(p) for p in run.bold_files]
        files += [str(p) for p in (run.mask, run.events, run.confounds) if p is not None]
        files.append(str(run.stim_file))
    return tuple(dict.fromkeys(files))
