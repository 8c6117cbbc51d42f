"""The participant level: find runs, load and preprocess them, fit, write derivatives and reports.

Runs are grouped per (participant, session, task, space); both hemispheres of a surface space are
fitted together. Runs that saw the same stimulus are averaged, different stimuli concatenated.
Everything a participant produces (maps, sidecars, series, report and figures) is written into a
staging folder and published as one set, under the participant's lock (:mod:`prfmap.io.publish`);
before that only log files exist.

Each stage takes and returns frozen values, so a stage can be run (and tested) on its own:

    plan.plan_fits(runs, model)                -> list[FitPlan]     runs fitted together
    load.load_fit(plan, config, progress)      -> LoadedFit         BOLD, apertures, preprocessing
    fit.fit_loaded(loaded, config, progress)   -> FitOutcome        participant HRF, checkpointed fit, cvr2
    outputs.write_outcome(outcome, config, folder) -> tuple[Path, ...]  maps, series and sidecars
    outputs.report_context(...)                -> ReportContext     what the report shows of a fit
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path

from prfmap.config import Config
from prfmap.derivatives import (
    relative_link,
    source_datasets,
    write_dataset_files,
)
from prfmap.derivatives.areas import write_atlas_description
from prfmap.derivatives.comparison import COMPARISON_MODEL
from prfmap.derivatives.connective import read_cf_fits
from prfmap.engine import catalog
from prfmap.engine.catalog.connective import CF_MODEL
from prfmap.errors import PrfmapError
from prfmap.io.bids import find_runs
from prfmap.io.logs import LogFile
from prfmap.io.publish import COMMIT, new_staging, participant_lock, publish_participant, recover_staging
from prfmap.io.runs import RunInput
from prfmap.participant.checkpoint import remove_checkpoints
from prfmap.participant.comparison import ComparedFit, compare_outcomes, log_comparison
from prfmap.participant.connective import run_connective_participant
from prfmap.participant.fit import FitOutcome, fit_models
from prfmap.participant.load import load_fit
from prfmap.participant.outputs import comparison_context, report_context, write_comparison, write_outcome
from prfmap.participant.plan import checkpoint_dir, how_to_resume, plan_fits, replaced_by
from prfmap.report.participant import write_participant_report
from prfmap.report.rebuild import fit_key_of, other_fits
from prfmap.runtime.progress import make_progress
from prfmap.runtime.signals import check_stop, stop_on_signal

logger = logging.getLogger(__name__)


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
        runs = find_runs(config.inputs, work_dir=work_dir, database_dir=execution.bids_database_dir)
        written: list[Path] = []
        subjects = sorted({r.subject for r in runs})
        for k, subject in enumerate(subjects, 1):
            with _participant_log(output_dir, subject), participant_lock(output_dir, subject):
                try:
                    recover_staging(output_dir, subject)
                    mine = [r for r in runs if r.subject == subject]
                    if config.fit.model == CF_MODEL:
                        written += run_connective_participant(
                            config, subject, mine, command, of=(k, len(subjects))
                        )
                    else:
                        written += run_participant(config, subject, mine, command, of=(k, len(subjects)))
                except Exception as err:
                    if not isinstance(err, PrfmapError):
                        logger.error("sub-%s failed", subject, exc_info=True)
                        err.prfmap_logged = True  # type: ignore[attr-defined]
                    raise
        return written


def run_participant(
    config: Config,
    subject: str,
    runs: Sequence[RunInput],
    command: Sequence[str] = (),
    of: tuple[int, int] = (1, 1),
) -> list[Path]:
    """Load, fit, write and report every fit of one participant; returns the files published.

    Parameters
    ----------
    config : Config
        The run's configuration.
    subject : str
        The participant's label.
    runs : sequence of RunInput
        Its runs.
    command : sequence of str
        The command line, shown in the report.
    of : tuple of int
        This participant's place among those of the run, and their number.

    Returns
    -------
    list of Path
        The files published.
    """
    start = time.perf_counter()
    plans = plan_fits(runs, config.fit.model)
    place = f" (participant {of[0]} of {of[1]})" if of[1] > 1 else ""
    logger.info(
        "sub-%s%s: %d run(s) in %d fit(s): %s",
        subject,
        place,
        len(runs),
        len(plans),
        ", ".join(p.name for p in plans),
    )
    models = len(config.models)
    fits = sum(models * (1 + (len(p.runs) if config.outputs.cvr2 and len(p.runs) > 1 else 0)) for p in plans)
    fitted: list[FitOutcome] = []
    compared: list[ComparedFit] = []
    title = f"sub-{subject}" + (f" ({of[0]}/{of[1]})" if of[1] > 1 else "")
    with make_progress(title=title, fits=fits) as progress:
        for plan in plans:
            outcomes = fit_models(load_fit(plan, config, progress), config, progress)
            fitted += outcomes
            comparison = compare_outcomes(outcomes)
            if comparison is not None:
                log_comparison(plan.name, comparison)
                compared.append(comparison)
            elif models > 1:
                logger.info(
                    "%s: the models are not compared: that needs two or more runs and cvr2", plan.name
                )
        check_stop("after fitting every chunk, before writing outputs", how_to_resume(config))
        output_dir = config.outputs.output_dir
        writing = "writing the outputs" + (" and the report" if config.outputs.report else "")
        logger.info("sub-%s: %s", subject, writing)
        progress.finishing(writing)
        stage = new_staging(output_dir, subject)
        try:
            published = _stage_and_publish(fitted, compared, config, subject, stage, command)
        except BaseException:
            if not (stage / COMMIT).exists():  # nothing was published: the earlier set stands
                shutil.rmtree(stage, ignore_errors=True)
            raise
    links = config.inputs.dataset_links
    relative = {name: relative_link(path, output_dir) for name, path in links.items()}
    write_dataset_files(output_dir, source_datasets(links), relative)
    for atlas in {
        group.loaded.areas.labels.atlas.name: group.loaded.areas.labels.atlas
        for group in fitted
        if group.loaded.areas
    }.values():
        write_atlas_description(output_dir, atlas)
    remove_checkpoints(checkpoint_dir(config, subject), [p for group in fitted for p in group.checkpoints])
    report = output_dir / f"sub-{subject}.html"
    logger.info(
        "sub-%s%s: published %d files under %s in %.0f s%s",
        subject,
        place,
        len(published),
        output_dir,
        time.perf_counter() - start,
        f"; report {report}" if config.outputs.report and report.is_file() else "",
    )
    return published


def _stage_and_publish(
    fitted: list[FitOutcome],
    compared: list[ComparedFit],
    config: Config,
    subject: str,
    stage: Path,
    command: Sequence[str],
) -> list[Path]:
    """Write every output and the report into ``stage``, then publish them as the participant's set."""
    output_dir = config.outputs.output_dir
    start = time.perf_counter()
    staged = [write_outcome(group, config.for_model(group.result.model), stage) for group in fitted]
    compared_files = [write_comparison(comparison, config, stage) for comparison in compared]
    write_seconds = time.perf_counter() - start
    if config.outputs.report:
        contexts = [
            report_context(
                group,
                [output_dir / p.relative_to(stage) for p in files],
                write_seconds,
                config.for_model(group.result.model),
                command,
            )
            for group, files in zip(fitted, staged, strict=True)
        ]
        published_as = [[output_dir / p.relative_to(stage) for p in files] for files in compared_files]
        comparisons = [
            comparison_context(
                c, next(x for g, x in zip(fitted, contexts, strict=True) if g is c.gauss), files, config
            )
            for c, files in zip(compared, published_as, strict=True)
        ]
        fits = [fit_key_of(group.loaded.plan.key) for group in fitted]
        earlier, earlier_comparisons = other_fits(config, subject, fits, list(command))
        if earlier:
            logger.info(
                "sub-%s: the report also shows the %d earlier fit(s) on disk this run does not replace",
                subject,
                len(earlier),
            )
        order = {model: i for i, model in enumerate(catalog.MODELS)}
        shown = sorted(
            contexts + earlier,
            key=lambda c: (
                c.session or "",
                c.task or "",
                c.space,
                c.den or "",
                order.get(c.model, len(order)),
            ),
        )
        connective = read_cf_fits(output_dir, subject)
        cf_shown = (config.outputs.r2_threshold, config.inputs.fmriprep_dir)
        path = write_participant_report(
            stage, subject, shown, comparisons + earlier_comparisons, connective, cf_shown
        )
        logger.info("sub-%s: report %s", subject, output_dir / path.relative_to(stage))
    keys = [group.loaded.plan.key for group in fitted]
    keys += [dataclasses.replace(c.gauss.loaded.plan.key, model=COMPARISON_MODEL) for c in compared]
    replaced = replaced_by(keys)
    return publish_participant(stage, output_dir, subject, replaced=replaced, remove_page=True)


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
    handler = LogFile(path)  # a full disk ends the run with one line (exit 73), not tracebacks
    root = logging.getLogger("prfmap")
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()
