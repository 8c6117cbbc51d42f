"""The group level's model comparison: the share of participants each model wins per vertex, and the
share of vertices per region, from the participants' ``model-best_desc-winner`` maps (issue 21)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from headless_chromium import render
from prfmap.derivatives import OutputKey
from prfmap.derivatives.comparison import COMPARISON_MODEL, write_comparison_files
from prfmap.group import run_group
from prfmap.group.comparison import group_shares, participant_votes, region_rows
from prfmap.io.geometry import GiftiGeometry

N = 10242  # fsaverage5 vertices per hemisphere
LEVELS = {"0": "gauss", "1": "css", "2": "dog"}
GAUSS, CSS, DOG = 0.0, 1.0, 2.0


def write_gaussian(output_dir: Path, subject: str, session: str | None, rng: np.random.Generator) -> None:
    """A participant's Gaussian maps in fsaverage5, named as the participant level names them."""
    key = OutputKey(subject, session, "bar", "fsaverage5", None, None, "gauss")
    geometry = GiftiGeometry(hemis={"L": N, "R": N})
    x, y = rng.uniform(-8, 8, (2, 2 * N))
    maps = {"x": x, "y": y, "sigma": rng.uniform(0.5, 3, 2 * N), "r2": np.full(2 * N, 0.5)}
    maps |= {"polarangle": np.degrees(np.arctan2(y, x)), "eccentricity": np.hypot(x, y)}
    func = key.func_dir(output_dir)
    for label, values in maps.items():
        geometry.write_maps(
            {label: values},
            lambda hemi, lab=label: func / f"{key.stem(hemi=hemi, param=lab)}_boldmap.func.gii",
        )


def write_winners(output_dir: Path, subject: str, session: str | None, winner: np.ndarray) -> None:
    """A participant's comparison maps, written by the participant level's own writer."""
    key = OutputKey(subject, session, "bar", "fsaverage5", None, None, COMPARISON_MODEL)
    geometry = GiftiGeometry(hemis={"L": N, "R": N})
    cvr2 = np.where(np.isfinite(winner), 0.4, np.nan)
    maps = {"winner": winner, "cvr2": cvr2, "deltacvr2": np.where(np.isfinite(winner), 0.01, np.nan)}
    described = {"Levels": LEVELS, "ModelsCompared": list(LEVELS.values()), "Comparison": {"Alpha": 0.05}}
    write_comparison_files(key.func_dir(output_dir), key, geometry, maps, np.zeros(2 * N), described)


def winners() -> dict[tuple[str, str | None], np.ndarray]:
    """Three participants' winners (both hemispheres concatenated); sub-02 has two sessions.

    - vertices 0-99 of L: sub-01 CSS; sub-02 CSS in ses-1, DoG in ses-2; sub-03 Gaussian;
    - vertices 100-199 of L: sub-01 has no winner (not compared), the others the Gaussian;
    - every other vertex: the Gaussian, but vertices 0-999 of R, where nobody has a winner.
    """
    base = np.full(2 * N, GAUSS)
    base[N : N + 1000] = np.nan
    one, two_a, two_b, three = base.copy(), base.copy(), base.copy(), base.copy()
    one[:100] = CSS
    one[100:200] = np.nan
    two_a[:100] = CSS
    two_b[:100] = DOG
    return {("01", None): one, ("02", "1"): two_a, ("02", "2"): two_b, ("03", None): three}


@pytest.fixture(scope="module")
def compared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    rng = np.random.default_rng(4)
    for (subject, session), winner in winners().items():
        write_gaussian(out, subject, session, rng)
        write_winners(out, subject, session, winner)
    (result,) = run_group(out, r2_threshold=0.1)
    assert result.fit.model == "gauss"  # the winners are not a fit to average
    return out


def test_votes_and_shares_by_hand() -> None:
    """A participant with two sessions votes once, split between the models its sessions pick."""
    from prfmap.group.comparison import WinnerMaps

    members = []
    for (subject, session), winner in winners().items():
        key = OutputKey(subject, session, "bar", "fsaverage5", None, None, COMPARISON_MODEL)
        levels = {int(c): m for c, m in LEVELS.items()}
        members.append(WinnerMaps(key, winner={"L": winner[:N], "R": winner[N:]}, levels=levels))
    votes = participant_votes(members, ["01", "02", "03"], ["gauss", "css", "dog"], "L")
    assert votes.shape == (3, 3, N)
    np.testing.assert_allclose(votes[:, :, 0], [[0, 1, 0], [0, 0.5, 0.5], [1, 0, 0]])
    assert np.isnan(votes[0, :, 150]).all() and np.isfinite(votes[1:, :, 150]).all()
    shares, count = group_shares(votes)
    np.testing.assert_allclose(shares[:, 0], [1 / 3, 0.5, 1 / 6])
    np.testing.assert_allclose(shares[:, 150], [1, 0, 0])
    assert count[0] == 3 and count[150] == 2


def test_shares_per_region_by_hand() -> None:
    votes = {h: np.zeros((2, 2, 4)) for h in ("L", "R")}
    votes["L"][0] = [[1, 1, 0, np.nan], [0, 0, 1, np.nan]]  # sub-a: 2 of 3 compared to model 0
    votes["L"][1] = [[0, 0, 0, 0], [1, 1, 1, 1]]  # sub-b: all to model 1
    votes["R"][:] = np.nan
    half = {"L": np.array([True, True, False, False]), "R": np.zeros(4, bool)}
    rows = region_rows(votes, ["a", "b"], {"all": {h: np.ones(4, bool) for h in votes}, "half": half})
    by = {(r["region"], r["participant"]): r for r in rows}
    np.testing.assert_allclose(by["all", "sub-a"]["shares"], [2 / 3, 1 / 3])
    assert by["all", "sub-a"]["vertices"] == 3 and by["all", "group"]["vertices"] == 4
    np.testing.assert_allclose(
        by["all", "group"]["shares"], [1 / 3, 2 / 3]
    )  # each participant weighs the same
    np.testing.assert_allclose(by["half", "group"]["shares"], [0.5, 0.5])
    assert by["half", "group"]["participants"] == 2


