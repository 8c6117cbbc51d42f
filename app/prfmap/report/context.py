"""What the participant report is made from: :class:`ReportContext` and :class:`SurfaceGeometry`."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

HEMIS = ("L", "R")


@dataclass
class SurfaceGeometry:
    """How the units of the maps lie on the cortical meshes.

    Parameters
    ----------
    hemis : dict of str to int
        Hemisphere (``"L"``, ``"R"``) to the number of units it holds, in the order the units
        appear in the map arrays (GIFTI: all left vertices, then all right ones).
    vertices : dict of str to ndarray, optional
        Hemisphere to the mesh vertex index of each of its units, for data that leave vertices
        out (CIFTI drops the medial wall). ``None``: unit ``i`` of a hemisphere is vertex ``i``.
    n_vertices : dict of str to int, optional
        Vertices of each hemisphere's mesh; needed with ``vertices``.
    meshes : dict of str to Path, optional
        Hemisphere to an inflated ``.surf.gii`` to draw on. ``None``: found from the space
        (fsnative: the participant's fMRIPrep surfaces; fsaverage5: nilearn's bundled mesh;
        other templates: TemplateFlow, when its files are already on disk).
    """

    hemis: dict[str, int]
    vertices: dict[str, np.ndarray] | None = None
    n_vertices: dict[str, int] | None = None
    meshes: dict[str, Path] | None = None

    @classmethod
    def from_cifti(cls, path: str | Path) -> SurfaceGeometry:
        """Read the cortical part of a CIFTI file's brain-model axis.

        Parameters
        ----------
        path : str or Path
            A ``.dtseries.nii`` or ``.dscalar.nii`` whose last axis holds the grayordinates.

        Returns
        -------
        SurfaceGeometry
            Left and right cortex, with their vertex indices and mesh sizes; subcortical
            grayordinates (which follow the cortex) are not drawn.
        """
        axis = nib.load(str(path)).header.get_axis(1)
        names = {"CIFTI_STRUCTURE_CORTEX_LEFT": "L", "CIFTI_STRUCTURE_CORTEX_RIGHT": "R"}
        hemis: dict[str, int] = {}
        vertices: dict[str, np.ndarray] = {}
        n_vertices: dict[str, int] = {}
        for name, slc, brain_model in axis.iter_structures():
            hemi = names.get(name)
            if hemi is None:
                continue
            if slc.start != sum(hemis.values()):
                break
            hemis[hemi] = len(brain_model)
            vertices[hemi] = np.asarray(brain_model.vertex, dtype=np.int64)
            n_vertices[hemi] = int(brain_model.nvertices[name])
        return cls(hemis=hemis, vertices=vertices, n_vertices=n_vertices)

    def split(self, values: np.ndarray) -> dict[str, np.ndarray]:
        """Cut a (units,) array into per-hemisphere arrays over each mesh's vertices.

        Parameters
        ----------
        values : ndarray
            One value per unit; units past the cortical ones (CIFTI subcortex) are ignored.

        Returns
        -------
        dict of str to ndarray
            Hemisphere to a float array with one value per mesh vertex (NaN where the data
            have no unit).
        """
        out: dict[str, np.ndarray] = {}
        start = 0
        for hemi, count in self.hemis.items():
            part = np.asarray(values[start : start + count], dtype=np.float64)
            start += count
            if self.vertices is None:
                out[hemi] = part
                continue
            full = np.full(self.n_vertices[hemi], np.nan)
            full[self.vertices[hemi]] = part
            out[hemi] = full
        return out


@dataclass
class ReportContext:
    """Everything the participant report shows for one fit (one space, task and session).

    Parameters
    ----------
    subject : str
        Participant label without ``sub-``.
    space : str
        The space as fMRIPrep writes it (``fsnative``, ``fsaverage5``, ``fsLR``, ``T1w``, ...).
    maps : dict of str to ndarray
        BIDS parameter label to a (units,) array, as ``FitResult.maps()`` returns; must hold
        ``r2`` and, for the visual-field figures, ``x``, ``y``, ``sigma``, ``polarangle`` and
        ``eccentricity``.
    model : str
        ``gauss``, ``css``, ``dog`` or ``dn``.
    session, task, den : str, optional
        Entities of the fitted data, shown in the title and used in figure names.
    inputs : list of str
        Files read (BOLD, apertures, events, confounds).
    runs : list of str
        The runs combined, e.g. ``["task-bar_run-1", "task-bar_run-2"]``.
    tr : float, optional
        Repetition time in seconds.
    dummy_scans : int
        Volumes dropped at the start of each run.
    design : ndarray, optional
        The aperture the model saw, float (frames, rows, cols), row 0 at the top.
    fov_deg : float, optional
        Full width of the aperture in degrees.
    settings : dict
        ``FitResult.settings`` (model, refine, HRF, grid, dtype, ...).
    backend : dict
        ``prfmap.engine.backend_info()``.
    timings : dict of str to float
        Stage to seconds (the engine's ``FitResult.timings`` plus loading and writing).
    warnings : list of str
        Anything the user should know (dropped runs, units without signal, ...).
    surface : SurfaceGeometry, optional
        Where the units lie on the cortex; ``None`` for volumes (no surface figures).
    fmriprep_dir : Path, optional
        The fMRIPrep derivatives folder, searched for the participant's inflated surfaces when
        ``space`` is ``fsnative``.
    data, predictions : ndarray, optional
        (units, frames) preprocessed data and fitted predictions (``FitResult.predictions``),
        for the example time courses (best, median and a poor fit by r²).
    r2_threshold : float
        Surface maps and visual-field figures show units with r² at or above this.
    outputs : list of str
        Derivative files written, listed in the report.
    dataset_dir : Path, optional
        The BIDS dataset: input paths are shown relative to its folder.
    command : list of str, optional
        The command line that produced the maps.
    preprocessing : dict
        What preprocessing removed (the sidecars' ``Preprocessing``: ``HighPassHz``,
        ``Confounds``), for the methods paragraph.
    run_inputs : list
        The runs fitted (``prfmap.io.bids.RunInput``), read again for their tSNR and framewise
        displacement.
    volume : object, optional
        For volume spaces: anything with ``mask`` (bool 3-D array; units are its voxels in C
        order) and ``affine`` (``prfmap.io.bold.VolumeGeometry``), to draw the maps as slices.
    """

    subject: str
    space: str
    maps: dict[str, np.ndarray]
    model: str = "gauss"
    session: str | None = None
    task: str | None = None
    den: str | None = None
    inputs: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)
    tr: float | None = None
    dummy_scans: int = 0
    design: np.ndarray | None = None
    fov_deg: float | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    backend: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    surface: SurfaceGeometry | None = None
    fmriprep_dir: Path | None = None
    data: np.ndarray | None = None
    predictions: np.ndarray | None = None
    r2_threshold: float = 0.1
    outputs: list[str] = field(default_factory=list)
    dataset_dir: Path | None = None
    command: list[str] | None = None
    preprocessing: dict[str, Any] = field(default_factory=dict)
    run_inputs: list[Any] = field(default_factory=list)
    volume: Any = None

    @property
    def key(self) -> str:
        """A file-name-safe label of this fit: ``ses-<s>_task-<t>_space-<s>[_den-<d>]``."""
        parts = []
        if self.session:
            parts.append(f"ses-{self.session}")
        if self.task:
            parts.append(f"task-{self.task}")
        parts.append(f"space-{self.space.split(':')[0]}")
        if self.den:
            parts.append(f"den-{self.den}")
        parts.append(f"model-{self.model}")
        return "_".join(parts)
