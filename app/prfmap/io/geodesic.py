"""Distances along a cortical surface between the vertices of one area (connective fields).

A connective field's size is measured in millimetres of cortex along the source area's own surface
(Haak et al., 2013): geodesic distances on the midthickness mesh restricted to the area's triangles,
computed by fast marching on the triangles (Kimmel & Sethian, 1998; potpourri3d's implementation, from
geometry-central), not along the mesh's edges (which overestimates a straight path across triangles by
up to 8 %) nor through the white matter. Fast marching is exact between neighbouring vertices, where
potpourri3d's heat method underestimates by 15 %, and within 2-3 % of the true distance further away.
"""

from __future__ import annotations

import numpy as np
import potpourri3d
from scipy import sparse
from scipy.sparse.csgraph import connected_components

__all__ = ["area_submesh", "geodesic_distances"]


def area_submesh(faces: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """The triangles of ``faces`` whose three corners are all among ``vertices``, renumbered.

    Parameters
    ----------
    faces : ndarray of int, shape (triangles, 3)
        The mesh's triangles.
    vertices : ndarray of int, shape (n,)
        The area's vertices (indices into the mesh), in the order the submesh numbers them.

    Returns
    -------
    ndarray of int, shape (kept, 3)
        The kept triangles, as positions in ``vertices``.
    """
    faces = np.asarray(faces, dtype=np.int64)
    vertices = np.asarray(vertices, dtype=np.int64)
    position = np.full(int(max(faces.max(initial=-1), vertices.max(initial=-1))) + 1, -1, dtype=np.int64)
    position[vertices] = np.arange(len(vertices))
    renumbered = position[faces]
    return renumbered[(renumbered >= 0).all(axis=1)]


def geodesic_distances(coords: np.ndarray, faces: np.ndarray, vertices: np.ndarray) -> np.ndarray:
    """Every pair's distance (mm) along the surface of an area, within its own triangles.

    Pieces of the area that share no edge are infinitely far apart (a connective field does not
    cross a gap in its source); a vertex of the area on no triangle of it is at distance 0 from
    itself and infinitely far from the others. The distances are symmetrised (their mean both
    ways): fast marching is not exactly symmetric.

    Parameters
    ----------
    coords : ndarray, shape (mesh vertices, 3)
        The mesh's coordinates in mm (the midthickness surface).
    faces : ndarray of int, shape (triangles, 3)
        The mesh's triangles.
    vertices : ndarray of int, shape (n,)
        The area's vertices.

    Returns
    -------
    ndarray, shape (n, n), float32
        Distances in mm; ``inf`` between unconnected vertices.
    """
    vertices = np.asarray(vertices, dtype=np.int64)
    n = len(vertices)
    tri = area_submesh(faces, vertices)
    distances = np.full((n, n), np.inf, dtype=np.float64)
    np.fill_diagonal(distances, 0.0)
    if len(tri) == 0:
        return distances.astype(np.float32)
    edges = np.concatenate([tri[:, [0, 1]], tri[:, [1, 2]], tri[:, [2, 0]]])
    graph = sparse.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    _, component = connected_components(graph, directed=False)
    on_triangle = np.zeros(n, dtype=bool)
    on_triangle[tri.ravel()] = True
    points = np.asarray(coords, dtype=np.float64)[vertices]
    for piece in np.unique(component[on_triangle]):
        members = np.flatnonzero((component == piece) & on_triangle)
        if len(members) < 3:
            continue
        local = np.full(n, -1, dtype=np.int64)
        local[members] = np.arange(len(members))
        piece_faces = local[tri[component[tri[:, 0]] == piece]]
        solver = potpourri3d.MeshFastMarchingDistanceSolver(points[members], piece_faces)
        block = np.stack([solver.compute_distance([[[int(k), []]]]) for k in range(len(members))])
        distances[np.ix_(members, members)] = (block + block.T) / 2
    np.fill_diagonal(distances, 0.0)
    return distances.astype(np.float32)
