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
from pathlib import Path

from prfmap.config import (
    Config,
    ExecutionConfig,
    FitConfig,
    InputsConfig,
    OutputsConfig,
    PreprocessingConfig,
)
from prfmap.errors import UsageError
from prfmap.io.datasets import bids_root, derivative_roots, read_bids_filter
from prfmap.memory import default_mem_gb


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
        ``output_dir`` equals ``bids_dir``.
    """
    bids_dir, output_dir = _absolute(opts.bids_dir), _absolute(opts.output_dir)
    participant = opts.analysis_level == "participant"
    if participant:
        bids_dir = bids_root(bids_dir)
    if output_dir == bids_dir:
        raise UsageError("output_dir must differ from bids_dir; use e.g. bids_dir/derivatives/prfmap")
    inputs = InputsConfig(
        bids_dir=bids_dir,
        derivatives=derivative_roots(bids_dir, opts.derivatives),
        participant_labels=tuple(opts.participant_label or ()),
        session_labels=tuple(opts.session_label or ()),
        tasks=tuple(opts.task or ()),
        runs=tuple(opts.run or ()),
        space=opts.space,
        bids_filter=read_bids_filter(opts.bids_filter_file) if opts.bids_filter_file else {},
        stimulus=opts.stimulus,
        stimulus_fov_deg=opts.stimulus_fov_deg,
        validate=not opts.skip_bids_validation,
    )
    if opts.omp_nthreads and opts.nprocs and opts.omp_nthreads > opts.nprocs:
        raise UsageError(
            f"--omp-nthreads {opts.omp_nthreads} exceeds --nprocs {opts.nprocs}; each process's "
            "pools cannot use more threads than the whole run"
        )
    mem_gb_auto = participant and not opts.mem_gb
    execution = ExecutionConfig(
        analysis_level=opts.analysis_level,
        backend=opts.backend or os.environ.get("KERAS_BACKEND") or "jax",
        device=opts.device,
        nprocs=opts.nprocs,
        omp_nthreads=opts.omp_nthreads,
        mem_gb=default_mem_gb() if mem_gb_auto else opts.mem_gb,
        mem_gb_auto=mem_gb_auto,
        work_dir=_absolute(opts.work_dir),
        verbose=opts.verbose_count,
        fs_license_file=_absolute(opts.fs_license_file),
    )
    return Config(
        inputs=inputs,
        preprocessing=PreprocessingConfig(
            dummy_scans=opts.dummy_scans,
            high_pass_hz=opts.high_pass_hz,
            confounds=tuple(opts.confounds or ()),
        ),
        fit=FitConfig(
            model=opts.model,
            refine=opts.refine,
            refine_r2_min=opts.refine_r2_min,
            fit_hrf=opts.fit_hrf,
            random_seed=opts.random_seed,
        ),
        outputs=OutputsConfig(
            output_dir=output_dir,
            save_predictions=opts.save_predictions,
            report=not opts.no_report,
            r2_threshold=opts.r2_threshold,
        ),
        execution=execution,
    )
