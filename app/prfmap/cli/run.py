"""The ``prfmap`` console script.

Parse, build the configuration, set up the backend and logs, run a level, exit.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from argparse import Namespace
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from nibabel import imageglobals

from prfmap import __version__
from prfmap.cli.caches import place_compile_caches, place_xla_cache
from prfmap.cli.config import build_config
from prfmap.cli.parser import build_parser
from prfmap.config import Config, ExecutionConfig
from prfmap.engine.backend import select_backend
from prfmap.errors import ExitCode, OutputError, PrfmapError, UsageError, one_line, output_error
from prfmap.io.atomic import write_json_atomic
from prfmap.io.logs import LOG_FORMAT, Console, Forward, LogFile
from prfmap.io.validator import check_bids_dir
from prfmap.runtime.signals import (
    ERROR_LINE,
    STARTING,
    StopRequested,
    deferred_stop,
    end_process,
    exit_on_signal,
    stop_on_signal,
)

logger = logging.getLogger("prfmap.cli.run")  # not __name__: "__main__" under python -m
PACKAGE_LOGGER = logging.getLogger("prfmap")
"""Where the console and run-log handlers go: every module's logger is below it."""
LIBRARY_LOGGERS = (imageglobals.logger,)
"""Libraries' loggers that print on stderr through handlers of their own; a run forwards them to
prfmap's handlers instead (``io.logs.Forward``) and restores them when it ends."""
_library_handlers: dict[str, list[logging.Handler]] = {}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``prfmap bids_dir output_dir {participant,group} [options]``.

    Parameters
    ----------
    argv : sequence of str, optional
        The arguments after the program name (default: ``sys.argv[1:]``).

    Returns
    -------
    int
        The BIDS-Apps exit code: 0 on success, ``PrfmapError.exit_code`` for errors the user can
        act on (one line on stderr), 64 for usage errors, 17 for an unknown analysis level,
        1 for unexpected failures (the traceback goes to the log file) and 143/130 when SIGTERM/SIGINT
        stopped it, at any moment (:func:`prfmap.runtime.signals.stop_on_signal`).
    """
    try:
        with stop_on_signal(exit_deadline=argv is None):
            return _command(argv)
    except StopRequested as err:  # outside the command's own handling: parsing, the last clean-up
        _print_error(str(err))
        if argv is None:
            _leave_now(int(err.exit_code))
        return int(err.exit_code)


def _command(argv: Sequence[str] | None) -> int:
    """:func:`main` within its stop-signal handling."""
    ERROR_LINE.reset()
    parser = build_parser()
    try:
        opts = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    _configure_console(opts.verbose_count)
    try:
        code = _main(opts, argv)
    finally:
        failure = _close_handlers()
    if failure is not None and code == ExitCode.OK:  # the run log lost its last records
        _print_error(str(failure))
        return int(failure.exit_code)
    return code


def _main(opts: Namespace, argv: Sequence[str] | None) -> int:
    """Build the configuration, open the run log, run the level; the exit code."""
    log_file: Path | None = None
    try:
        config = build_config(opts)
        log_file = _open_run_log(config.outputs.output_dir)
        command = list(sys.argv[1:] if argv is None else argv)
        logger.info("prfmap %s", " ".join(command))
        _write_config(config, log_file, command)
        _run_level(config, ["prfmap", *command])
        return int(ExitCode.OK)
    except PrfmapError as err:
        logger.debug("error", exc_info=True)
        _print_error(str(err))
        if isinstance(err, StopRequested) and argv is None:
            _leave_now(int(err.exit_code))
        return int(err.exit_code)
    except KeyboardInterrupt:
        _print_error("interrupted")
        return 130
    except OSError as err:
        mapped = output_error(err)
        if mapped is None:
            return _unexpected(err, log_file)
        logger.debug("error", exc_info=True)
        _print_error(str(mapped))
        return int(mapped.exit_code)
    except Exception as err:
        return _unexpected(err, log_file)


def _leave_now(code: int) -> None:
    """End a stopped command at once.

    The frameworks' shutdown (joining their thread pools) can take longer than the 2 s a stop signal is given,
    and everything worth keeping is already on disk.
    """
    _close_handlers()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _unexpected(err: Exception, log_file: Path | None) -> int:
    """Exit 1, the traceback in the log."""
    if not getattr(err, "prfmap_logged", False):
        logger.error("unexpected failure", exc_info=True)
    where = f"; the traceback is in {log_file}" if log_file else ""
    _print_error(f"unexpected {type(err).__name__}: {err}{where}")
    return int(ExitCode.UNEXPECTED)


def _run_level(config: Config, command: list[str]) -> None:
    _log_fmriprep_options(config)
    if config.execution.analysis_level == "participant" and config.outputs.reports_only:
        # Imported here: rebuilding reports needs no backend, and the report loads matplotlib.
        from prfmap.report.rebuild import rebuild_reports

        rebuild_reports(config, command)
        return
    if config.execution.analysis_level == "participant":
        run_participant_level = _validated_and_imported(config)
        run_participant_level(config, command)
        return
    # Imported here: the group level's report loads matplotlib, which the participant level defers.
    from prfmap.group import run_group

    run_group(
        config.outputs.output_dir,
        participant_labels=config.inputs.participant_labels,
        r2_threshold=config.outputs.r2_threshold,
        threshold_on=config.outputs.threshold_on,
        report=config.outputs.report,
        bids_dir=config.inputs.bids_dir,
    )


def _validated_and_imported(config: Config) -> Callable[[Config, list[str]], list[Path]]:
    """Validate ``bids_dir`` while the backend is selected and the participant level imported.

    The validator is a program of its own and Keras takes seconds to import, so the two overlap
    (issue 18); nothing is written meanwhile, and a validation error is still the one reported
    (exit 16) when both fail.
    """
    with ThreadPoolExecutor(max_workers=1) as pool:
        validation = None
        try:
            # A stop raised inside the framework's C++ initialisation crashes it, and one raised while
            # the executor starts its thread leaves threading's bookkeeping broken (a KeyError later).
            with deferred_stop():
                if config.inputs.validate:
                    validation = pool.submit(check_bids_dir, config.inputs.bids_dir)
                _select_backend(config.execution)
                # Imported here: it imports Keras, which must not load before the backend is selected.
                from prfmap.participant.level import run_participant_level
        except BaseException:
            if validation is not None:
                validation.result()
            raise
        if validation is not None:
            validation.result()
    return run_participant_level


def _log_fmriprep_options(config: Config) -> None:
    """One line for each option that fMRIPrep-style wrappers pass by habit."""
    execution = config.execution
    if execution.fs_license_file is not None:
        logger.info(
            "--fs-license-file %s: accepted and not used (prfmap runs no FreeSurfer)",
            execution.fs_license_file,
        )
    if not config.inputs.validate:
        logger.info("--skip-bids-validation: bids_dir is not validated")
    if execution.omp_nthreads:
        logger.info(
            "--omp-nthreads %d: OpenMP/BLAS pools limited to %d thread(s) each",
            execution.omp_nthreads,
            execution.omp_nthreads,
        )


def _write_config(config: Config, log_file: Path, command: list[str]) -> Path:
    """Write the configuration next to the run log, as fMRIPrep writes its config file."""
    path = log_file.with_name(f"{log_file.stem}_config.json")
    return write_json_atomic(path, {"prfmap": __version__, "command": command, **config.to_dict()})


def _print_error(message: str) -> None:
    """Print the command's one error line, unless it (or the stop watchdog) printed it already."""
    if ERROR_LINE.claim():
        sys.stderr.write(f"prfmap: error: {one_line(message)}\n")
        sys.stderr.flush()


