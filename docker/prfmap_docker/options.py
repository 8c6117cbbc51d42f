"""prfmap's own options, as far as the launcher must know them to pass them through.

The launcher cannot import prfmap (it installs without the heavy backends), so it keeps this
table: how many values each option takes and which values are host paths to mount.
``tests/containers/test_launcher_options.py`` fails when it drifts from
``prfmap.cli.parser.build_parser()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Nargs = Literal[0, 1, "+"]
PathKind = Literal["dir", "file", "named_dir", "work_dir"] | None


@dataclass(frozen=True)
class Option:
    """One prfmap option.

    Attributes
    ----------
    names : tuple of str
        Every spelling argparse accepts (``--work-dir``, ``-w``).
    nargs : {0, 1, "+"}
        Values the option takes: none (a flag), exactly one, or one or more.
    path : {"dir", "file", "named_dir", "work_dir"} or None
        What its values are on the host: ``file`` (mounted read-only through its folder),
        ``named_dir`` (``NAME=PATH`` or a bare ``PATH``, mounted read-only),
        ``work_dir`` (a folder mounted read-write, created if missing: ``--work-dir``,
        ``--bids-database-dir``), or None for values passed through unchanged.
    """

    names: tuple[str, ...]
    nargs: Nargs = 1
    path: PathKind = None


PRFMAP_OPTIONS: tuple[Option, ...] = (
    Option(("-h", "--help"), nargs=0),
    Option(("--version",), nargs=0),
    Option(("--participant-label", "--participant_label"), nargs="+"),
    Option(("--session-label", "--session_label"), nargs="+"),
    Option(("--task",), nargs="+"),
    Option(("--run",), nargs="+"),
    Option(("--space",)),
    Option(("--roi",), nargs="+"),
    Option(("--cf-source",), nargs="+"),
    Option(("--derivatives",), nargs="+", path="named_dir"),
    Option(("--bids-filter-file",), path="file"),
    Option(("--bids-database-dir",), path="work_dir"),
    Option(("--skip-bids-validation", "--skip_bids_validation"), nargs=0),
    Option(("--fs-license-file", "--fs_license_file"), path="file"),
    Option(("--stimulus",), path="file"),
    Option(("--stimulus-fov-deg",)),
    Option(("--dummy-scans",)),
    Option(("--high-pass-hz",)),
    Option(("--bold-scale",)),
    Option(("--smooth-fwhm",)),
    Option(("--confounds",), nargs="+"),
    Option(("--model",), nargs="+"),
    Option(("--refine",)),
    Option(("--refine-r2-min",)),
    Option(("--hrf",)),
    Option(("--noise-model",)),
    Option(("--covariance",)),
    Option(("--sigma-prior",)),
    Option(("--delay-prior",)),
    Option(("--fit-hrf",), nargs=0),
    Option(("--slice-time-ref",)),
    Option(("--random-seed",)),
    Option(("--backend",)),
    Option(("--device",)),
    Option(("--nprocs", "--nthreads", "--n_cpus", "--n-cpus")),
    Option(("--omp-nthreads", "--omp_nthreads")),
    Option(("--mem-gb", "--mem_gb")),
    Option(("--mem-mb", "--mem_mb", "--mem")),
    Option(("--work-dir", "-w"), path="work_dir"),
    Option(("--save-predictions",), nargs=0),
    Option(("--r2-threshold",)),
    Option(("--threshold-on",)),
    Option(("--atlas",)),
    Option(("--no-cvr2",), nargs=0),
    Option(("--no-report",), nargs=0),
    Option(("--reports-only",), nargs=0),
    Option(("--verbose", "-v"), nargs=0),
)

BY_NAME: dict[str, Option] = {name: opt for opt in PRFMAP_OPTIONS for name in opt.names}
