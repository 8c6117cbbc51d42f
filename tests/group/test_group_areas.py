"""The group's results per visual area (prfmap.group.areas): each participant's line of σ against
eccentricity is one observation; the table is their mean and its standard error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from prfmap.derivatives import OutputKey
from prfmap.derivatives.areas import SUMMARY_COLUMNS, write_area_summary
from prfmap.group.areas import GROUP_COLUMNS, group_areas, write_group_areas
from prfmap.group.maps import ParticipantMaps


def _member(
    out: Path,
    subject: str,
    lines: dict[str, tuple[float, float]],
    session: str | None = None,
    atlas: str = "benson14",
) -> ParticipantMaps:
    key = OutputKey(subject, session, "prf", "fsaverage5", None, None, "gauss")
    rows = []
    for area, (slope, intercept) in lines.items():
        row = dict.fromkeys(SUMMARY_COLUMNS, np.nan) | {"area": area, "units": 50, "units_fitted": 50}
        row |= {"units_shown": 20 if np.isfinite(slope) else 0, "median_r2": 0.5, "median_cvr2": 0.3}
        rows.append(row | {"sigma_slope": slope, "sigma_intercept": intercept})
    write_area_summary(key.func_dir(out), key.stem(param="areas"), rows, SUMMARY_COLUMNS, {"Atlas": atlas})
    return ParticipantMaps(key)


def test_the_table_is_the_mean_of_the_participants_lines(tmp_path):
    slopes = {"01": 0.10, "02": 0.14, "03": 0.12}
    members = [
        _member(tmp_path, s, {"V1": (b, 0.5), "V2": (b + 0.02, 0.6), "hV4": (np.nan, np.nan)})
        for s, b in slopes.items()
    ]
    areas = group_areas(tmp_path, members, {"L": 10, "R": 10})
    rows = {r["area"]: r for r in areas.rows}
    assert list(rows) == ["V1", "V2", "hV4"] and areas.atlas == "benson14"
    values = np.array(list(slopes.values()))
    assert rows["V1"]["participants"] == 3
    assert rows["V1"]["sigma_slope_mean"] == pytest.approx(values.mean())
    assert rows["V1"]["sigma_slope_sem"] == pytest.approx(values.std(ddof=1) / np.sqrt(3))
    assert rows["V2"]["sigma_intercept_mean"] == pytest.approx(0.6) and rows["V2"]["sigma_intercept_sem"] == 0
    assert rows["hV4"]["participants"] == 0 and np.isnan(rows["hV4"]["sigma_slope_mean"])
    assert len(areas.lines["V1"]) == 3
    tsv, sidecar = write_group_areas(tmp_path / "group", members[0].key, areas, list(slopes))
    assert tsv.name == "task-prf_space-fsaverage5_model-gauss_desc-areas_summary.tsv"
    table = pd.read_csv(tsv, sep="\t", na_values="n/a")
    assert list(table.columns) == list(GROUP_COLUMNS)
    assert json.loads(sidecar.read_text())["Participants"] == ["sub-01", "sub-02", "sub-03"]


def test_a_participants_sessions_are_averaged_first(tmp_path):
    members = [
        _member(tmp_path, "01", {"V1": (0.10, 0.5)}, session="a"),
        _member(tmp_path, "01", {"V1": (0.20, 0.5)}, session="b"),
        _member(tmp_path, "02", {"V1": (0.30, 0.5)}),
    ]
    (row,) = group_areas(tmp_path, members, {"L": 10}).rows
    assert row["participants"] == 2 and row["sigma_slope_mean"] == pytest.approx((0.15 + 0.30) / 2)


def test_without_every_participants_summary_there_is_no_table_and_it_says_why(tmp_path):
    members = [
        _member(tmp_path, "01", {"V1": (0.1, 0.5)}),
        ParticipantMaps(OutputKey("02", None, "prf", "fsaverage5", None, None, "gauss")),
    ]
    areas = group_areas(tmp_path, members, {"L": 10})
    assert (
        areas.rows == []
        and "sub-02 has no sub-02_task-prf_space-fsaverage5_model-gauss_desc-areas_summary.tsv" in areas.note
    )
    assert write_group_areas(tmp_path / "group", members[0].key, areas, ["01", "02"]) == []
    members = [
        _member(tmp_path, "01", {"V1": (0.1, 0.5)}),
        _member(tmp_path, "03", {"V1": (0.1, 0.5)}, atlas="wang15"),
    ]
    assert (
        "the participants' areas come from ['benson14', 'wang15']"
        in group_areas(tmp_path, members, {"L": 10}).note
    )
