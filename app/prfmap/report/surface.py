"""Meshes for the surface figures, and the maps drawn on them with nilearn."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prfmap.io.spaces import CIFTI_MESH_DENSITY
from prfmap.report.figures import save

NILEARN_HEMI = {"L": "left", "R": "right"}
TEMPLATE_DENSITY = {
    "fsaverage5": ("fsaverage", "10k"),
    "fsaverage6": ("fsaverage", "41k"),
    "fsaverage": ("fsaverage", "164k"),
    "fsLR": ("fsLR", "32k"),
}
SURFACE_KINDS = ("inflated", "veryinflated", "midthickness", "pial", "white")


@dataclass
class Mesh:
    """One hemisphere's mesh and the background shading drawn under the maps."""

    coords: np.ndarray
    faces: np.ndarray
    background: np.ndarray
    source: str

    @property
    def n_vertices(self) -> int:
        """Number of vertices."""
        return int(self.coords.shape[0])


def read_gifti_mesh(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """Read the vertex coordinates and triangles of a ``.surf.gii``.

    Parameters
    ----------
    path : Path
        The surface file.

    Returns
    -------
    tuple of ndarray
        (vertices, 3) float coordinates and (faces, 3) int triangles.
    """
    import nibabel as nib

    coords, faces = nib.load(str(path)).agg_data(("pointset", "triangle"))
    return np.asarray(coords, dtype=np.float64), np.asarray(faces, dtype=np.int64)


def curvature_shading(coords: np.ndarray, faces: np.ndarray) -> np.ndarray:
    """A sulcal-like shading from the mesh: the sign of its discrete mean curvature.

    Parameters
    ----------
    coords, faces : ndarray
        The mesh.

    Returns
    -------
    ndarray
        (vertices,) values in {-1, 1}: -1 convex (gyri), +1 concave (sulci), like FreeSurfer's sulc.
    """
    from scipy import sparse

    n = coords.shape[0]
    rows = np.concatenate([faces[:, 0], faces[:, 1], faces[:, 2], faces[:, 1], faces[:, 2], faces[:, 0]])
    cols = np.concatenate([faces[:, 1], faces[:, 2], faces[:, 0], faces[:, 0], faces[:, 1], faces[:, 2]])
    adj = sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=(n, n))
    adj.data[:] = 1.0
    degree = np.asarray(adj.sum(axis=1)).ravel()
    laplacian = adj @ coords / np.maximum(degree, 1)[:, None] - coords
    tri = coords[faces]
    face_normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normals = np.zeros_like(coords)
    for k in range(3):
        np.add.at(normals, faces[:, k], face_normals)
    return np.where(np.sum(laplacian * normals, axis=1) > 0, -1.0, 1.0)


def _shape_or_curvature(coords: np.ndarray, faces: np.ndarray, shape: Path | None) -> np.ndarray:
    if shape is not None:
        import nibabel as nib

        values = np.asarray(nib.load(str(shape)).agg_data(), dtype=np.float64).ravel()
        if values.size == coords.shape[0]:
            return values
    return curvature_shading(coords, faces)


def _fsnative(subject: str, fmriprep_dir: Path | None) -> tuple[dict[str, Mesh], str]:
    if fmriprep_dir is None:
        return {}, "fsnative meshes need the fMRIPrep folder, which was not given"
    meshes: dict[str, Mesh] = {}
    for hemi in ("L", "R"):
        found = sorted(
            Path(fmriprep_dir).glob(f"sub-{subject}/**/sub-{subject}*_hemi-{hemi}_inflated.surf.gii")
        )
        if not found:
            return {}, (f"no sub-{subject}_hemi-{hemi}_inflated.surf.gii under {fmriprep_dir}")
        sulc = sorted(found[0].parent.glob(f"sub-{subject}*_hemi-{hemi}_sulc.shape.gii"))
        coords, faces = read_gifti_mesh(found[0])
        shading = _shape_or_curvature(coords, faces, sulc[0] if sulc else None)
        meshes[hemi] = Mesh(coords, faces, shading, str(found[0]))
    return meshes, f"the participant's inflated surfaces from fMRIPrep ({meshes['L'].source}, ...)"


