"""The participant level: find runs, load and preprocess them, fit, write derivatives and reports.

Runs are grouped per (participant, session, task, space); both hemispheres of a surface space are
fitted together. Runs that saw the same stimulus are averaged, different stimuli concatenated.
Everything a participant produces (maps, sidecars, series, report and figures) is written into a
staging folder and published as one set, under the participant's lock (:mod:`prfmap.io.publish`);
before that only log files exist.

Each stage takes and returns frozen values, so a stage can be run (and tested) on its own:

    plan_fits(runs, model)               -> list[FitPlan]      runs fitted together
    load_group(plan, config, progress)   -> LoadedGroup        BOLD, apertures, preprocessing
    fit_group(loaded, config, progress)  -> FittedGroup        the checkpointed engine fit (+ cvr2 folds)
    write_group(fitted, config, folder)  -> tuple[Path, ...]   maps, series and sidecars
    report_context(...)                  -> ReportContext      what the report shows of a fit
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prfmap import __version__
from prfmap.checkpoint import fit_chunked, remove_checkpoints
from prfmap.config import Config
from prfmap.crossval import (
    DEFINITION,
    CrossValidation,
    Fold,
    cross_validate,
    engine_predictor,
    reproducible,
)
from prfmap.derivatives import (
    OutputKey,
    bids_uri,
    relative_link,
    source_datasets,
    write_dataset_files,
    write_map_files,
    write_series_files,
)
from prfmap.engine import HRF, FitResult, Stimulus, backend_info, catalog, estimate_hrf
from prfmap.errors import BadDataError, MissingInputError, PrfmapError, UsageError
from prfmap.io.aperture import Aperture, load_aperture
from prfmap.io.bids import find_runs
from prfmap.io.bold import load_bold
from prfmap.io.geometry import UnitGeometry, VolumeGeometry
from prfmap.io.publish import COMMIT, new_staging, participant_lock, publish_participant, recover_staging
from prfmap.io.runs import RunInput
from prfmap.io.timing import RULES, SliceTimeReference
from prfmap.memory import chunk_units, engine_mem_gb, participant_need_gb
from prfmap.preprocess import CombinedData, PreprocessedRun, combine_runs, preprocess_run, run_confounds
from prfmap.progress import make_progress
from prfmap.report.participant import ReportContext, write_participant_report
from prfmap.signals import check_stop, stop_on_signal

logger = logging.getLogger(__name__)

ProgressFn = Callable[[str, int, int], None]


@dataclass(frozen=True)
class FitPlan:
    """Runs fitted together: one participant, session, task and space (both hemispheres).

    Attributes
    ----------
    key : OutputKey
        The entities of every output of the fit.
    runs : tuple of RunInput
        The runs, in the order the query found them.
    """

    key: OutputKey
    runs: tuple[RunInput, ...]

    @property
    def name(self) -> str:
        """The fit's name in logs and checkpoint folders, e.g. ``task-prf_space-T1w_model-gauss``."""
        return self.key.stem().removeprefix(f"sub-{self.key.subject}_")


@dataclass(frozen=True)
class LoadedGroup:
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

    @property
    def warnings(self) -> tuple[str, ...]:
        """What the report should say about the loaded data (units repaired or refused)."""
        names = [run.name for run in self.plan.runs]
        found = (pre.repair.message(name) for pre, name in zip(self.runs, names, strict=False))
        return tuple(m for m in found if m)


@dataclass(frozen=True)
class FittedGroup:
    """A plan's data and the engine's result.

    Attributes
    ----------
    loaded : LoadedGroup
        The data that were fitted.
    result : FitResult
        Parameters, r², settings, timings (and predictions when kept).
    seconds : float
        Time spent fitting.
    warnings : tuple of str
        What the report should tell the user.
    cv : CrossValidation or None
        The leave-one-run-out ``cvr2`` (None with one run or ``--no-cvr2``).
    """

    loaded: LoadedGroup
    result: FitResult
    seconds: float
    warnings: tuple[str, ...] = ()
    cv: CrossValidation | None = None

    @property
    def timings(self) -> dict[str, float]:
        """Seconds per stage so far: ``load``, ``fit`` (and ``cross_validation``)."""
        timings = {"load": self.loaded.seconds, "fit": self.seconds}
        if self.cv is not None:
            timings["cross_validation"] = sum(self.cv.seconds)
        return timings

    def maps(self) -> dict[str, np.ndarray]:
        """Every map of the fit under its label, with ``cvr2`` when it was cross-validated."""
        maps = self.result.maps()
        if self.cv is not None:
            maps[catalog.PARAMETERS["cvr2"].label] = self.cv.cvr2
            status = maps.get(catalog.PARAMETERS["status"].label)
            if status is not None:
                maps[catalog.PARAMETERS["status"].label] = mark_not_reproducible(status, self.cv.z)
        return maps


