"""The BIDS validator (PyPI's ``bids-validator-deno``, 3.x) run on a dataset, its issues parsed.

The validator is a separate program; this module finds it, runs it with ``--format json`` and
returns its exit status and issues (raw dataset and, with ``recursive=True``, each dataset under
``derivatives/``). It runs offline: the schema is bundled with the validator.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from prfmap.errors import NotBIDSError

LOGGER = logging.getLogger("prfmap.io.validator")
VALIDATOR_NAME = "bids-validator-deno"


@dataclass(frozen=True)
class Issue:
    """One issue the validator reports.

    Attributes
    ----------
    severity : str
        ``"error"``, ``"warning"`` or ``"ignore"``.
    code, sub_code : str
        The validator's code (``SIDECAR_KEY_REQUIRED``) and its detail (``SpatialReference``).
    location : str
        The file or folder, relative to its dataset (``/sub-01/func/...``).
    dataset : str
        ``""`` for the validated dataset, else the derivative folder (``/derivatives/fmriprep/``).
    """

    severity: str
    code: str
    sub_code: str
    location: str
    dataset: str = ""

    def __str__(self) -> str:
        detail = f" {self.sub_code}" if self.sub_code else ""
        return f"{self.code}{detail}: {self.dataset.rstrip('/')}{self.location}"


@dataclass(frozen=True)
class ValidationResult:
    """The validator's exit status and issues on one dataset."""

    exit_code: int
    issues: tuple[Issue, ...] = field(default_factory=tuple)
    version: str = ""

    @property
    def errors(self) -> list[Issue]:
        """The issues of severity ``error``."""
        return [i for i in self.issues if i.severity == "error"]

    @property
    def warnings(self) -> list[Issue]:
        """The issues of severity ``warning``."""
        return [i for i in self.issues if i.severity == "warning"]

    def counts(self, severity: str = "error") -> Counter[tuple[str, str]]:
        """How often each (code, sub_code) of ``severity`` was reported.

        Parameters
        ----------
        severity : str
            ``error`` or ``warning``.

        Returns
        -------
        collections.Counter
        """
        return Counter((i.code, i.sub_code) for i in self.issues if i.severity == severity)

    def summary(self, severity: str = "error", limit: int = 5) -> str:
        """One line: each code of ``severity`` with its count and first location.

        Parameters
        ----------
        severity : str
            ``error`` or ``warning``.
        limit : int
            Codes listed at most.

        Returns
        -------
        str
        """
        first: dict[tuple[str, str], Issue] = {}
        for issue in self.issues:
            if issue.severity == severity:
                first.setdefault((issue.code, issue.sub_code), issue)
        counts = self.counts(severity)
        parts = [f"{first[key]} (×{n})" for key, n in counts.most_common(limit)]
        more = len(counts) - limit
        return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


def find_validator() -> str | None:
    """The ``bids-validator-deno`` program: on PATH, or beside this Python (a virtualenv).

    Returns
    -------
    str or None
    """
    found = shutil.which(VALIDATOR_NAME)
    if found:
        return found
    beside = Path(sys.executable).parent / VALIDATOR_NAME
    return str(beside) if beside.is_file() else None


def validate_dataset(
    path: str | Path, *, recursive: bool = False, timeout: float = 600, validator: str | None = None
) -> ValidationResult:
    """Run the BIDS validator on ``path``.

    Parameters
    ----------
    path : str or Path
        The dataset root (raw or derivative).
    recursive : bool
        Also validate the datasets under ``derivatives/`` (``-r``).
    timeout : float
        Seconds before the validator is stopped (``subprocess.TimeoutExpired``).
    validator : str, optional
        The program to run (default: :func:`find_validator`).

    Returns
    -------
    ValidationResult
        Exit status 0 when the dataset has no error (warnings allowed).

    Raises
    ------
    FileNotFoundError
        No validator is installed.
    RuntimeError
        The validator printed no JSON report (it crashed).
    """
    program = validator or find_validator()
    if program is None:
        raise FileNotFoundError(f"{VALIDATOR_NAME} is not installed (pip install {VALIDATOR_NAME})")
    command = [program, str(path), "--format", "json", *(["-r"] if recursive else [])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    try:
        report = json.loads(done.stdout)
    except json.JSONDecodeError:
        tail = " ".join((done.stderr or done.stdout).split())[-300:]
        raise RuntimeError(f"{VALIDATOR_NAME} exited {done.returncode} without a report: {tail}") from None
    issues = list(_issues(report, ""))
    for name, sub in (report.get("derivativesSummary") or {}).items():
        issues += _issues(sub, name)
    version = str((report.get("summary") or {}).get("schemaVersion", ""))
    return ValidationResult(done.returncode, tuple(issues), version)


def _issues(report: dict, dataset: str) -> list[Issue]:
    return [
        Issue(
            str(i.get("severity", "")),
            str(i.get("code", "")),
            str(i.get("subCode") or ""),
            str(i.get("location", "")),
            dataset,
        )
        for i in (report.get("issues") or {}).get("issues", [])
    ]


def check_bids_dir(bids_dir: str | Path, *, validator: str | None = None) -> ValidationResult | None:
    """Validate the input dataset as BIDS Apps do before reading it (``--skip-bids-validation`` turns it off).

    Parameters
    ----------
    bids_dir : str or Path
    The raw dataset (its ``derivatives/`` are not validated).
    validator : str, optional
    The program to run (default: :func:`find_validator`).

    Returns
    -------
    ValidationResult or None
    The result when the dataset passed (warnings allowed); None when no validator is
    installed or it could not run (logged; prfmap goes on, as without validation).

    Raises
    ------
    NotBIDSError
    The validator found errors (exit 16); the message names the first ones.
    """
    program = validator or find_validator()
    if program is None:
        LOGGER.info(
            "BIDS validation skipped: %s is not installed (pip install %s)", VALIDATOR_NAME, VALIDATOR_NAME
        )
        return None
    try:
        result = validate_dataset(bids_dir, validator=program)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        LOGGER.warning(
            "BIDS validation skipped: %s could not run (%s)", VALIDATOR_NAME, " ".join(str(err).split())[:200]
        )
        return None
    if result.exit_code != 0:
        raise NotBIDSError(
            f"{bids_dir} fails the BIDS validator (schema {result.version or '?'}, "
            f"{len(result.errors)} errors): {result.summary(limit=3)}; fix the dataset "
            f"(run {VALIDATOR_NAME} {bids_dir} for details) or pass --skip-bids-validation"
        )
    LOGGER.info(
        "bids_dir passes the BIDS validator (schema %s, %d warnings)",
        result.version or "?",
        len(result.warnings),
    )
    return result