def _fsaverage5() -> tuple[dict[str, Mesh], str]:
    from nilearn import datasets

    mesh = datasets.load_fsaverage("fsaverage5")["inflated"]
    sulc = datasets.load_fsaverage_data(mesh="fsaverage5", mesh_type="inflated", data_type="sulcal")
    meshes = {}
    for hemi, part in NILEARN_HEMI.items():
        m = mesh.parts[part]
        meshes[hemi] = Mesh(
            np.asarray(m.coordinates, dtype=np.float64),
            np.asarray(m.faces),
            np.asarray(sulc.data.parts[part], dtype=np.float64),
            "nilearn fsaverage5",
        )
    return meshes, "nilearn's bundled fsaverage5 inflated mesh"


def _templateflow_files(template: str, hemi: str, density: str, kind: str) -> list[Path]:
    from templateflow import conf

    found = []
    for path in sorted(Path(conf.TF_HOME).glob(f"tpl-{template}/tpl-{template}_*_{kind}.surf.gii")):
        entities = dict(p.split("-", 1) for p in path.name.split(".")[0].split("_")[:-1] if "-" in p)
        if entities.get("hemi") == hemi and entities.get("den") == density and "desc" not in entities:
            if path.is_file() and path.stat().st_size > 0:
                found.append(path)
    return found


def _templateflow(template: str, density: str) -> tuple[dict[str, Mesh], str]:
    meshes: dict[str, Mesh] = {}
    for hemi in ("L", "R"):
        for kind in SURFACE_KINDS:
            files = _templateflow_files(template, hemi, density, kind)
            if files:
                coords, faces = read_gifti_mesh(files[0])
                meshes[hemi] = Mesh(coords, faces, curvature_shading(coords, faces), files[0].name)
                break
        else:
            return {}, (
                f"no {template} den-{density} hemi-{hemi} surface in the local TemplateFlow "
                f"cache (prefetch it with templateflow.api.get('{template}', "
                f"density='{density}', extension='.surf.gii'))"
            )
    return meshes, f"TemplateFlow {template} den-{density} ({meshes['L'].source}, ...)"


def find_meshes(
    subject: str,
    space: str,
    den: str | None,
    fmriprep_dir: Path | None,
    given: dict[str, Path] | None = None,
) -> tuple[dict[str, Mesh], str]:
    """Find the meshes to draw a participant's maps on; never downloads anything.

    Parameters
    ----------
    subject : str
        Participant label without ``sub-``.
    space : str
        ``fsnative``, ``fsaverage5``, ``fsaverage6``, ``fsaverage`` or ``fsLR`` (with an optional
        ``:den-<d>``); other spaces have no mesh.
    den : str, optional
        Density (``32k``, ``10k``, ...), overriding the one in ``space``; CIFTI densities
        (``91k``, ``170k``) stand for their fsLR meshes (``32k``, ``59k``).
    fmriprep_dir : Path, optional
        Searched for the participant's surfaces when ``space`` is ``fsnative``.
    given : dict of str to Path, optional
        Explicit surface files per hemisphere; used as they are.

    Returns
    -------
    tuple
        Hemisphere to :class:`Mesh` (empty when none is available) and one sentence saying
        which meshes were used, or why there are none.
    """
    if given:
        meshes = {}
        for hemi, path in given.items():
            coords, faces = read_gifti_mesh(Path(path))
            meshes[hemi] = Mesh(coords, faces, curvature_shading(coords, faces), str(path))
        return meshes, "the surfaces given to the report"
    name, _, modifier = space.partition(":")
    if modifier.startswith("den-") and den is None:
        den = modifier[4:]
    if name == "fsnative":
        return _fsnative(subject, fmriprep_dir)
    den = CIFTI_MESH_DENSITY.get(den, den) if name == "fsLR" else den
    if name == "fsaverage" and den in ("10k", "41k"):
        name = {"10k": "fsaverage5", "41k": "fsaverage6"}[den]
    if name == "fsaverage5":
        return _fsaverage5()
    if name in TEMPLATE_DENSITY:
        template, default = TEMPLATE_DENSITY[name]
        return _templateflow(template, den or default)
    return {}, f"space {space} has no cortical mesh"


