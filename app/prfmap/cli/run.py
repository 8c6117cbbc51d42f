"""The ``prfmap`` console script: parse, set up the backend and logs, run a level, exit."""

from __future__ import annotations

import logging
import os
import sys
import time
from argparse import Namespace
from collections.abc import Sequence
from pathlib import Path

from prfmap.cli.caches import place_compile_caches
from prfmap.cli.parser import build_parser
from prfmap.errors import ExitCode, NotBIDSError, PrfmapError, UsageError, output_error

LOGGER = logging.getLogger("prfmap")
BACKEND_PACKAGES = {"jax": "jax", "torch": "torch", "tensorflow": "tensorflow"}
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
)


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
        act on (one line on stderr), 64 for usage errors, 17 for an unknown analysis level and
        1 for unexpected failures (the traceback goes to the log file).
    """
    parser = build_parser()
    try:
        opts = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    _configure_console(opts.verbose_count)
    log_file: Path | None = None
    try:
        _check_dirs(opts)
        log_file = _open_run_log(opts.output_dir)
        LOGGER.info("prfmap %s", " ".join(sys.argv[1:] if argv is None else argv))
        if opts.analysis_level == "participant":
            _select_backend(opts)
            from prfmap.workflow import run_participant_level

            run_participant_level(opts)
        else:
            from prfmap.group import run_group

            run_group(
                opts.output_dir,
                participant_labels=opts.participant_label,
                r2_threshold=opts.r2_threshold,
                report=not opts.no_report,
            )
        return int(ExitCode.OK)
    except PrfmapError as err:
        LOGGER.debug("error", exc_info=True)
        _print_error(str(err))
        return int(err.exit_code)
    except KeyboardInterrupt:
        _print_error("interrupted")
        return 130
    except OSError as err:
        mapped = output_error(err)
        if mapped is None:
            return _unexpected(err, log_file)
        LOGGER.debug("error", exc_info=True)
        _print_error(str(mapped))
        return int(mapped.exit_code)
    except Exception as err:
        return _unexpected(err, log_file)
    finally:
        _close_handlers()


def _unexpected(err: Exception, log_file: Path | None) -> int:
    """Exit 1, the traceback in the log."""
    if not getattr(err, "prfmap_logged", False):
        LOGGER.error("unexpected failure", exc_info=True)
    where = f"; the traceback is in {log_file}" if log_file else ""
    _print_error(f"unexpected {type(err).__name__}: {err}{where}")
    return int(ExitCode.UNEXPECTED)


def _print_error(message: str) -> None:
    sys.stderr.write(f"prfmap: error: {' '.join(message.split())}\n")
    sys.stderr.flush()


def _configure_console(verbose: int) -> None:
    LOGGER.setLevel(logging.DEBUG)
    LOGGER.propagate = False
    handler = logging.StreamHandler(sys.stdout)
    handler.setLevel(logging.DEBUG if verbose else logging.INFO)
    handler.setFormatter(
        logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s", "%H:%M:%S")
    )
    handler.set_name("prfmap-console")
    LOGGER.addHandler(handler)
    if verbose >= 2:
        logging.basicConfig(level=logging.DEBUG)
    else:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _close_handlers() -> None:
    for handler in list(LOGGER.handlers):
        if handler.get_name() in ("prfmap-console", "prfmap-run-log"):
            LOGGER.removeHandler(handler)
            handler.close()


def _check_dirs(opts: Namespace) -> None:
    opts.bids_dir = Path(opts.bids_dir).expanduser().absolute()
    opts.output_dir = Path(opts.output_dir).expanduser().absolute()
    if opts.work_dir is not None:
        opts.work_dir = Path(opts.work_dir).expanduser().absolute()
    if opts.analysis_level == "participant":
        if not opts.bids_dir.is_dir():
            raise NotBIDSError(
                f"bids_dir {opts.bids_dir} is not a folder; give a BIDS dataset root"
            )
        if not (opts.bids_dir / "dataset_description.json").is_file():
            raise NotBIDSError(
                f"{opts.bids_dir} is not a BIDS dataset (no dataset_description.json); "
                "give the dataset root as bids_dir"
            )
        check_output_locations(opts.bids_dir, opts.output_dir, opts.work_dir,
                               [Path(p) for _, p in opts.derivatives or []])
    elif opts.output_dir.resolve() == opts.bids_dir.resolve():
        raise UsageError("output_dir must differ from bids_dir; use e.g. bids_dir/derivatives/prfmap")


def check_output_locations(bids_dir: Path, output_dir: Path, work_dir: Path | None,
                           derivatives: list[Path]) -> None:
    """Refuse output and work folders in the datasets being read, with every path resolved first.

    ``output_dir`` and ``work_dir`` may not be, or lie inside, ``bids_dir``'s raw tree or a
    derivatives folder being read (``--derivatives``, else ``bids_dir/derivatives/fmriprep``);
    ``bids_dir/derivatives/<anything else>`` is allowed.

    Raises
    ------
    UsageError
        Naming the option, where it resolves to, and the folder it would write into.
    """
    raw = bids_dir.resolve()
    read = [p.resolve() for p in derivatives or [bids_dir / "derivatives" / "fmriprep"]]
    for option, folder in (("output_dir", output_dir), ("--work-dir", work_dir)):
        if folder is None:
            continue
        where = folder.resolve()
        shown = f"{option} {folder}" + (f" (resolves to {where})" if where != folder else "")
        if where == raw:
            raise UsageError(f"{shown} is bids_dir; use e.g. {raw / 'derivatives' / 'prfmap'}")
        for source in read:
            if where == source or where.is_relative_to(source):
                raise UsageError(f"{shown} lies inside the derivatives being read ({source}); "
                                 f"use e.g. {raw / 'derivatives' / 'prfmap'}")
        if where.is_relative_to(raw) and not where.is_relative_to(raw / "derivatives"):
            raise UsageError(f"{shown} lies inside the raw dataset {raw}, which prfmap never writes "
                             f"into; use a folder outside it or under {raw / 'derivatives'}")


def _open_run_log(output_dir: Path) -> Path:
    logs = output_dir / "logs"
    try:
        logs.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create output_dir {output_dir}: {err.strerror}") from None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    path = logs / f"prfmap_{stamp}_{os.getpid()}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    handler.set_name("prfmap-run-log")
    LOGGER.addHandler(handler)
    return path


def _select_backend(opts: Namespace) -> None:
    """Set threads and visible devices, then the Keras backend, before Keras is imported."""
    if opts.nprocs:
        for name in THREAD_VARIABLES:
            os.environ[name] = str(opts.nprocs)
        flags = os.environ.get("XLA_FLAGS", "")
        if "intra_op_parallelism_threads" not in flags:
            os.environ["XLA_FLAGS"] = (
                f"{flags} --xla_cpu_multi_thread_eigen=false "
                f"intra_op_parallelism_threads={opts.nprocs}"
            ).strip()
    if opts.device == "cpu":
        os.environ["CUDA_VISIBLE_DEVICES"] = ""
        os.environ["JAX_PLATFORMS"] = "cpu"
    elif opts.device.startswith("gpu:"):
        index = int(opts.device.partition(":")[2])
        visible = [d for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d]
        if visible and index >= len(visible):
            raise UsageError(
                f"--device {opts.device}: only {len(visible)} GPU(s) are visible "
                f"(CUDA_VISIBLE_DEVICES={','.join(visible)})"
            )
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[index] if visible else str(index)
    name = opts.backend or os.environ.get("KERAS_BACKEND") or "jax"
    if "keras" not in sys.modules:
        os.environ["KERAS_BACKEND"] = name
    cache_note = place_compile_caches(name, opts.work_dir)
    if cache_note:
        LOGGER.warning(cache_note)
    try:
        from prfmap.engine.backend import select_backend
    except ImportError as err:
        if (err.name or "").partition(".")[0] != BACKEND_PACKAGES.get(name):
            raise
        raise UsageError(
            f"backend {name!r} is not installed: pip install 'prfmap[{name}]' "
            "or use a container image built for it"
        ) from None
    select_backend(name)
    opts.backend = name
    if opts.nprocs and name == "torch":
        import torch

        torch.set_num_threads(opts.nprocs)
    if opts.device.startswith("gpu"):
        from prfmap.engine import backend_info

        device = str(backend_info().get("device", "cpu"))
        if not any(tag in device.lower() for tag in ("gpu", "cuda")):
            raise UsageError(
                f"--device {opts.device}: the {name} backend sees no GPU (device {device}); "
                "install the backend's CUDA build or use --device cpu"
            )


if __name__ == "__main__":
    sys.exit(main())