def _configure_console(verbose: int) -> None:
    PACKAGE_LOGGER.setLevel(logging.DEBUG)
    PACKAGE_LOGGER.propagate = False
    handler = Console(sys.stdout)
    handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    handler.setFormatter(logging.Formatter(LOG_FORMAT, "%H:%M:%S"))
    handler.set_name("prfmap-console")
    PACKAGE_LOGGER.addHandler(handler)
    for library in LIBRARY_LOGGERS:
        _library_handlers.setdefault(library.name, list(library.handlers))
        for own in list(library.handlers):
            library.removeHandler(own)
        library.addHandler(Forward(PACKAGE_LOGGER))
        library.propagate = False
    if verbose >= 2:
        logging.basicConfig(level=logging.DEBUG)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _close_handlers() -> OutputError | None:
    """Remove and close the console and run-log handlers; why the run log failed, if it did."""
    failure = None
    for library in LIBRARY_LOGGERS:
        for handler in list(library.handlers):
            library.removeHandler(handler)
        for handler in _library_handlers.pop(library.name, ()):
            library.addHandler(handler)
        library.propagate = True
    for handler in list(PACKAGE_LOGGER.handlers):
        if handler.get_name() in ("prfmap-console", "prfmap-run-log"):
            PACKAGE_LOGGER.removeHandler(handler)
            handler.close()
            failure = failure or getattr(handler, "failure", None)
    return failure


def _open_run_log(output_dir: Path) -> Path:
    logs = output_dir / "logs"
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = logs / f"prfmap_{stamp}_{os.getpid()}.log"
    try:
        logs.mkdir(parents=True, exist_ok=True)
        handler = LogFile(path, name="prfmap-run-log")
    except OSError as err:
        mapped = output_error(err)  # no permission, a read-only or full disk: 73, as documented
        if mapped is not None:
            raise mapped from None
        raise UsageError(f"cannot create output_dir {output_dir}: {err.strerror}") from None
    PACKAGE_LOGGER.addHandler(handler)
    return path


def _select_backend(execution: ExecutionConfig) -> None:
    """Set compile caches, threads, visible devices and the Keras backend, before Keras is imported."""
    cache_note = place_compile_caches(execution.backend, execution.work_dir)
    if cache_note:
        logger.warning(cache_note)
    xla_cache = place_xla_cache(execution.backend, execution.work_dir)
    if xla_cache is not None:
        logger.debug("JAX compilation cache: %s", xla_cache)
    select_backend(
        execution.backend,
        nprocs=execution.nprocs,
        device=execution.device,
        omp_threads=execution.omp_nthreads,
    )


if __name__ == "__main__":
    exit_on_signal(STARTING)
    end_process(main())
