"""The report's model comparison: winner and Δcvr2 maps, winners per band and area, links to each model."""

from __future__ import annotations

import dataclasses
import html
import re

import numpy as np
import pytest

from page_checks import check_page
from prfmap.report.comparison import BANDS, ComparisonContext, ComparisonSection
from prfmap.report.context import ReportContext
from prfmap.report.participant import write_participant_report

LEVELS = {"0": "gauss", "1": "css", "2": "dog"}


def _known_comparison(context: ReportContext) -> ComparisonContext:
    """CSS wins the central 3°, DoG a ring at 6–7°, the Gaussian the rest; no comparison at 100 units."""
    ecc = context.maps["eccentricity"]
    winner = np.where(ecc < 3, 1.0, np.where((ecc >= 6) & (ecc < 7), 2.0, 0.0))
    winner[100:200] = np.nan
    delta = np.where(winner > 0, 0.02 + 0.01 * (winner == 2), 0.0)
    return ComparisonContext(
        fit=context,
        winner=winner,
        cvr2=np.full(winner.shape, 0.4),
        delta_cvr2=delta,
        levels=LEVELS,
        described={"Definition": "per unit <the best>", "Alpha": 0.05, "ZLimit": 1.96, "Folds": ["a", "b"]},
        outputs=[
            "sub-01/func/sub-01_task-bar_hemi-L_space-fsaverage5_model-best_desc-winner_boldmap.func.gii"
        ],
    )


def _table(text: str, heading: str) -> list[list[str]]:
    """The cells of the first table after ``heading``."""
    part = text.split(heading, 1)[1].split("</table>", 1)[0]
    rows = re.findall(r"<tr>(.*?)</tr>", part, flags=re.S)
    return [[html.unescape(c) for c in re.findall(r"<t[hd]>(.*?)</t[hd]>", r, flags=re.S)] for r in rows]


