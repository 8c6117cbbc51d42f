"""Surface maps of the visual cortex up close: a flattened occipital patch and occipital views.

The patch is an orthographic projection of the registered sphere around the occipital pole, as
neuropythy's ``occipital_pole`` map projection draws it (Benson et al., 2014): dorsal up, the
calcarine sulcus across the middle, with the left hemisphere's medial side to the right and the
right hemisphere's to the left, so that the two hemispheres' V1 face each other. The 3-D views
(posterior-medial and inferior) are nilearn's ``plot_surf_stat_map`` of the posterior part of the
inflated mesh.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
from matplotlib import patheffects
from matplotlib.tri import Triangulation
from nilearn import plotting

from prfmap.report.atlas import Atlas
from prfmap.report.figures import save
from prfmap.report.legends import (
    MapStyle,
    draw_category_legend,
    draw_colour_bar,
    draw_colour_wheel,
    hemifield_cmap,
)
from prfmap.report.meshes import NILEARN_HEMI, Mesh

# neuropythy's occipital_pole projection centres on the fsaverage sphere (lib/projections/*.mp.json)
OCCIPITAL_CENTRE = {"L": (-8.19, -83.55, -54.34), "R": (-19.10, -77.49, -60.25)}
PATCH_RADIUS_DEG = 60.0
EARLY_AREAS = (1, 2, 3)  # V1-V3 in the atlas's codes
VIEWS = (("L", "posterior-medial"), ("L", "inferior"), ("R", "inferior"), ("R", "posterior-medial"))
VIEW_ANGLES = {  # (elevation, azimuth) of matplotlib's camera
    ("L", "posterior-medial"): (10.0, 315.0),
    ("R", "posterior-medial"): (10.0, 225.0),
    ("L", "inferior"): (-90.0, 0.0),
    ("R", "inferior"): (-90.0, 180.0),
}
POSTERIOR_FRACTION = 0.45
BORDER = dict(colors="white", linewidths=0.9)


def _unit(points: np.ndarray) -> np.ndarray:
    return points / np.maximum(np.linalg.norm(points, axis=-1, keepdims=True), 1e-12)


@dataclass
class Patch:
    """A hemisphere's occipital region projected to the plane.

    Attributes
    ----------
    xy : ndarray
        (vertices, 2) projected positions of every vertex (those outside are not drawn).
    faces : ndarray
        (faces, 3) triangles inside the patch.
    centre_from : str
        How the centre was chosen, for the caption.
    """

    xy: np.ndarray
    faces: np.ndarray
    centre_from: str


def occipital_patch(mesh: Mesh, hemi: str, labels: np.ndarray | None = None) -> Patch | None:
    """Project the occipital part of ``mesh``'s registered sphere to the plane.

    Parameters
    ----------
    mesh : Mesh
        A mesh with a registered sphere (``mesh.sphere``).
    hemi : str
        ``L`` or ``R``.
    labels : ndarray, optional
        Visual-area codes per vertex; when V1–V3 are there, the patch is centred on them.

    Returns
    -------
    Patch or None
        ``None`` when the mesh has no sphere.
    """
    if mesh.sphere is None:
        return None
    points = _unit(mesh.sphere)
    early = None if labels is None else np.isin(labels, EARLY_AREAS)
    if early is not None and early.any():
        centre, how = _unit(points[early].mean(axis=0)), "centred on V1–V3 of the atlas"
    elif mesh.registration == "fsaverage":
        centre, how = _unit(np.asarray(OCCIPITAL_CENTRE[hemi])), "centred on the occipital pole (fsaverage)"
    else:
        centre, how = points[int(np.argmin(mesh.coords[:, 1]))], "centred on the most posterior vertex"
    right = np.array([1.0, 0.0, 0.0])
    e_x = _unit(right - (right @ centre) * centre)
    e_y = np.cross(centre, e_x)
    inside = points @ centre >= np.cos(np.radians(PATCH_RADIUS_DEG))
    faces = mesh.faces[inside[mesh.faces].all(axis=1)]
    xy = np.stack([points @ e_x, points @ e_y], axis=1)
    return Patch(xy, faces, how)


def _background(ax: plt.Axes, tri: Triangulation, shading: np.ndarray) -> None:
    finite = np.where(np.isfinite(shading), shading, 0.0)
    spread = float(np.percentile(np.abs(finite), 95)) or 1.0
    ax.tripcolor(tri, finite, shading="gouraud", cmap="Greys", vmin=-2.2 * spread, vmax=2.2 * spread)


def _draw_values(
    ax: plt.Axes, xy: np.ndarray, faces: np.ndarray, values: np.ndarray, style: MapStyle, hemi: str
):
    cmap, vmin, vmax, shift = hemifield_cmap(style, hemi)
    shown = np.isfinite(values)
    drawn = np.where(shown, values, vmin)
    if shift is not None:
        drawn = np.mod(drawn, float(shift))
    tri = Triangulation(xy[:, 0], xy[:, 1], faces, mask=~shown[faces].all(axis=1))
    if not shown[faces].all(axis=1).any():
        return
    if style.categories:  # no blending of categories: each face takes its vertices' majority
        corner = drawn[faces]
        face = np.where(corner[:, 1] == corner[:, 2], corner[:, 1], corner[:, 0])
        ax.tripcolor(tri, facecolors=face, cmap=cmap, vmin=vmin, vmax=vmax)
    else:
        ax.tripcolor(tri, drawn, shading="gouraud", cmap=cmap, vmin=vmin, vmax=vmax)


def _draw_borders(
    ax: plt.Axes, tri: Triangulation, xy: np.ndarray, faces: np.ndarray, atlas: Atlas, hemi: str
):
    labels = atlas.labels.get(hemi)
    if labels is None:
        return
    inside = np.zeros(labels.size, dtype=bool)
    inside[np.unique(faces)] = True
    for code, name in enumerate(atlas.names, start=1):
        member = (labels == code) & inside
        if member.sum() < 3:
            continue
        ax.tricontour(tri, (labels == code).astype(float), levels=[0.5], **BORDER)
        x, y = np.median(xy[member], axis=0)
        text = ax.text(x, y, name, fontsize=7, ha="center", va="center", color="black")
        text.set_path_effects([patheffects.withStroke(linewidth=2, foreground="white")])


def _panel_title(hemi: str) -> str:
    return "left hemisphere   medial →" if hemi == "L" else "← medial   right hemisphere"


def patch_figure(
    style: MapStyle,
    values: dict[str, np.ndarray],
    meshes: dict[str, Mesh],
    patches: dict[str, Patch],
    atlas: Atlas | None,
    threshold_text: str,
    path: Path,
    description: str,
) -> Path:
    """Both hemispheres' occipital patches of one map, with its legend.

    Parameters
    ----------
    style : MapStyle
        The colour scale.
    values : dict of str to ndarray
        Hemisphere to one value per mesh vertex; NaN shows the background.
    meshes, patches : dict
        The meshes and their :func:`occipital_patch`.
    atlas : Atlas, optional
        Visual-area borders to draw.
    threshold_text : str
        What is shown, e.g. ``"r² ≥ 0.1"``, on the legend.
    path : Path
        Output PNG.
    description : str
        Stored in the PNG's metadata.

    Returns
    -------
    Path
        ``path``.
    """
    hemis = [h for h in ("L", "R") if h in patches and h in values]
    width = 3.0 * len(hemis) + 1.7
    fig = plt.figure(figsize=(width + SPARE_INCHES, 3.4), layout="constrained")
    grid = fig.add_gridspec(
        2,
        len(hemis) + 2,
        width_ratios=[3.0] * len(hemis) + [1.7, SPARE_INCHES],
        height_ratios=[1, 0.12],
        wspace=0.0,
    )
    for k, hemi in enumerate(hemis):
        ax = fig.add_subplot(grid[:, k])
        patch, mesh = patches[hemi], meshes[hemi]
        tri = Triangulation(patch.xy[:, 0], patch.xy[:, 1], patch.faces)
        _background(ax, tri, mesh.background)
        _draw_values(ax, patch.xy, patch.faces, values[hemi], style, hemi)
        if atlas is not None:
            _draw_borders(ax, tri, patch.xy, patch.faces, atlas, hemi)
        ax.set_aspect("equal")
        ax.axis("off")
        ax.set_title(_panel_title(hemi), fontsize=9)
        ax.text(
            0.5, 0.0, "dorsal ↑, ventral ↓", transform=ax.transAxes, ha="center", fontsize=7, color="0.35"
        )
    if style.cyclic:
        draw_colour_wheel(fig.add_subplot(grid[0, -2]), style, tuple(hemis))
        fig.add_subplot(grid[1, -2]).axis("off")
        fig.text(0.99 * width / (width + SPARE_INCHES), 0.02, threshold_text, ha="right", fontsize=8)
    elif style.categories:
        draw_category_legend(fig.add_subplot(grid[:, -2]), style, threshold_text)
    else:
        fig.add_subplot(grid[0, -2]).axis("off")
        draw_colour_bar(fig.add_subplot(grid[1, -2]), style, threshold_text)
    return save(fig, path, {"Title": style.bar_label, "Description": description})


SPARE_INCHES = 2.5
"""Room right of the legend for its labels, which the saved picture crops away when unused
(:func:`prfmap.report.figures.save` draws once where the drawing stays on the canvas)."""


def facing_faces(
    coords: np.ndarray, faces: np.ndarray, elev: float, azim: float, slack: float = 0.2
) -> np.ndarray:
    """The triangles that face a camera at (``elev``, ``azim``), plus a margin at the silhouette.

    matplotlib draws every triangle of a 3-D mesh, hidden or not; on a closed surface the
    triangles facing away are all hidden, so leaving them out draws the same picture faster.

    Parameters
    ----------
    coords, faces : ndarray
        A closed surface (its outward side found from the triangles' winding).
    elev, azim : float
        The camera, in degrees, as ``Axes3D.view_init`` takes it.
    slack : float
        Triangles whose unit normal points up to this much away from the camera are kept.

    Returns
    -------
    ndarray
        (kept faces, 3) vertex indices.
    """
    tri = coords[faces]
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normals /= np.linalg.norm(normals, axis=1, keepdims=True) + 1e-12
    outward = np.sign(np.sum((tri.mean(axis=1) - coords.mean(axis=0)) * normals)) or 1.0
    e, a = np.radians(elev), np.radians(azim)
    eye = np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])
    return faces[outward * (normals @ eye) > -slack]


def posterior_faces(mesh: Mesh) -> np.ndarray:
    """Triangles of the posterior part (``POSTERIOR_FRACTION`` of the mesh's length) of ``mesh``."""
    y = mesh.coords[:, 1]
    cut = y.min() + POSTERIOR_FRACTION * (y.max() - y.min())
    return mesh.faces[(y[mesh.faces] <= cut).all(axis=1)]


def _compact(faces: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The vertices ``faces`` use and the faces renumbered over them (so views frame only them)."""
    used, inverse = np.unique(faces, return_inverse=True)
    return used, inverse.reshape(faces.shape)


def views_figure(
    style: MapStyle,
    values: dict[str, np.ndarray],
    meshes: dict[str, Mesh],
    threshold_text: str,
    path: Path,
    description: str,
) -> Path:
    """Posterior-medial and inferior views of the occipital part of both hemispheres.

    Parameters
    ----------
    style : MapStyle
        The colour scale.
    values : dict of str to ndarray
        Hemisphere to one value per mesh vertex; NaN shows the background.
    meshes : dict of str to Mesh
        The inflated meshes.
    threshold_text : str
        What is shown, on the legend.
    path : Path
        Output PNG.
    description : str
        Stored in the PNG's metadata.

    Returns
    -------
    Path
        ``path``.
    """
    views = [(h, v) for h, v in VIEWS if h in meshes and h in values]
    inches = 2.6 * len(views) + 1.7
    fig = plt.figure(figsize=(inches + SPARE_INCHES, 2.9))
    width = inches / (inches + SPARE_INCHES) / (len(views) + 0.65)
    for k, (hemi, view) in enumerate(views):
        ax = fig.add_axes((k * width, 0.0, width, 0.9), projection="3d")
        mesh = meshes[hemi]
        cmap, vmin, vmax, shift = hemifield_cmap(style, hemi)
        data = np.where(np.isfinite(values[hemi]), values[hemi], np.nan)
        if shift is not None:
            data = np.mod(data, float(shift))
        angles = VIEW_ANGLES[hemi, view]
        used, faces = _compact(facing_faces(mesh.coords, posterior_faces(mesh), *angles))
        with warnings.catch_warnings():  # a view where nothing is shown: nilearn's nanmin of no value
            warnings.filterwarnings("ignore", "All-NaN slice encountered", RuntimeWarning)
            plotting.plot_surf_stat_map(
                (mesh.coords[used], faces),
                data[used],
                hemi=NILEARN_HEMI[hemi],
                view=angles,
                bg_map=mesh.background[used],
                cmap=cmap,
                vmin=vmin,
                vmax=vmax,
                symmetric_cbar=False,
                threshold=None,
                avg_method="median" if style.categories else "mean",
                colorbar=False,
                axes=ax,
                figure=fig,
            )
        ax.set_title(f"{'left' if hemi == 'L' else 'right'} {view}", fontsize=9)
    tall = style.cyclic or bool(style.categories)
    legend = fig.add_axes(
        (
            len(views) * width + 0.01 * inches / (inches + SPARE_INCHES),
            0.1 if tall else 0.45,
            0.6 * width,
            0.75 if tall else 0.06,
        )
    )
    if style.cyclic:
        draw_colour_wheel(legend, style, tuple(h for h in ("L", "R") if h in values))
        fig.text(0.995 * inches / (inches + SPARE_INCHES), 0.02, threshold_text, ha="right", fontsize=8)
    elif style.categories:
        draw_category_legend(legend, style, threshold_text)
    else:
        draw_colour_bar(legend, style, threshold_text, label_from_left=True)
    return save(fig, path, {"Title": style.bar_label, "Description": description})
