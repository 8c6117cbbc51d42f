"""The participant report: sections, figures that exist, meshes found offline."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from page_checks import check_page

from prfmap.report.context import ReportContext, SurfaceGeometry
from prfmap.report.figures import example_units, fit_line
from prfmap.report.participant import write_participant_report
from prfmap.report.surface import find_meshes

SURFACE_LABELS = ("polarangle", "eccentricity", "sigma", "r2")


def test_every_image_exists_and_is_not_empty(report: Path) -> None:
    assert report.name == "sub-01.html"
    images = check_page(report)
    names = {p.name.removeprefix("sub-01_task-bar_space-fsaverage5_model-gauss_") for p in images}
    assert names == {
        "stimulus.png",
        "coverage.png",
        "ecc-sigma.png",
        "r2-hist.png",
        "timecourses.png",
        *(f"surf-{label}.png" for label in SURFACE_LABELS),
    }
    assert all(p.parent == report.parent / "sub-01" / "figures" for p in images)


def test_summary_settings_and_warnings(report: Path, context: ReportContext) -> None:
    text = report.read_text()
    for expected in (
        "1.5 s",
        "Dummy scans dropped</th><td>2",
        "task-bar_run-1",
        "jax",
        "refine",
        "grid.points",
        "3.25 s",
        "4.75 s",
        "r² ≥ 0.1",
        "nilearn&#x27;s bundled fsaverage5",
        "cyclic colour map",
    ):
        assert expected in text, expected
    assert "&lt;and were skipped&gt;" in text and "<and were skipped>" not in text
    kept = np.sum(context.maps["r2"] >= 0.1)
    assert f"Units with r² ≥ 0.1</th><td>{kept}<" in text


def test_eccentricity_sigma_line_matches_the_simulated_slope(report: Path) -> None:
    caption = re.search(r"sigma = ([-0-9.]+) × eccentricity \+ ([-0-9.]+)", report.read_text())
    assert caption is not None
    slope, intercept = float(caption.group(1)), float(caption.group(2))
    assert abs(slope - 0.2) < 0.01 and abs(intercept - 0.3) < 0.05


def beyond(maps: dict[str, np.ndarray]) -> int:
    inside = (maps["eccentricity"] <= 10) & (maps["sigma"] > 0) & (maps["sigma"] <= 10)
    return int(np.sum((maps["r2"] >= 0.1) & ~inside))


def test_units_beyond_the_stimulated_field_are_counted(context: ReportContext, tmp_path: Path):
    maps = dict(context.maps)
    before = beyond(maps)
    far = np.flatnonzero((maps["r2"] >= 0.1) & (maps["eccentricity"] < 10))[:25]
    maps["eccentricity"] = maps["eccentricity"].copy()
    maps["eccentricity"][far] = 2500.0
    assert beyond(maps) == before + 25
    ctx = small_context(context, maps=maps, surface=None)
    text = write_participant_report(tmp_path, "01", ctx).read_text()
    assert f"{before + 25} units with r² ≥ 0.1 lie beyond it" in text


def test_fit_line_and_example_units() -> None:
    x = np.array([0.0, 1.0, 2.0, 3.0])
    assert fit_line(x, 2 * x + 1, np.ones(4)) == pytest.approx((2.0, 1.0))
    assert fit_line(np.ones(3), np.ones(3), np.ones(3)) is None
    r2 = np.array([0.5, np.nan, 0.9, 0.05, 0.2, 0.0, 0.3])
    assert example_units(r2, 0.1) == {"best": 2, "median": 0, "poor": 5}
    assert example_units(np.full(3, np.nan)) == {}


def small_context(context: ReportContext, **changes) -> ReportContext:
    return dataclasses.replace(context, **changes)


def test_volume_space_shows_visual_field_plots_only(context: ReportContext, tmp_path: Path) -> None:
    ctx = small_context(context, space="T1w", surface=None, data=None, predictions=None)
    page = write_participant_report(tmp_path, "01", ctx)
    names = {p.name for p in check_page(page)}
    assert not any("surf-" in n for n in names)
    assert any(n.endswith("coverage.png") for n in names)
    text = page.read_text()
    assert "space T1w is not a cortical surface" in text
    assert "predictions were not kept" in text


def write_fsnative(fmriprep: Path) -> None:
    from nilearn import datasets

    mesh = datasets.load_fsaverage("fsaverage5")["inflated"]
    anat = fmriprep / "sub-01" / "anat"
    anat.mkdir(parents=True)
    for hemi, part in (("L", "left"), ("R", "right")):
        m = mesh.parts[part]
        arrays = [
            nib.gifti.GiftiDataArray(np.asarray(m.coordinates, np.float32), "NIFTI_INTENT_POINTSET"),
            nib.gifti.GiftiDataArray(np.asarray(m.faces, np.int32), "NIFTI_INTENT_TRIANGLE"),
        ]
        nib.save(nib.gifti.GiftiImage(darrays=arrays), anat / f"sub-01_hemi-{hemi}_inflated.surf.gii")


def test_fsnative_draws_on_the_participants_surfaces(context: ReportContext, tmp_path: Path) -> None:
    write_fsnative(tmp_path / "fmriprep")
    maps = {k: context.maps[k] for k in ("r2", "polarangle")}
    ctx = small_context(context, space="fsnative", maps=maps, fmriprep_dir=tmp_path / "fmriprep")
    page = write_participant_report(tmp_path / "out", "01", ctx)
    names = {p.name for p in check_page(page)}
    assert {n.split("_")[-1] for n in names if "surf-" in n} == {
        "surf-polarangle.png",
        "surf-r2.png",
    }
    assert "the participant&#x27;s inflated surfaces from fMRIPrep" in page.read_text()

    ctx = small_context(ctx, fmriprep_dir=tmp_path / "elsewhere")
    page = write_participant_report(tmp_path / "out2", "01", ctx)
    assert not any("surf-" in p.name for p in check_page(page))
    assert "No mesh available: no sub-01_hemi-L_inflated.surf.gii" in page.read_text()


def test_mesh_of_the_wrong_size_is_reported(context: ReportContext, tmp_path: Path) -> None:
    ctx = small_context(
        context,
        maps={"r2": context.maps["r2"][:200]},
        surface=SurfaceGeometry(hemis={"L": 100, "R": 100}),
        data=None,
    )
    page = write_participant_report(tmp_path, "01", ctx)
    assert "has 10242; surface maps not drawn" in page.read_text()
    check_page(page)


def test_template_meshes_come_from_disk_only() -> None:
    meshes, reason = find_meshes("01", "fsLR:den-32k", None, None)
    if meshes:
        assert {h: m.n_vertices for h, m in meshes.items()} == {"L": 32492, "R": 32492}
    else:
        assert "local TemplateFlow cache" in reason
    assert find_meshes("01", "MNI152NLin2009cAsym", None, None) == (
        {},
        "space MNI152NLin2009cAsym has no cortical mesh",
    )
    meshes, _ = find_meshes("01", "fsaverage:den-10k", None, None)
    assert meshes["L"].n_vertices == 10242 and meshes["R"].background.shape == (10242,)


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
    assert "aperture was not passed" in text
    assert text.count("<th>total</th>") == 3 and "<td>2.50 s</td>" in text
    assert len(check_page(page)) == 9


def test_cifti_geometry_puts_units_on_fslr_vertices(tmp_path: Path) -> None:
    cortex = {"L": np.arange(0, 32492, 2), "R": np.arange(1, 32492, 3)}
    axis = (
        nib.cifti2.BrainModelAxis.from_surface(cortex["L"], 32492, "CortexLeft")
        + nib.cifti2.BrainModelAxis.from_surface(cortex["R"], 32492, "CortexRight")
        + nib.cifti2.BrainModelAxis.from_mask(np.ones((2, 2, 2), bool), "thalamus_left", affine=np.eye(4))
    )
    n = len(axis)
    values = np.arange(n, dtype=np.float32)
    img = nib.cifti2.Cifti2Image(values[None], header=(nib.cifti2.ScalarAxis(["r2"]), axis))
    path = tmp_path / "sub-01_task-bar_space-fsLR_den-91k_bold.dscalar.nii"
    nib.save(img, path)
    geometry = SurfaceGeometry.from_cifti(path)
    assert geometry.hemis == {"L": cortex["L"].size, "R": cortex["R"].size}
    per_hemi = geometry.split(values)
    assert per_hemi["L"].shape == per_hemi["R"].shape == (32492,)
    np.testing.assert_array_equal(per_hemi["L"][cortex["L"]], np.arange(cortex["L"].size))
    assert np.isnan(per_hemi["L"][1]) and np.isnan(per_hemi["R"][0])
    assert per_hemi["R"][cortex["R"][-1]] == cortex["L"].size + cortex["R"].size - 1
    meshes, reason = find_meshes("01", "fsLR", "91k", None)
    assert meshes or "fsLR den-32k" in reason


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


def test_culled_surface_figure_matches_the_full_one(context: ReportContext, tmp_path: Path) -> None:
    import matplotlib.image as mpimg

    from prfmap.report.surface import facing_faces, plot_surface_map

    meshes, _ = find_meshes("01", "fsaverage5", None, None)
    per_hemi = context.surface.split(context.maps["polarangle"])
    fast = plot_surface_map("polarangle", per_hemi, meshes, None, tmp_path / "fast.png")
    full = plot_surface_map("polarangle", per_hemi, meshes, None, tmp_path / "full.png", cull=False)
    a, b = mpimg.imread(fast), mpimg.imread(full)
    assert a.shape == b.shape
    assert np.mean(np.abs(a - b).max(axis=-1) > 0.1) < 0.002
    kept = facing_faces(meshes["L"], 0.0, 0.0)
    assert 0.3 < len(kept) / len(meshes["L"].faces) < 0.8
