"""Geodesic distances within an area (connective fields): against the distances a flat sheet and a
sphere have in closed form."""

from __future__ import annotations

import numpy as np
from nilearn import datasets

from helpers import grid_mesh
from prfmap.io.geodesic import area_submesh, geodesic_distances


def test_a_flat_sheet_has_euclidean_distances():
    coords, faces = grid_mesh(25, 1.5)
    distances = geodesic_distances(coords, faces, np.arange(len(coords)))
    straight = np.linalg.norm(coords[:, None] - coords[None], axis=-1)
    far = straight > 3.0
    assert np.allclose(distances, distances.T)
    assert np.all(np.diag(distances) == 0)
    assert np.median(np.abs(distances[far] / straight[far] - 1)) < 0.03
    # fast marching's first-order error peaks between the mesh's edge directions
    assert np.percentile(np.abs(distances[far] / straight[far] - 1), 95) < 0.1
    neighbours = (straight > 0) & (straight < 1.6)
    assert np.mean(np.isclose(distances[neighbours], 1.5, rtol=1e-4)) > 0.98  # exact along an edge


def test_a_sphere_has_great_circle_distances():
    mesh = datasets.load_fsaverage("fsaverage5")["sphere"].parts["left"]
    coords = np.asarray(mesh.coordinates, dtype=np.float64)
    radius = np.linalg.norm(coords, axis=1).mean()
    cap = np.flatnonzero(coords[:, 2] / radius > 0.7)  # a polar cap: one connected piece
    distances = geodesic_distances(coords, np.asarray(mesh.faces), cap)
    unit = coords[cap] / np.linalg.norm(coords[cap], axis=1, keepdims=True)
    great_circle = radius * np.arccos(np.clip(unit @ unit.T, -1, 1))
    far = great_circle > 10.0
    assert np.isfinite(distances).all()
    assert np.median(np.abs(distances[far] / great_circle[far] - 1)) < 0.03


def test_pieces_of_an_area_that_share_no_edge_are_infinitely_apart():
    coords, faces = grid_mesh(10, 1.0)
    left = np.flatnonzero(coords[:, 0] <= 2.0)
    right = np.flatnonzero(coords[:, 0] >= 6.0)
    lone = np.array([int(np.flatnonzero((coords[:, 0] == 4.0) & (coords[:, 1] == 4.0))[0])])
    vertices = np.concatenate([left, right, lone])
    distances = geodesic_distances(coords, faces, vertices)
    n_left, n_right = len(left), len(right)
    assert np.isinf(distances[:n_left, n_left : n_left + n_right]).all()
    assert np.isfinite(distances[:n_left, :n_left]).all()
    assert np.isinf(distances[-1, :-1]).all() and distances[-1, -1] == 0
    assert len(area_submesh(faces, lone)) == 0