def mark_not_reproducible(status: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``status`` with the ``not_reproducible`` bit set on fitted units whose held-out correlation
    ``z`` (``CrossValidation.z``) is not significant (:func:`prfmap.crossval.reproducible`)."""
    codes = catalog.status_codes(status)
    fitted = (codes & catalog.STATUS_BITS["no_signal"]) == 0
    z = np.where(fitted, z, np.nan)
    codes[fitted & ~reproducible(z)] |= catalog.STATUS_BITS["not_reproducible"]
    return codes.astype(np.float64)


def run_participant_level(config: Config, command: Sequence[str] = ()) -> list[Path]:
    """Fit every selected participant and write their derivatives and reports.

    Parameters
    ----------
    config : Config
        Built by :func:`prfmap.cli.config.build_config`; the backend is already selected.
    command : sequence of str
        The command line, shown in the reports.

    Returns
    -------
    list of Path
        Every derivative file written.
    """
    execution, output_dir = config.execution, config.outputs.output_dir
    if execution.mem_gb_auto:
        logger.info("memory budget %.1f GB (--mem-gb; default: half the available memory)", execution.mem_gb)
    with stop_on_signal(how_to_resume(config), exit_deadline=True), _work_dir(execution.work_dir) as work_dir:
        recover_staging(output_dir)
        runs = find_runs(config.inputs, work_dir=work_dir)
        written: list[Path] = []
        for subject in sorted({r.subject for r in runs}):
            with _participant_log(output_dir, subject), participant_lock(output_dir, subject):
                try:
                    recover_staging(output_dir, subject)
                    mine = [r for r in runs if r.subject == subject]
                    written += run_participant(config, subject, mine, command)
                except Exception as err:
                    if not isinstance(err, PrfmapError):
                        logger.error("sub-%s failed", subject, exc_info=True)
                        err.prfmap_logged = True  # type: ignore[attr-defined]
                    raise
        return written


def run_participant(
    config: Config, subject: str, runs: Sequence[RunInput], command: Sequence[str] = ()
) -> list[Path]:
    """Load, fit, write and report every fit of one participant; returns the files published."""
    plans = plan_fits(runs, config.fit.model)
    logger.info(
        "sub-%s: %d run(s) in %d fit(s): %s",
        subject,
        len(runs),
        len(plans),
        ", ".join(p.name for p in plans),
    )
    with make_progress() as progress:
        fitted = [fit_group(load_group(plan, config, progress), config, progress) for plan in plans]
    check_stop("after fitting every chunk, before writing outputs", how_to_resume(config))
    output_dir = config.outputs.output_dir
    logger.info("sub-%s: writing the outputs%s", subject, " and the report" if config.outputs.report else "")
    stage = new_staging(output_dir, subject)
    try:
        published = _stage_and_publish(fitted, config, subject, stage, command)
    except BaseException:
        if not (stage / COMMIT).exists():  # nothing was published: the earlier set stands
            shutil.rmtree(stage, ignore_errors=True)
        raise
    links = config.inputs.dataset_links
    relative = {name: relative_link(path, output_dir) for name, path in links.items()}
    write_dataset_files(output_dir, source_datasets(links), relative)
    logger.info("sub-%s: published %d files under %s", subject, len(published), output_dir)
    remove_checkpoints(checkpoint_dir(config, subject))
    return published


def _stage_and_publish(
    fitted: list[FittedGroup], config: Config, subject: str, stage: Path, command: Sequence[str]
) -> list[Path]:
    """Write every output and the report into ``stage``, then publish them as the participant's set."""
    output_dir = config.outputs.output_dir
    start = time.perf_counter()
    staged = [write_group(group, config, stage) for group in fitted]
    write_seconds = time.perf_counter() - start
    if config.outputs.report:
        contexts = [
            report_context(
                group, [output_dir / p.relative_to(stage) for p in files], write_seconds, config, command
            )
            for group, files in zip(fitted, staged, strict=True)
        ]
        path = write_participant_report(stage, subject, contexts)
        logger.info("sub-%s: report %s", subject, output_dir / path.relative_to(stage))
    replaced = replaced_by([group.loaded.plan.key for group in fitted])
    return publish_participant(stage, output_dir, subject, replaced=replaced, remove_page=True)


def replaced_by(keys: Sequence[OutputKey]) -> Callable[[Path], bool]:
    """Which earlier outputs a new set replaces: the files of its fits and the report's figures.

    A file belongs to a fit when the entities of its name (all but hemi, desc and model) are the
    fit's and its model (the ``model`` entity, or the ``desc-<model>prediction`` of a series) is the
    fit's or none (``desc-preproc``); outputs of the participant's other fits (another task, space
    or model) are kept.
    """
    fits = {_fit_entities(key.stem()) for key in keys}

    def replaced(rel: Path) -> bool:
        entities, model = _fit_entities(rel.name)
        return "figures" in rel.parts or any(
            entities == fit and model in (None, fit_model) for fit, fit_model in fits
        )

    return replaced


def _fit_entities(name: str) -> tuple[frozenset[tuple[str, str]], str | None]:
    """The entities of a file name that identify its fit, and its model."""
    pairs = dict(part.split("-", 1) for part in name.split(".", 1)[0].split("_") if "-" in part)
    desc = pairs.get("desc", "")
    model = pairs.get("model") or (desc.removesuffix("prediction") if desc.endswith("prediction") else None)
    return frozenset((k, v) for k, v in pairs.items() if k not in ("hemi", "param", "desc", "model")), model


def plan_fits(runs: Sequence[RunInput], model: str) -> list[FitPlan]:
    """Group runs by participant, session, task, space and format, in the order found."""
    groups: dict[tuple[OutputKey, str], list[RunInput]] = {}
    for run in runs:
        res = run.entities.get("res")
        key = OutputKey(run.subject, run.session, run.task, run.space, run.den, res, model)
        groups.setdefault((key, run.kind), []).append(run)
    return [FitPlan(key, tuple(members)) for (key, _), members in groups.items()]


@dataclass(frozen=True)
class _Run:
    """One run read, before preprocessing."""

    data: np.ndarray
    geometry: UnitGeometry
    aperture: Aperture
    dummy_scans: int
    confounds: np.ndarray | None


def load_group(plan: FitPlan, config: Config, progress: ProgressFn) -> LoadedGroup:
    """Load, check and preprocess a plan's runs and combine them.

    Raises
    ------
    BadDataError
        The runs differ in units, TR or aperture grid, or a run's volumes do not match its
        aperture's frames.
    MissingInputError
        A run has no aperture, or ``--confounds`` was given and a run has no confounds file.
    UsageError
        An explicit ``--mem-gb`` is below what the plan must hold.
    """
    start = time.perf_counter()
    preprocessed: list[PreprocessedRun] = []
    designs: dict[str, np.ndarray] = {}
    first: _Run | None = None
    for i, run in enumerate(plan.runs):
        progress("load runs", i, len(plan.runs))
        read = _read_run(run, config)
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
        preprocessed.append(
            preprocess_run(
                read.data,
                run.tr,
                dummy_scans=read.dummy_scans,
                high_pass_hz=config.preprocessing.high_pass_hz,
                confounds=read.confounds,
                source=run.bold_files[0].name,
            )
        )
        repaired = preprocessed[-1].repair.message(run.name)
        if repaired:
            logger.warning(repaired)
        designs.setdefault(run.stimulus_key, read.aperture.design)
    progress("load runs", len(plan.runs), len(plan.runs))
    keys = [run.stimulus_key for run in plan.runs]
    names = {run.stimulus_key: Path(run.stim_file).name for run in plan.runs}
    combined = combine_runs(preprocessed, keys, designs, names=names)
    logger.info(
        "%s: %d run(s), %d stimulus sequence(s) → %d units × %d frames",
        plan.name,
        len(plan.runs),
        len(designs),
        *combined.data.shape,
    )
    aperture = first.aperture
    return LoadedGroup(
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
    )


def slice_time_of(plan: FitPlan, config: Config) -> SliceTimeReference:
    """The slice-time reference of a plan's runs: ``--slice-time-ref``, else the one their
    sidecars imply (:mod:`prfmap.io.timing`), logged with the rule that chose it.

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


def _read_run(run: RunInput, config: Config) -> _Run:
    """A run's BOLD, its aperture at the fitting resolution, its dummy scans and confounds."""
    data, geometry = load_bold(run)
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
    """Refuse an explicit ``--mem-gb`` below what a plan must hold (estimated from its first run);
    warn when the default is below it."""
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


def fit_group(loaded: LoadedGroup, config: Config, progress: ProgressFn) -> FittedGroup:
    """Fit the combined data chunk by chunk, reusing the checkpoints of an interrupted run; then,
    with two or more runs, the leave-one-run-out folds of ``cvr2`` the same way."""
    plan, combined = loaded.plan, loaded.combined
    stim = Stimulus(combined.design, fov_deg=loaded.fov_deg, run_lengths=combined.run_lengths)
    keep = config.outputs.keep_predictions
    start = time.perf_counter()
    result = _checkpointed_fit(loaded, config, combined, stim, plan.name, progress, keep=keep)
    seconds = time.perf_counter() - start
    r2 = np.asarray(result.r2)
    fitted = np.isfinite(np.asarray(result.params["x"]))
    n_bad = int((~fitted).sum())
    warnings = loaded.warnings
    if n_bad:
        warnings += (
            f"{n_bad} of {fitted.size} units had no usable signal (NaN or constant: medial "
            "wall, outside the brain) and are NaN in the maps",
        )
    logger.info(
        "%s: fitted %d units in %.1f s, median r² %.3f",
        plan.name,
        int(fitted.sum()),
        seconds,
        float(np.nanmedian(r2[fitted])) if fitted.any() else float("nan"),
    )
    return FittedGroup(loaded, result, seconds, warnings, cross_validate_group(loaded, config, progress))


def _checkpointed_fit(
    loaded: LoadedGroup,
    config: Config,
    data: CombinedData,
    stim: Stimulus,
    name: str,
    progress: ProgressFn,
    *,
    keep: bool,
    **identity: Any,
) -> FitResult:
    """``fit_chunked`` of combined runs with the configuration's fit options; ``identity`` adds
    what else tells this fit's checkpoints apart (a fold's held-out run)."""
    execution = config.execution
    fit_kwargs = {
        **config.fit.engine_kwargs(),
        "slice_time_ref": loaded.slice_time.fraction,
        "nuisance": data.nuisance,
        "mem_gb": engine_mem_gb(execution.mem_gb),
        "return_predictions": keep,
    }
    settings = {
        **config.to_dict()["fit"],
        "slice_time_ref": loaded.slice_time.fraction,
        "return_predictions": keep,
        **identity,
    }
    if fit_kwargs["hrf"] == "participant":
        hrf = participant_hrf(loaded, data, stim, fit_kwargs, name, progress)
        fit_kwargs["hrf"], settings["hrf_model"] = hrf, hrf.describe()
    return fit_chunked(
        data.data,
        stim,
        loaded.tr,
        folder=checkpoint_dir(config, loaded.plan.key.subject) / loaded.plan.name,
        chunk=chunk_units(execution.mem_gb, data.data.shape[1]),
        fit_kwargs=fit_kwargs,
        settings=settings,
        inputs=loaded.inputs,
        name=name,
        how_to_resume=how_to_resume(config),
        progress=progress,
        budget="auto" if execution.mem_gb_auto else None,
    )


def participant_hrf(
    loaded: LoadedGroup,
    data: CombinedData,
    stim: Stimulus,
    fit_kwargs: dict[str, Any],
    name: str,
    progress: ProgressFn,
) -> HRF:
    """The HRF of ``--hrf participant``, estimated once from all units of ``data`` (the combined
    runs of the fit, or of one cross-validation fold's training runs) before the chunked fit."""
    start = time.perf_counter()
    hrf = estimate_hrf(
        data.data,
        stim,
        loaded.tr,
        nuisance=data.nuisance,
        slice_time_ref=fit_kwargs["slice_time_ref"],
        mem_gb=fit_kwargs["mem_gb"],
        progress=progress,
    )
    logger.info(
        "%s: participant HRF from %d units in %.1f s: peak delay %.2f s, dispersion %.2f "
        "(maximum at %.2f s; SPM's canonical: 6 s, 1, 5 s)",
        name,
        hrf.units,
        time.perf_counter() - start,
        hrf.delay,
        hrf.dispersion,
        hrf.peak_s(),
    )
    return hrf


def cross_validate_group(loaded: LoadedGroup, config: Config, progress: ProgressFn) -> CrossValidation | None:
    """``cvr2`` of every unit (:mod:`prfmap.crossval`): each run predicted by a checkpointed fit of
    the others; None with fewer than two runs or ``--no-cvr2``."""
    plan = loaded.plan
    if not config.outputs.cvr2 or len(loaded.runs) < 2:
        if config.outputs.cvr2:
            logger.info("%s: one run, no cross-validated r² (cvr2 needs two or more runs)", plan.name)
        return None
    names = [run.name for run in plan.runs]

    def fit_fold(training: CombinedData, stim: Stimulus, fold: Fold) -> FitResult:
        name = f"{plan.name} fold {fold.held_out + 1}/{len(names)} (held out: {names[fold.held_out]})"
        return _checkpointed_fit(
            loaded, config, training, stim, name, progress, keep=False, held_out_run=names[fold.held_out]
        )

    cv = cross_validate(
        loaded.runs,
        [run.stimulus_key for run in plan.runs],
        loaded.designs,
        fov_deg=loaded.fov_deg,
        fit=fit_fold,
        predict=engine_predictor(loaded.tr, config.fit.model, slice_time_ref=loaded.slice_time.fraction),
    )
    logger.info(
        "%s: cvr2 from %d leave-one-run-out folds in %.1f s, median %.3f",
        plan.name,
        len(cv.folds),
        sum(cv.seconds),
        float(np.nanmedian(cv.cvr2)) if np.isfinite(cv.cvr2).any() else float("nan"),
    )
    return cv


def write_group(fitted: FittedGroup, config: Config, folder: Path) -> tuple[Path, ...]:
    """Write a fit's maps (and, with ``--save-predictions``, its time series) under ``folder``."""
    loaded, result = fitted.loaded, fitted.result
    key, geometry = loaded.plan.key, loaded.geometry
    maps = {label: np.asarray(v, dtype=np.float32) for label, v in fitted.maps().items()}
    provenance = provenance_of(fitted, config)
    func = key.func_dir(folder)
    reference_dir = config.inputs.fmriprep_dir
    written = write_map_files(func, key, geometry, maps, dict(result.settings), provenance, reference_dir)
    if config.outputs.save_predictions and result.predictions is not None:
        series = {
            f"{key.model}prediction": (result.predictions, "fitted model time series"),
            "preproc": (loaded.combined.data, "preprocessed data the model was fitted to"),
        }
        written += write_series_files(func, key, geometry, series, loaded.tr, provenance, reference_dir)
    return tuple(written)


def provenance_of(fitted: FittedGroup, config: Config) -> dict[str, Any]:
    """What every sidecar of a fit records: inputs, stimulus, preprocessing, software, timings."""
    loaded = fitted.loaded
    runs = loaded.plan.runs
    info = backend_info()
    return {
        "Sources": [bids_uri(p, config.inputs.dataset_links) for p in loaded.inputs],
        "Runs": [run.name for run in runs],
        "RepetitionTime": loaded.tr,
        "SliceTimeReference": loaded.slice_time.describe(loaded.tr),
        "Stimulus": {
            "Files": sorted({bids_uri(r.stim_file, config.inputs.dataset_links) for r in runs}),
            "FieldOfViewDeg": loaded.source_fov_deg,
            "Pixels": list(loaded.source_pixels),
            "FittedPixels": list(loaded.pixels),
            "FittedPixelDeg": loaded.fov_deg / (loaded.pixels[1] - 1),
            "FramesPerRun": list(loaded.combined.run_lengths),
        },
        "Preprocessing": {
            "DummyScans": list(loaded.dummy_scans),
            "HighPassHz": config.preprocessing.high_pass_hz,
            "Confounds": list(config.preprocessing.confounds),
            "Units": "percent signal change",
            "RunCombination": "runs with the same stimulus averaged, others concatenated",
        },
        "Software": {"prfmap": __version__, **info},
        "Device": info.get("device"),
        "RandomSeed": config.fit.random_seed,
        "Timings": {**fitted.timings, **dict(fitted.result.timings)},
        "VarianceExplained": variance_explained(fitted, config),
    }


def variance_explained(fitted: FittedGroup, config: Config) -> dict[str, Any]:
    """What the sidecars and the report say about r2, cvr2 and the threshold."""
    names = [run.name for run in fitted.loaded.plan.runs]
    out: dict[str, Any] = {
        "r2": "variance explained in the data that were fitted (after nuisance projection)",
        "Threshold": f"{config.outputs.threshold_on} >= {config.outputs.r2_threshold:g} "
        "(--threshold-on, --r2-threshold)",
    }
    if fitted.cv is None:
        out["cvr2"] = "not computed: " + (
            "--no-cvr2" if not config.outputs.cvr2 else "it needs two or more runs"
        )
        return out
    out["cvr2"] = DEFINITION
    out["Folds"] = [
        {"HeldOut": names[f.held_out], "Fitted": [names[i] for i in f.training], "Seconds": round(t, 3)}
        for f, t in zip(fitted.cv.folds, fitted.cv.seconds, strict=True)
    ]
    return out


def report_context(
    fitted: FittedGroup,
    outputs: Sequence[Path],
    write_seconds: float,
    config: Config,
    command: Sequence[str] = (),
) -> ReportContext:
    """What the participant report shows of one fit."""
    loaded, result = fitted.loaded, fitted.result
    plan, key = loaded.plan, loaded.plan.key
    return ReportContext(
        subject=key.subject,
        space=key.space,
        maps=fitted.maps(),
        model=key.model,
        session=key.session,
        task=key.task,
        den=key.den,
        inputs=list(loaded.inputs),
        runs=[r.name.removeprefix(f"sub-{key.subject}_") for r in plan.runs],
        tr=loaded.tr,
        dummy_scans=max(loaded.dummy_scans, default=0),
        design=loaded.combined.design,
        fov_deg=loaded.fov_deg,
        settings={
            **dict(result.settings),
            "slice_time_reference": loaded.slice_time.describe(loaded.tr),
            "variance_explained": variance_explained(fitted, config),
        },
        backend=backend_info(),
        timings={**fitted.timings, "write": write_seconds, **dict(result.timings)},
        warnings=list(fitted.warnings),
        surface=loaded.geometry.surface(),
        fmriprep_dir=config.inputs.fmriprep_dir,
        data=loaded.combined.data,
        predictions=result.predictions,
        r2_threshold=config.outputs.r2_threshold,
        outputs=[str(p.relative_to(config.outputs.output_dir)) for p in outputs],
        dataset_dir=config.inputs.bids_dir,
        command=list(command) or None,
        preprocessing=provenance_of(fitted, config)["Preprocessing"],
        run_inputs=list(plan.runs),
        volume=loaded.geometry if isinstance(loaded.geometry, VolumeGeometry) else None,
    )


def checkpoint_dir(config: Config, subject: str) -> Path:
    """Where a participant's checkpoints live: ``<work dir or output_dir/.prfmap-work>/checkpoints``."""
    work_dir = config.execution.work_dir
    root = work_dir if work_dir is not None else config.outputs.output_dir / ".prfmap-work"
    return root / "checkpoints" / f"sub-{subject}"


def how_to_resume(config: Config) -> str:
    """The sentence telling a stopped run how to continue."""
    same = " with the same --work-dir" if config.execution.work_dir is not None else ""
    return f"run the same command again{same} to resume from the saved chunks"


@contextlib.contextmanager
def _work_dir(work_dir: Path | None) -> Iterator[Path]:
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
        yield work_dir
        return
    with tempfile.TemporaryDirectory(prefix="prfmap-work-") as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def _participant_log(output_dir: Path, subject: str) -> Iterator[Path]:
    logs = output_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"sub-{subject}_{time.strftime('%Y%m%d-%H%M%S')}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    root = logging.getLogger("prfmap")
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()