@pytest.fixture(scope="module")
def compared_page(context: ReportContext, tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("compared")
    css = dataclasses.replace(context, model="css")
    other_task = dataclasses.replace(context, model="dog", task="other")
    comparison = _known_comparison(context)
    page = write_participant_report(out, "01", [context, css, other_task], [comparison])
    return page, comparison


def test_the_comparison_comes_first_with_its_maps(compared_page) -> None:
    page, _ = compared_page
    text = page.read_text()
    first_section = re.search(r'<section id="([^"]+)"', text).group(1)
    assert first_section == "task-bar_space-fsaverage5_model-best"
    comparison = text.split('<section id="task-bar_space-fsaverage5_model-best"', 1)[1].split("</section>")[0]
    sources = re.findall(r'<img src="([^"]+)" alt="([^"]*)"', comparison)
    names = [src for src, _ in sources]
    assert any("flat-winner" in n for n in names) and any("flat-deltacvr2" in n for n in names)
    for src, alt in sources:
        assert (page.parent / src).is_file() and alt
    winner_alt = next(alt for src, alt in sources if "winner" in src)
    assert "gauss" in winner_alt and "css" in winner_alt and "dog" in winner_alt
    assert "&lt;the best&gt;" in comparison  # the definition, escaped
    check_page(page)


def test_winners_per_eccentricity_band_are_counted(compared_page, context: ReportContext) -> None:
    page, comparison = compared_page
    rows = _table(page.read_text(), "Winners by eccentricity")
    header, body = rows[0], rows[1:]
    assert header == ["eccentricity", "units", "gauss", "css", "dog", "median Δcvr2 of wins"]
    section = ComparisonSection(comparison, page.parent / "x", "x", "k")
    shown = section.compared
    ecc, winner = context.maps["eccentricity"], comparison.winner
    assert body[0][:2] == ["all", str(int(shown.sum()))]
    assert body[0][3].startswith(f"{int((shown & (winner == 1)).sum())} (")
    edges = np.linspace(0, context.fov_deg / 2, BANDS + 1)
    assert len(body) >= 1 + BANDS
    for row, low, high in zip(body[1:], edges[:-1], edges[1:], strict=False):
        here = shown & (ecc >= low) & ((ecc < high) if high < edges[-1] else (ecc <= high))
        assert row[1] == str(int(here.sum())), row
        for cell, code in zip(row[2:5], (0, 1, 2), strict=True):
            assert cell.startswith(f"{int((here & (winner == code)).sum())}"), (row, code)
    # the median gain of the wins: 0.02 (css) and 0.03 (dog)
    assert float(body[0][-1]) == pytest.approx(
        np.median(comparison.delta_cvr2[shown & (winner > 0)]), abs=1e-3
    )
    # the central band is all CSS
    assert body[1][3].endswith("(100.0 %)")


def test_each_model_is_linked_to_its_own_section(compared_page) -> None:
    page, _ = compared_page
    text = page.read_text()
    comparison = text.split('<section id="task-bar_space-fsaverage5_model-best"', 1)[1].split("</section>")[0]
    links = re.findall(r'<a href="#([^"]+)">model-(\w+)</a>', comparison)
    assert links == [
        ("task-bar_space-fsaverage5_model-gauss", "gauss"),
        ("task-bar_space-fsaverage5_model-css", "css"),
    ]
    for anchor, _ in links:
        assert f'<section id="{anchor}"' in text
    assert "task-other" not in comparison  # another task's fit is not one of the models compared


def test_the_area_table_or_why_there_is_none(compared_page) -> None:
    page, comparison = compared_page
    text = page.read_text()
    section = text.split("Winners by visual area", 1)[1].split("</section>")[0]
    if "<table" in section.split("Each model", 1)[0]:
        rows = _table(text, "Winners by visual area")[1:]
        assert [r[0] for r in rows][:3] == ["V1", "V2", "V3"]
        assert sum(int(r[1]) for r in rows) <= int(np.isfinite(comparison.winner).sum())
        assert "HCP-MMP1.0" in section
    else:
        assert "No table by visual area" in section


@pytest.mark.slow
def test_a_run_with_two_models_reports_the_comparison_and_reports_only_rebuilds_it(tmp_path) -> None:
    """``--model gauss css`` on two runs: the page opens on the comparison, its figures drawn from the
    maps written; ``--reports-only`` reads those maps back and draws the same section."""
    from test_report_end_to_end import prfmap

    from prfmap.synth import SynthConfig, make_synthetic_dataset

    bids = make_synthetic_dataset(tmp_path / "bids", SynthConfig(space="T1w", small=True, runs=2, seed=8))
    out, work = tmp_path / "out", tmp_path / "work"
    done = prfmap([str(bids), str(out), "participant", "--model", "gauss", "css", "-w", str(work)], tmp_path)
    assert done.returncode == 0, done.stderr
    anchor = "task-prf_space-T1w_model-best"
    winner_map = next((out / "sub-01" / "func").glob("*_model-best_desc-winner_boldmap.nii.gz"))

    def section(page) -> str:
        text = page.read_text()
        assert re.search(r'<section id="([^"]+)"', text).group(1) == anchor
        return text.split(f'<section id="{anchor}"', 1)[1].split("</section>")[0]

    page = out / "sub-01.html"
    first = section(page)
    kinds = {p.stem.rsplit("_", 1)[-1] for p in check_page(page)}
    assert {"slices-winner", "slices-deltacvr2"} <= kinds
    assert winner_map.name in html.unescape(first)
    bands = _table(page.read_text(), "Winners by eccentricity")
    assert bands[0][:4] == ["eccentricity", "units", "gauss", "css"] and int(bands[1][1]) > 50
    page.unlink()
    done = prfmap([str(bids), str(out), "participant", "--reports-only", "-w", str(work)], tmp_path)
    assert done.returncode == 0, done.stderr
    assert _table(page.read_text(), "Winners by eccentricity") == bands
    assert re.findall(r'<img src="([^"]+)"', section(page)) == re.findall(r'<img src="([^"]+)"', first)


def test_a_compared_model_shows_its_flat_maps_without_the_views_again(compared_page) -> None:
    """The Gaussian's section and a fit outside the comparison keep the 3-D views; CSS's, flat maps only."""
    page, _ = compared_page
    text = page.read_text()

    def images(anchor: str) -> list[str]:
        part = text.split(f'<section id="{anchor}"', 1)[1].split("</section>")[0]
        return re.findall(r'<img src="([^"]+)"', part)

    gauss, css = (
        images("task-bar_space-fsaverage5_model-gauss"),
        images("task-bar_space-fsaverage5_model-css"),
    )
    other = images("task-other_space-fsaverage5_model-dog")
    assert any("views-" in src for src in gauss) and any("views-" in src for src in other)
    assert any("flat-" in src for src in css) and not any("views-" in src for src in css)
    assert {s.rsplit("flat-", 1)[1] for s in gauss if "flat-" in s} <= {
        s.rsplit("flat-", 1)[1] for s in css if "flat-" in s
    }


def test_fits_of_the_same_runs_draw_their_shared_figures_once(compared_page, monkeypatch) -> None:
    """Every section shows the stimulus, but the montage of one aperture is drawn once and copied."""
    page, _ = compared_page
    figures = page.parent / "sub-01" / "figures"
    montages = sorted(figures.glob("*_stimulus.png"))
    assert len(montages) == 3
    assert len({m.read_bytes() for m in montages}) == 1
    from prfmap.report import figures as report_figures

    calls = []
    original = report_figures.stimulus_montage
    monkeypatch.setattr(
        report_figures, "stimulus_montage", lambda *a, **k: calls.append(a) or original(*a, **k)
    )
    context = compared_page[1].fit
    other = dataclasses.replace(context, design=context.design[::-1].copy(), model="dn")
    write_participant_report(
        page.parent / "again", "01", [context, other, dataclasses.replace(context, model="css")]
    )
    assert len(calls) == 2  # two apertures: two montages, the third section a copy of the first
