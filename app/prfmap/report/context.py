"""What the participant report is made from: :class:`ReportContext`.

How units lie on the cortical meshes is :class:`prfmap.io.geometry.SurfaceLayout`, the one
surface/CIFTI geometry of the package (``UnitGeometry.surface()`` gives it for GIFTI and CIFTI data).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prfmap.engine.catalog.settings import FitSettings
from prfmap.io.geometry import SurfaceLayout
from prfmap.io.naming import bids_name


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
    settings : FitSettings, optional
        ``FitResult.settings`` (model, refine, HRF, grid, dtype, ...); None when not recorded.
    extra_settings : dict
        Further records shown with the settings (``slice_time_reference``, ``variance_explained``).
    backend : dict
        ``prfmap.engine.backend_info()``.
    timings : dict of str to float
        Stage to seconds (the engine's ``FitResult.timings`` plus loading and writing).
    warnings : list of str
        Anything the user should know (dropped runs, units without signal, ...).
    surface : SurfaceLayout, optional
        Where the units lie on the cortex (``UnitGeometry.surface()``); ``None`` for volumes.
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
        order) and ``affine`` (``prfmap.io.geometry.VolumeGeometry``), to draw the maps as slices.
    meshes : dict of str to Path, optional
        Hemisphere to a ``.surf.gii`` to draw on instead of the space's own meshes.
    stat_maps : mapping of (str, str) to ndarray
        The fit's uncertainty maps, as ``FitResult.stat_maps()`` returns them: ``(stat, label)``
        (``("se", "x")``, ``("ci95lower", "sigma")``, ...) to a (units,) array. Empty for fits
        without them (older outputs): the report then shows no uncertainty.
    areas : UnitAreas, optional
        Each unit's visual area (``--atlas``): borders on the maps and the results per area.
    areas_note : str
        Which atlas gave the areas, or why there are none.
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
    settings: FitSettings | None = None
    extra_settings: dict[str, Any] = field(default_factory=dict)
    backend: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    surface: SurfaceLayout | None = None
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
    meshes: dict[str, Path] | None = None
    stat_maps: Mapping[tuple[str, str], np.ndarray] = field(default_factory=dict)
    areas: Any = None
    areas_note: str = ""

    @property
    def key(self) -> str:
        """A file-name-safe label of this fit: ``[ses-<s>_]task-<t>_space-<s>[_den-<d>]_model-<m>``."""
        entities = {"ses": self.session, "task": self.task, "space": self.space.split(":")[0]}
        return bids_name({**entities, "den": self.den, "model": self.model})
