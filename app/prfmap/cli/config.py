"""Turn the parsed command line into the run's :class:`~prfmap.config.Config`, checking it once.

The argument parser checks each option's syntax (labels, numbers, space names, that the files
given exist and parse); :func:`build_config` checks what needs several options or the file system
before anything is written (the BIDS root, ``output_dir`` against ``bids_dir``) and fills the
defaults that depend on the machine (``--mem-gb``, the backend, the derivatives folder). The
derivatives folders are checked when the query starts (:func:`prfmap.io.bids.find_runs`), after
the backend was selected. Nothing checks these twice.
"""

from __future__ import annotations

import os
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path

from prfmap.config import (
    Config,
    ExecutionConfig,
    FitConfig,
    InputsConfig,
    OutputsConfig,
    PreprocessingConfig,
)
from prfmap.engine import catalog
from prfmap.engine.backend import DEFAULT_BACKEND
from prfmap.engine.catalog.connective import CF_MODEL
from prfmap.errors import UsageError
from prfmap.io.atlases import is_label_file
from prfmap.io.datasets import bids_root, derivative_roots, read_bids_filter
from prfmap.runtime.memory import default_mem_gb


def _absolute(path: Path | None) -> Path | None:
    return None if path is None else Path(path).expanduser().absolute()


def build_config(opts: Namespace) -> Config:
    """The configuration of a run from :func:`prfmap.cli.parser.build_parser`'s namespace.

    Parameters
    ----------
    opts : argparse.Namespace
        The parsed options.

    Returns
    -------
    Config
        Absolute paths, defaults filled in.

    Raises
    ------
    NotBIDSError
        ``bids_dir`` is not a BIDS dataset (participant level).
    UsageError
        ``output_dir`` or ``--work-dir`` in the datasets read (:func:`check_output_locations`).
    """
    bids_dir, output_dir = _absolute(opts.bids_dir), _absolute(opts.output_dir)
    participant = opts.analysis_level == "participant"
    if participant:
        bids_dir = bids_root(bids_dir)
    derivatives = derivative_roots(bids_dir, opts.derivatives)
    check_output_locations(
        bids_dir,
        output_dir,
        _absolute(opts.work_dir) if participant else None,
        [p for _, p in derivatives] if participant else [],
        _absolute(opts.bids_database_dir) if participant else None,
    )
    inputs = InputsConfig(
        bids_dir=bids_dir,
        derivatives=derivatives,
        participant_labels=tuple(opts.participant_label or ()),
        session_labels=tuple(opts.session_label or ()),
        tasks=tuple(opts.task or ()),
        runs=tuple(opts.run or ()),
        space=opts.space,
        bids_filter=read_bids_filter(opts.bids_filter_file) if opts.bids_filter_file else {},
        stimulus=opts.stimulus,
        stimulus_fov_deg=opts.stimulus_fov_deg,
        validate=not opts.skip_bids_validation,
        roi=tuple(str(Path(a).resolve()) if is_label_file(a) else a for a in opts.roi or ()),
        apertures=CF_MODEL not in opts.model,
    )
    if any(not is_label_file(a) for a in opts.roi or ()) and opts.atlas == "none":
        raise UsageError("--roi names visual areas of --atlas; it cannot go with --atlas none")
    if opts.omp_nthreads and opts.nprocs and opts.omp_nthreads > opts.nprocs:
        raise UsageError(
            f"--omp-nthreads {opts.omp_nthreads} exceeds --nprocs {opts.nprocs}; each process's "
            "pools cannot use more threads than the whole run"
        )
    if opts.mem_mb and opts.mem_gb:
        raise UsageError(f"give --mem-gb {opts.mem_gb:g} or --mem-mb {opts.mem_mb:g}, not both")
    mem_gb = opts.mem_gb or (opts.mem_mb / 1024 if opts.mem_mb else None)
    mem_gb_auto = participant and not mem_gb
    execution = ExecutionConfig(
        analysis_level=opts.analysis_level,
        backend=opts.backend or os.environ.get("KERAS_BACKEND") or DEFAULT_BACKEND,
        device=opts.device,
        nprocs=opts.nprocs,
        omp_nthreads=opts.omp_nthreads,
        mem_gb=default_mem_gb() if mem_gb_auto else mem_gb,
        mem_gb_auto=mem_gb_auto,
        work_dir=_absolute(opts.work_dir),
        bids_database_dir=_absolute(opts.bids_database_dir),
        verbose=opts.verbose_count,
        fs_license_file=_absolute(opts.fs_license_file),
    )
    return Config(
        inputs=inputs,
        preprocessing=PreprocessingConfig(
            dummy_scans=opts.dummy_scans,
            high_pass_hz=opts.high_pass_hz,
            confounds=tuple(opts.confounds or ()),
            bold_scale=opts.bold_scale,
            smooth_fwhm=opts.smooth_fwhm or None,
        ),
        fit=_fit_section(opts),
        outputs=_outputs(opts, output_dir),
        execution=execution,
    )