SURFACE_MAPS = {
    "polarangle": dict(cmap="hsv", vmin=-180.0, vmax=180.0, units="deg"),
    "eccentricity": dict(cmap="viridis", vmin=0.0, vmax=None, units="deg"),
    "sigma": dict(cmap="plasma", vmin=0.0, vmax=None, units="deg"),
    "r2": dict(cmap="inferno", vmin=0.0, vmax=1.0, units=""),
}
LARGE_MESH = 60_000
VIEWS = (("L", "medial"), ("L", "posterior"), ("R", "posterior"), ("R", "medial"))
VIEW_ANGLES = {  # (elevation, azimuth) of matplotlib's camera, as nilearn's named views
    ("L", "medial"): (0.0, 0.0),
    ("R", "medial"): (0.0, 180.0),
    ("L", "posterior"): (0.0, 270.0),
    ("R", "posterior"): (0.0, 270.0),
}


def facing_faces(mesh: Mesh, elev: float, azim: float, slack: float = 0.2) -> np.ndarray:
    """The triangles that face a camera at (``elev``, ``azim``), plus a margin at the silhouette.

    matplotlib draws every triangle of a 3-D mesh, hidden or not; on a closed surface the
    triangles facing away are all hidden, so leaving them out draws the same picture in about
    half the time.

    Parameters
    ----------
    mesh : Mesh
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
    tri = mesh.coords[mesh.faces]
    normals = np.cross(tri[:, 1] - tri[:, 0], tri[:, 2] - tri[:, 0])
    normals /= np.linalg.norm(normals, axis=1, keepdims=True) + 1e-12
    outward = np.sign(np.sum((tri.mean(axis=1) - mesh.coords.mean(axis=0)) * normals)) or 1.0
    e, a = np.radians(elev), np.radians(azim)
    eye = np.array([np.cos(e) * np.cos(a), np.cos(e) * np.sin(a), np.sin(e)])
    return mesh.faces[outward * (normals @ eye) > -slack]


def plot_surface_map(
    label: str,
    values: dict[str, np.ndarray],
    meshes: dict[str, Mesh],
    vmax: float | None,
    path: Path,
    style: dict | None = None,
    cull: bool = True,
) -> Path:
    """Draw one parameter on both hemispheres (medial and posterior views; medial only on
    meshes of over ``LARGE_MESH`` vertices, which matplotlib draws slowly).

    Parameters
    ----------
    label : str
        Key of ``SURFACE_MAPS`` (``polarangle``, ``eccentricity``, ``sigma``, ``r2``).
    values : dict of str to ndarray
        Hemisphere to one value per mesh vertex; NaN is not drawn (shows the background).
    meshes : dict of str to Mesh
        The meshes.
    vmax : float, optional
        Top of the colour scale where ``SURFACE_MAPS`` leaves it open.
    path : Path
        Output PNG.
    style : dict, optional
        ``cmap``, ``vmin``, ``vmax`` of a label not in ``SURFACE_MAPS``.
    cull : bool
        Draw only the triangles facing each view (:func:`facing_faces`): the same picture,
        faster.

    Returns
    -------
    Path
        ``path``.
    """
    import matplotlib.pyplot as plt
    from nilearn import plotting

    style = style or SURFACE_MAPS[label]
    large = max(m.n_vertices for m in meshes.values()) > LARGE_MESH
    views = [(h, v) for h, v in VIEWS if h in meshes and h in values and not (large and v != "medial")]
    fig, axes = plt.subplots(
        1,
        len(views),
        subplot_kw={"projection": "3d"},
        figsize=(3.2 * len(views), 3.2),
        squeeze=False,
    )
    top = style["vmax"] if style["vmax"] is not None else vmax
    for k, (ax, (hemi, view)) in enumerate(zip(axes[0], views, strict=True)):
        mesh = meshes[hemi]
        data = values[hemi].copy()
        data[~np.isfinite(data)] = np.nan
        angles = VIEW_ANGLES[hemi, view]
        plotting.plot_surf_stat_map(
            (mesh.coords, facing_faces(mesh, *angles) if cull else mesh.faces),
            data,
            hemi=NILEARN_HEMI[hemi],
            view=angles,
            bg_map=mesh.background,
            cmap=style["cmap"],
            vmin=style["vmin"],
            vmax=top,
            symmetric_cbar=False,
            threshold=None,
            colorbar=k == len(views) - 1,
            cbar_tick_format="%.1f" if label == "r2" else "%.0f",
            axes=ax,
            figure=fig,
        )
        ax.set_title(f"{hemi} {view}", fontsize=9)
    return save(fig, path)
