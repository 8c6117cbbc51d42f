"""A run's ``events.tsv``: the aperture file its ``stim_file`` column names, and the frame index.

``stim_file`` names a file relative to ``stimuli/``: one row covering the run, or one row per frame
with a 0- or 1-based ``stim_file_index`` (prfanalyze's form, described in ``events.json``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd

from prfmap.errors import BadDataError, MissingInputError, one_line, why_missing


def read_events(path: Path) -> pd.DataFrame:
    """Read an events file (``n/a`` → NaN).

    Parameters
    ----------
    path : Path
        The ``events.tsv``.

    Returns
    -------
    pandas.DataFrame
    """
    try:
        return pd.read_csv(path, sep="\t", na_values=["n/a"], keep_default_na=True)
    except (OSError, ValueError, pd.errors.ParserError) as err:
        raise BadDataError(f"cannot read events file {path} ({one_line(err)}); fix it") from None


def has_stim_file(path: Path) -> bool:
    """Whether an events file has a ``stim_file`` column.

    Parameters
    ----------
    path : Path
        The ``events.tsv``.

    Returns
    -------
    bool
    """
    return "stim_file" in read_events(path).columns


def index_base(events: Path, index: np.ndarray) -> int:
    """0 or 1: the base of ``stim_file_index``, from events.json if it says, else the values.

    Parameters
    ----------
    events : Path
        The ``events.tsv`` (its sidecar says the base).
    index : ndarray of int
        The column's values.

    Returns
    -------
    int
    """
    sidecar = events.with_suffix(".json")
    if sidecar.is_file():
        try:
            text = json.dumps(json.loads(sidecar.read_text()).get("stim_file_index", "")).lower()
        except (OSError, ValueError):
            text = ""
        if "1-based" in text or "one-based" in text:
            return 1
        if "0-based" in text or "zero-based" in text:
            return 0
    return 0 if (index == 0).any() else 1


def stimulus_of(bids_dir: Path, events: Path) -> tuple[Path, tuple[int, ...] | None]:
    """The aperture file a run's events name, and its 0-based frame index when they give one.

    Parameters
    ----------
    bids_dir : Path
        The raw dataset (``stimuli/`` is under it).
    events : Path
        The run's ``events.tsv``.

    Returns
    -------
    path : Path
        The aperture file.
    index : tuple of int or None
        The aperture frame of each volume (``stim_file_index``), 0-based.

    Raises
    ------
    MissingInputError
        No ``stim_file`` column, an empty one, or a file that does not exist.
    BadDataError
        Several files, a file outside the dataset, or a bad index.
    """
    table = read_events(events)
    if "stim_file" not in table.columns:
        raise MissingInputError(
            f"{events.name} has no stim_file column; name the aperture file in it or pass --stimulus"
        )
    names = table["stim_file"].dropna().astype(str).unique()
    if len(names) == 0:
        raise MissingInputError(
            f"the stim_file column of {events.name} is empty; name the aperture file in it or pass --stimulus"
        )
    if len(names) > 1:
        raise BadDataError(
            f"{events.name} names {len(names)} different stim_files; prfmap needs one aperture "
            "file per run (combine them, or pass --stimulus)"
        )
    stim = bids_dir / "stimuli" / names[0]
    root = Path(bids_dir).resolve()
    if not stim.resolve().is_relative_to(root):
        raise BadDataError(
            f"stim_file {names[0]!r} named in {events} resolves to {stim.resolve()}, outside the "
            f"dataset {root}; a stim_file must name a file inside the dataset (relative to "
            "stimuli/), or pass --stimulus"
        )
    if not stim.is_file():
        raise MissingInputError(
            f"stim_file {names[0]} named in {events.name} not found at {stim} (it "
            f"{why_missing(stim)}); add it under stimuli/ or pass --stimulus"
        )
    index = None
    if "stim_file_index" in table.columns:
        col = pd.to_numeric(table["stim_file_index"], errors="coerce").to_numpy()
        if not np.isfinite(col).all() or (col != np.round(col)).any() or (col < 0).any():
            raise BadDataError(
                f"stim_file_index of {events.name} must hold non-negative integers in every row"
            )
        col = col.astype(int)
        index = tuple(int(i) for i in col - index_base(events, col))
    return stim, index