def test_share_maps_count_map_and_sidecars(compared: Path) -> None:
    group = compared / "group"
    stem = "task-bar_hemi-L_space-fsaverage5_model-best"
    share = {
        m: np.asarray(nib.load(group / f"{stem}_stat-{m}share_desc-winner_boldmap.func.gii").agg_data())
        for m in ("gauss", "css", "dog")
    }
    count = np.asarray(nib.load(group / f"{stem}_stat-count_desc-winner_boldmap.func.gii").agg_data())
    np.testing.assert_allclose([share[m][0] for m in ("gauss", "css", "dog")], [1 / 3, 0.5, 1 / 6], rtol=1e-6)
    np.testing.assert_allclose(share["gauss"][150], 1.0)
    assert count[0] == 3 and count[150] == 2 and count[5000] == 3
    right = np.asarray(
        nib.load(
            group / f"{stem.replace('hemi-L', 'hemi-R')}_stat-count_desc-winner_boldmap.func.gii"
        ).agg_data()
    )
    assert (right[:1000] == 0).all() and (right[1000:] == 3).all()
    right_share = nib.load(
        group / f"{stem.replace('hemi-L', 'hemi-R')}_stat-cssshare_desc-winner_boldmap.func.gii"
    )
    assert np.isnan(np.asarray(right_share.agg_data())[:1000]).all()
    sidecar = json.loads((group / f"{stem}_desc-winner_boldmap.json").read_text())
    assert sidecar["ModelsCompared"] == ["gauss", "css", "dog"]
    assert sidecar["Participants"] == ["sub-01", "sub-02", "sub-03"]
    assert set(sidecar["Statistics"]) == {"gaussshare", "cssshare", "dogshare", "count"}
    assert any("sub-02/ses-2" in s for s in sidecar["Sources"])
    assert all("hemi-R" not in s for s in sidecar["Sources"]) and len(sidecar["Sources"]) == 4
    # the averaging of fits left model-best alone
    assert not list(group.glob("*model-best_desc-x_*")) and not list(group.glob("*model-best_stat-mean*"))


def test_shares_table(compared: Path) -> None:
    table = compared / "group" / "task-bar_space-fsaverage5_model-best_shares.tsv"
    with table.open() as f:
        rows = list(csv.DictReader(f, delimiter="\t"))
    by = {(r["region"], r["participant"]): r for r in rows}
    compared_vertices = 2 * N - 1000
    one = by["all", "sub-01"]
    assert int(one["vertices"]) == compared_vertices - 100
    assert float(one["css"]) == pytest.approx(100 / (compared_vertices - 100), rel=1e-5)
    two = by["all", "sub-02"]
    assert float(two["css"]) == pytest.approx(0.5 * 100 / compared_vertices, rel=1e-5)
    assert float(two["dog"]) == pytest.approx(0.5 * 100 / compared_vertices, rel=1e-5)
    group = by["all", "group"]
    expected_css = (100 / (compared_vertices - 100) + 0.5 * 100 / compared_vertices) / 3
    assert float(group["css"]) == pytest.approx(expected_css, rel=1e-5) and group["participants"] == "3"
    for row in rows:
        shares = [float(row[m]) for m in ("gauss", "css", "dog") if row[m] != "n/a"]
        assert not shares or sum(shares) == pytest.approx(1.0, abs=1e-5)
    sidecar = json.loads(table.with_suffix(".json").read_text())
    assert {"region", "participant", "participants", "vertices", "gauss", "css", "dog"} <= set(sidecar)
    assert "Definition" in sidecar and "Atlas" in sidecar


def test_the_group_report_shows_the_shares(compared: Path) -> None:
    errors, text = render(compared / "group.html")
    assert errors == []
    assert "model-best: model comparison" in text and "css wins (% of vertices)" in text
    assert "sub-01, sub-02, sub-03" in text
    html = (compared / "group.html").read_text()
    assert html.index('id="comparison0"') < html.index('id="fit0"')  # the page opens on the comparison
    figures = compared / "group" / "figures"
    for model in ("css", "dog"):  # where each model other than the Gaussian wins, flat and in 3-D
        for kind in ("flat", "views"):
            name = f"group_task-bar_space-fsaverage5_model-best_{kind}-{model}share.png"
            assert (figures / name).stat().st_size > 0 and f"group/figures/{name}" in html
    assert not list(figures.glob("*model-best*gaussshare*"))
    assert "Share of the 3 participants whose winner is css" in text


def test_a_participant_without_winners_leaves_the_comparison_out(tmp_path: Path, caplog) -> None:
    rng = np.random.default_rng(5)
    for (subject, session), winner in list(winners().items())[:2]:
        write_gaussian(tmp_path, subject, session, rng)
        write_winners(tmp_path, subject, session, winner)
    write_gaussian(tmp_path, "04", None, rng)
    with caplog.at_level("WARNING", logger="prfmap.group"):
        run_group(tmp_path, report=False)
    assert "model comparison) left out of the group: only 2 of the 3 participants" in caplog.text
    assert "missing: sub-04" in caplog.text
    assert not list((tmp_path / "group").glob("*model-best*"))
