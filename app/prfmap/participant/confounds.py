"""fMRIPrep's confounds: reading the table, selecting columns (with wildcards), dummy scans."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from prfmap.errors import BadDataError, MissingInputError, UsageError, one_line

NON_STEADY_PREFIX = "non_steady_state_outlier"


def check_confound_rows(rows: int, n_volumes: int, source: str = "", run: str = "the run") -> None:
    """Confounds must have one row per volume of the run (dummy scans included).

    Parameters
    ----------
    rows : int
        Rows of the confounds.
    n_volumes : int
        Volumes of the run.
    source : str
        The file, for the message.
    run : str
        The run's BOLD file(s), for the message.
    """
    if rows != n_volumes:
        where = f" in {source}" if source else ""
        raise BadDataError(
            f"confounds have {rows} rows{where} but {run} has {n_volumes} volumes; use the "
            "run's own desc-confounds_timeseries.tsv"
        )


def run_confounds(
    path: str | os.PathLike | None,
    n_volumes: int,
    *,
    columns: Sequence[str] = (),
    dummy_scans: int | None = None,
    run: str = "the run",
    bold: str = "the BOLD",
) -> tuple[int, np.ndarray | None]:
    """A run's dummy scans and the confound columns to regress out, from its confounds file.

    Parameters
    ----------
    path : path-like or None
        fMRIPrep's ``desc-confounds_timeseries.tsv`` of the run, if any.
    n_volumes : int
        Volumes of the BOLD run (dummy scans included).
    columns : sequence of str
        Confound names or patterns (``--confounds``); empty for none.
    dummy_scans : int or None
        Volumes to drop (``--dummy-scans``); None counts fMRIPrep's non-steady-state outliers.
    run, bold : str
        The run's name and its BOLD file name(s), for messages.

    Returns
    -------
    tuple
        The dummy scans, and the (volumes, k) confounds or None.

    Raises
    ------
    BadDataError
        The table's rows differ from the volumes, or the dummy scans leave no volume.
    MissingInputError
        ``columns`` are given but the run has no confounds file.
    UsageError
        A column matches nothing.
    """
    table = None
    if (columns or dummy_scans is None) and path is not None:
        table = read_confounds(path)
        check_confound_rows(len(table), n_volumes, Path(path).name, bold)
    if dummy_scans is None:
        dummy_scans = dummy_scans_from_confounds(table) if table is not None else 0
    if dummy_scans >= n_volumes:
        raise BadDataError(f"{dummy_scans} dummy scans leave no volume of {bold}")
    if not columns:
        return dummy_scans, None
    if table is None:
        raise MissingInputError(f"--confounds given but {run} has no desc-confounds_timeseries.tsv")
    return dummy_scans, select_confounds(table, columns, str(path))


def read_confounds(path: str | os.PathLike) -> pd.DataFrame:
    """Read fMRIPrep's ``desc-confounds_timeseries.tsv`` (``n/a`` → NaN).

    Parameters
    ----------
    path : path-like
        The TSV file.

    Returns
    -------
    pandas.DataFrame

    Raises
    ------
    MissingInputError
        The file does not exist.
    BadDataError
        It cannot be parsed.
    """
    if not os.path.isfile(path):
        raise MissingInputError(f"confounds file {path} does not exist")
    try:
        return pd.read_csv(path, sep="\t", na_values=["n/a"])
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise BadDataError(f"cannot read confounds {path} ({one_line(err)}); fix it") from None


def select_confounds(table: pd.DataFrame, columns: Sequence[str], path: str = "") -> np.ndarray:
    """Pick confound columns by name or shell pattern (``motion_outlier*``).

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`read_confounds`.
    columns : sequence of str
        Names or ``fnmatch`` patterns.
    path : str
        File name for messages.

    Returns
    -------
    ndarray
        (volumes, k) float64, NaN kept (``preprocess_run`` fills them).

    Raises
    ------
    UsageError
        A name matches no column.
    """
    chosen: list[str] = []
    for col in columns:
        hits = (
            fnmatch.filter(table.columns, col)
            if any(c in col for c in "*?[")
            else ([col] if col in table.columns else [])
        )
        if not hits:
            raise UsageError(
                f"--confounds: no column {col!r} in {os.path.basename(path) or 'the confounds'}; "
                f"columns are e.g. {', '.join(list(table.columns)[:8])}"
            )
        chosen.extend(h for h in hits if h not in chosen)
    values = table[chosen].apply(pd.to_numeric, errors="coerce")
    return values.to_numpy(dtype=np.float64)


def dummy_scans_from_confounds(table: pd.DataFrame) -> int:
    """Number of initial non-steady-state volumes that fMRIPrep flagged.

    fMRIPrep adds one ``non_steady_state_outlier_XX`` (or ``non_steady_state_outlierXX``)
    column per flagged volume, 1 at that volume. The count is the number of leading
    volumes up to the last flagged one.

    Parameters
    ----------
    table : pandas.DataFrame
        From :func:`read_confounds`.

    Returns
    -------
    int
        0 when no such column exists.
    """
    cols = [c for c in table.columns if str(c).startswith(NON_STEADY_PREFIX)]
    if not cols:
        return 0
    flagged = np.flatnonzero(np.nan_to_num(table[cols].to_numpy(dtype=float)).any(axis=1) != 0)
    return int(flagged.max()) + 1 if flagged.size else 0