def _fit_section(opts: Namespace) -> FitConfig:
    models = fitted_models(opts.model)
    cf_source: tuple[str, ...] = ()
    if CF_MODEL in models:
        if len(models) > 1:
            raise UsageError("--model cf fits connective fields on their own; give it alone")
        if not opts.cf_source:
            raise UsageError(
                "--model cf needs --cf-source AREA (an area of --atlas, e.g. V1, or a label file)"
            )
        cf_source = tuple(str(Path(a).resolve()) if is_label_file(a) else a for a in opts.cf_source)
        if not all(is_label_file(a) for a in opts.cf_source) and opts.atlas == "none":
            raise UsageError("--cf-source names an area of --atlas; it cannot go with --atlas none")
    elif opts.cf_source:
        raise UsageError("--cf-source is the source area of --model cf; add --model cf")
    return FitConfig(
        model=models[0],
        compared=models if len(models) > 1 else (),
        refine=opts.refine,
        refine_r2_min=opts.refine_r2_min,
        hrf="vertex" if opts.fit_hrf else opts.hrf,
        noise_model=opts.noise_model,
        covariance=opts.covariance,
        sigma_prior=opts.sigma_prior,
        delay_prior=opts.delay_prior,
        random_seed=opts.random_seed,
        slice_time_ref=opts.slice_time_ref,
        cf_source=cf_source,
    )


def fitted_models(asked: str | Sequence[str]) -> tuple[str, ...]:
    """The models ``--model`` asks for, in the catalogue's order, the Gaussian first among several.

    ``all`` is every model of the catalogue; a comparison of several models always includes the
    Gaussian, which the others seed from and are compared with.

    Parameters
    ----------
    asked : str or sequence of str
        ``--model``'s values.

    Returns
    -------
    tuple of str
    """
    names = [asked] if isinstance(asked, str) else list(asked)
    if CF_MODEL in names:
        return (CF_MODEL, *(m for m in catalog.MODELS if m in names or "all" in names))
    chosen = set(catalog.MODELS) if "all" in names else set(names)
    if len(chosen) > 1:
        chosen.add("gauss")
    return tuple(m for m in catalog.MODELS if m in chosen)


def _outputs(opts: Namespace, output_dir: Path) -> OutputsConfig:
    if opts.reports_only and opts.no_report:
        raise UsageError("--reports-only rebuilds the reports; it cannot go with --no-report")
    return OutputsConfig(
        output_dir=output_dir,
        save_predictions=opts.save_predictions,
        report=not opts.no_report,
        r2_threshold=opts.r2_threshold,
        cvr2=not opts.no_cvr2,
        threshold_on=opts.threshold_on,
        atlas=opts.atlas,
        reports_only=opts.reports_only,
    )


def check_output_locations(
    bids_dir: Path,
    output_dir: Path,
    work_dir: Path | None,
    derivatives: list[Path],
    database_dir: Path | None = None,
) -> None:
    """Refuse output and work folders in the datasets being read, with every path resolved first.

    ``output_dir`` and ``work_dir`` may not be, or lie inside, ``bids_dir``'s raw tree or a
    derivatives folder being read (``--derivatives``, else ``bids_dir/derivatives/fmriprep``);
    ``bids_dir/derivatives/<anything else>`` is allowed. ``database_dir`` (``--bids-database-dir``)
    follows the rules of ``work_dir``.

    Raises
    ------
    UsageError
        Naming the option, where it resolves to, and the folder it would write into; also a
        ``work_dir`` that is ``output_dir`` or a visible folder inside it.
    """
    raw = bids_dir.resolve()
    read = [Path(p).resolve() for p in derivatives]  # none at the group level: output_dir is read
    folders = (("output_dir", output_dir), ("--work-dir", work_dir), ("--bids-database-dir", database_dir))
    for option, folder in folders:
        if folder is None:
            continue
        where = folder.resolve()
        shown = f"{option} {folder}" + (f" (resolves to {where})" if where != folder else "")
        if where == raw:
            raise UsageError(f"{shown} is bids_dir; use e.g. {raw / 'derivatives' / 'prfmap'}")
        for source in read:
            if where == source or where.is_relative_to(source):
                raise UsageError(
                    f"{shown} lies inside the derivatives being read ({source}); "
                    f"use e.g. {raw / 'derivatives' / 'prfmap'}"
                )
        if where.is_relative_to(raw) and not where.is_relative_to(raw / "derivatives"):
            raise UsageError(
                f"{shown} lies inside the raw dataset {raw}, which prfmap never writes "
                f"into; use a folder outside it or under {raw / 'derivatives'}"
            )
    if work_dir is not None:
        _check_work_dir(
            "--work-dir",
            work_dir,
            output_dir,
            "its pybids database and checkpoints",
            "omit --work-dir to keep the checkpoints in output_dir/.prfmap-work/",
        )
    if database_dir is not None:
        _check_work_dir(
            "--bids-database-dir", database_dir, output_dir, "its pybids database", "omit --bids-database-dir"
        )


def _check_work_dir(option: str, work_dir: Path, output_dir: Path, holds: str, remedy: str) -> None:
    """Refuse a work folder whose files (pybids database, checkpoints) would join the derivatives.

    Neither ``output_dir`` nor a folder in it, except a hidden one (which BIDS tools skip).
    """
    out, where = output_dir.resolve(), work_dir.resolve()
    if where == out or (where.is_relative_to(out) and not where.relative_to(out).parts[0].startswith(".")):
        shown = "is output_dir" if where == out else f"lies inside output_dir {output_dir}"
        raise UsageError(
            f"{option} {work_dir} {shown}: {holds} would become part of the derivatives (which the BIDS "
            f"validator rejects); give a folder outside output_dir, or {remedy}"
        )
