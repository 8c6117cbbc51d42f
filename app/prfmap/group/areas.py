"""The group's results per visual area, from the participants' ``desc-areas_summary.tsv``.

Each participant's line of σ against eccentricity in an area is one observation: the group's slope
and intercept are their mean over the participants with a line there, with the standard error of
that mean (a random-effects summary: participants are the replicates, not vertices). Sessions of a
participant are averaged first.
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from prfmap.derivatives.areas import SUMMARY_DESC, read_fit_areas, summary_path, write_area_summary
from prfmap.derivatives.naming import OutputKey
from prfmap.io.area_labels import AreaLabels
from prfmap.io.geometry import SurfaceLayout
from prfmap.io.naming import bids_name

logger = logging.getLogger(__name__)

GROUP_COLUMNS = {
    "area": "the area (as the participants' desc-areas_summary.tsv name it)",
    "participants": "participants with a line of sigma against eccentricity in the area (5 or more "
    "units shown)",
    "units_shown_median": "median over the participants of their units shown in the area",
    "median_r2_mean": "mean over the participants of their median r2 in the area (fraction)",
    "median_cvr2_mean": "mean over the participants of their median cvr2 in the area (fraction; n/a "
    "without cross-validation)",
    "sigma_slope_mean": "mean over those participants of their slope of sigma against eccentricity "
    "(deg per deg)",
    "sigma_slope_sem": "its standard error: the participants' standard deviation over the square "
    "root of their number (n/a with fewer than 2)",
    "sigma_intercept_mean": "mean over those participants of their sigma at eccentricity 0 (deg)",
    "sigma_intercept_sem": "its standard error (deg)",
}
"""The group summary's columns and their descriptions (its JSON sidecar)."""


@dataclass(frozen=True)
class GroupAreas:
    """The group's per-area results of one fit, or why there are none.

    Attributes
    ----------
    atlas : str or None
        The participants' atlas.
    rows : list of dict
        One per area (:data:`GROUP_COLUMNS`).
    lines : dict of str to list of (float, float)
        Area → each participant's (slope, intercept).
    labels : AreaLabels or None
        The areas on the template's meshes (borders on the group maps).
    note : str
        Which atlas and how many participants, or why there is no table.
    """

    atlas: str | None
    rows: list[dict[str, Any]] = field(default_factory=list)
    lines: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    labels: AreaLabels | None = None
    note: str = ""


def group_areas(output_dir: Path, members: Sequence[Any], sizes: dict[str, int]) -> GroupAreas:
    """The group's per-area rows from every participant's summary of the fit.

    Parameters
    ----------
    output_dir : Path
        The output folder.
    members : sequence of ParticipantMaps
        The participants' (and sessions') map sets of the fit.
    sizes : dict of str to int
        Hemisphere → vertices of the group maps (to read the areas for the borders).

    Returns
    -------
    GroupAreas
    """
    tables: dict[str, list[pd.DataFrame]] = defaultdict(list)
    atlases = set()
    for member in members:
        path = summary_path(member.key.func_dir(output_dir), member.key)
        if not path.is_file():
            return GroupAreas(
                None,
                note=f"No table per visual area: sub-{member.key.subject} has no {path.name} (a volume, "
                "--atlas none, or maps from before prfmap wrote areas: re-run its participant level).",
            )
        atlases.add(json.loads(path.with_suffix(".json").read_text()).get("Atlas"))
        tables[member.key.subject].append(pd.read_csv(path, sep="\t", na_values="n/a"))
    if len(atlases) != 1:
        return GroupAreas(
            None,
            note=f"No table per visual area: the participants' areas come from {sorted(map(str, atlases))}.",
        )
    atlas = str(next(iter(atlases)))
    per_subject = {
        subject: pd.concat(frames).groupby("area", sort=False).mean(numeric_only=True)
        for subject, frames in tables.items()
    }
    order = list(next(iter(per_subject.values())).index)
    rows, lines = [], {}
    for area in order:
        found = [table.loc[area] for table in per_subject.values() if area in table.index]
        with_line = [(float(r["sigma_slope"]), float(r["sigma_intercept"])) for r in found]
        with_line = [line for line in with_line if np.all(np.isfinite(line))]
        slopes = np.array([s for s, _ in with_line])
        intercepts = np.array([i for _, i in with_line])
        rows.append(
            {
                "area": area,
                "participants": len(with_line),
                "units_shown_median": float(np.median([r["units_shown"] for r in found])),
                "median_r2_mean": _mean([r["median_r2"] for r in found]),
                "median_cvr2_mean": _mean([r["median_cvr2"] for r in found]),
                "sigma_slope_mean": _mean(slopes),
                "sigma_slope_sem": _sem(slopes),
                "sigma_intercept_mean": _mean(intercepts),
                "sigma_intercept_sem": _sem(intercepts),
            }
        )
        lines[area] = with_line
    first = members[0]
    labels = read_fit_areas(first.key.func_dir(output_dir), first.key, SurfaceLayout(hemis=dict(sizes)))
    note = (
        f"Per visual area of the {atlas} atlas (docs/areas.md): each participant's line of σ against "
        f"eccentricity (their desc-areas_summary.tsv) is one observation; mean ± standard error over the "
        f"{len(per_subject)} participants (sessions averaged first)."
    )
    return GroupAreas(atlas, rows, lines, labels.labels if labels is not None else None, note)


def _mean(values: Any) -> float:
    values = np.asarray(values, dtype=np.float64)
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else np.nan


def _sem(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.std(ddof=1) / np.sqrt(values.size)) if values.size >= 2 else np.nan


def write_group_areas(group_dir: Path, key: OutputKey, areas: GroupAreas, subjects: list[str]) -> list[Path]:
    """Write the group's ``desc-areas_summary.tsv`` of a fit (nothing without a table).

    Parameters
    ----------
    group_dir : Path
        ``<output_dir>/group``.
    key : OutputKey
        The fit.
    areas : GroupAreas
        Its rows.
    subjects : list of str
        The participants.

    Returns
    -------
    list of Path
    """
    if not areas.rows:
        return []
    stem = bids_name(
        {
            "task": key.task,
            "space": key.space,
            "res": key.res,
            "den": key.den,
            "model": key.model,
            "desc": SUMMARY_DESC,
        }
    )
    described = {
        "Atlas": areas.atlas,
        "Participants": [f"sub-{s}" for s in subjects],
        "Description": areas.note,
    }
    return write_area_summary(group_dir, stem, areas.rows, GROUP_COLUMNS, described)
