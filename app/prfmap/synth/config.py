"""What a synthetic dataset is made of: :class:`SynthConfig`, its defaults, and the acquisition timing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from prfmap.synth.model import (
    HRF_DELAY,
    NOISE_MODELS,
    interleaved_slice_timing,
)

SPACES = ("fsaverage5", "fsLR", "T1w", "fsnative")
DEFAULT_NOISE = 0.5
HRF_OVERSAMPLING = 50
SLICE_TIMINGS = ("uncorrected", "corrected", "start", "middle")
"""How volumes sample time (``SynthConfig.slice_timing``): ``uncorrected``: each unit at its
slice's acquisition time, raw sidecars list ``SliceTiming`` and fMRIPrep's say
``SliceTimingCorrected: false``; ``corrected``: every unit at fMRIPrep's slice-timing reference
(``StartTime`` = first + ``slice_time_ref`` × (last - first) slice time), ``SliceTimingCorrected:
true``; ``start``: every unit at the start of its TR, no ``SliceTiming``, ``SliceTimingCorrected:
false`` (what simulators write); ``middle``: every unit at TR/2, ``SliceTimingCorrected: true``,
``StartTime`` = TR/2, no ``SliceTiming`` (the earlier synthetic data)."""
SURFACE_SLICES = 36
"""Slices of the simulated acquisition for surface spaces (volumes: one per voxel along z)."""
CLEAN = {
    "hrf_delay_jitter": 0.0,
    "hrf_dispersion_jitter": 0.0,
    "slice_timing": "middle",
    "noise_model": "ar1",
    "noise_fraction": 0.0,
}
"""``SynthConfig(**CLEAN)`` (``prfmap-synth --clean``): the earlier, idealised data."""


@dataclass(frozen=True)
class SynthConfig:
    """Settings of a synthetic dataset.

    Attributes
    ----------
    subjects, runs : int
        Participants and runs per participant (all runs see the same stimulus).
    space : {"fsaverage5", "fsLR", "T1w", "fsnative"}
        fsaverage5: GIFTI on nilearn's bundled mesh, pRFs on the occipital pole; fsLR: a CIFTI
        dtseries (the 91k grayordinates, pRFs on the occipital pole of the fs_LR mesh); T1w: a
        NIfTI volume with a brain mask, pRFs in its posterior part; fsnative: GIFTI on each
        participant's own mesh, written with its surfaces under the fMRIPrep folder's ``anat/``.
    noise : float
        Standard deviation of the AR(1) noise, in percent signal change.
    tr : float
        Repetition time, seconds.
    seed : int
        Seed of every random choice.
    small : bool
        A quick test-size dataset: smaller aperture and shorter runs; for fsLR and T1w also far
        fewer grayordinates/voxels (fsaverage5 keeps its 2 × 10,242 vertices).
    fov_deg : float
        Full width of the aperture, degrees.
    dummy_scans : int
        Non-steady-state volumes at the start of each run (flagged in the confounds).
    task : str
        Task label.
    slice_timing : str
        When volumes sample time, and what the sidecars say (:data:`SLICE_TIMINGS`).
    slice_time_ref : float
        For ``slice_timing="corrected"``: fMRIPrep's ``--slice-time-ref``, the fraction of the
        slice acquisition range the data were corrected to.
    hrf_delay_jitter : float
        Each pRF unit's HRF peak (and undershoot) delay is SPM's plus a shift drawn uniformly in
        [-jitter, +jitter] seconds.
    hrf_dispersion_jitter : float
        Each pRF unit's peak dispersion is drawn uniformly in [1 - jitter, 1 + jitter].
    hrf_delay_shift : float
        Seconds added to every pRF unit's HRF delay (a participant whose responses all peak later,
        or earlier, than SPM's).
    noise_model : {"realistic", "global", "ar1"}
        ``realistic``: per-unit noise levels spread log-normally around ``noise``, each the sum of
        AR(1) noise and aliased respiration and cardiac cycles; ``global``: the same plus a slow
        fluctuation shared by every unit (10 % of the variance); ``ar1``: AR(1) noise of standard
        deviation ``noise`` everywhere.
    noise_fraction : float
        Fraction of the units inside the mapped region that carry no pRF (noise only).
    drift : float
        Scale of the slow drifts (1: a linear trend of sd 0.7 % and a half cosine of sd 0.5 %).
    noise_runs : int
        The last ``noise_runs`` runs carry no pRF responses (drifts and noise only): a
        validation case for cross-validated r².
    """

    subjects: int = 1
    runs: int = 2
    space: str = "fsaverage5"
    noise: float = DEFAULT_NOISE
    tr: float = 1.5
    seed: int = 0
    small: bool = False
    fov_deg: float = 20.0
    dummy_scans: int = 0
    task: str = "prf"
    slice_timing: str = "uncorrected"
    slice_time_ref: float = 0.5
    hrf_delay_jitter: float = 1.0
    hrf_dispersion_jitter: float = 0.2
    hrf_delay_shift: float = 0.0
    noise_model: str = "realistic"
    noise_fraction: float = 0.1
    drift: float = 1.0
    noise_runs: int = 0

    n_pixels: int = 0
    n_steps: int = 0
    n_blank: int = 0
    bar_width_deg: float = 0.0

    def __post_init__(self) -> None:
        if self.slice_timing not in SLICE_TIMINGS:
            raise ValueError(f"slice_timing must be one of {SLICE_TIMINGS}, got {self.slice_timing!r}")
        if self.noise_model not in NOISE_MODELS:
            raise ValueError(f"noise_model must be one of {NOISE_MODELS}, got {self.noise_model!r}")
        for name in ("slice_time_ref", "noise_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not 0 <= self.noise_runs <= self.runs:
            raise ValueError(f"noise_runs must lie in [0, runs], got {self.noise_runs}")
        if not 0 <= self.hrf_dispersion_jitter < 1 or self.hrf_delay_jitter < 0 or self.drift < 0:
            raise ValueError("hrf_delay_jitter and drift must be >= 0, hrf_dispersion_jitter in [0, 1)")
        if HRF_DELAY + self.hrf_delay_shift - self.hrf_delay_jitter <= 1.0:
            raise ValueError("hrf_delay_shift - hrf_delay_jitter must leave every HRF delay above 1 s")

    @property
    def aperture_px(self) -> int:
        """Aperture rows and columns (``n_pixels``; default 100, 40 when small)."""
        return self.n_pixels or (40 if self.small else 100)

    @property
    def steps_per_sweep(self) -> int:
        """Bar positions per sweep (``n_steps``; default 20, 16 when small)."""
        return self.n_steps or (16 if self.small else 20)

    @property
    def blank_frames(self) -> int:
        """Mean-luminance frames at the start, between sweep pairs and at the end."""
        return self.n_blank or (4 if self.small else 6)

    @property
    def bar_width(self) -> float:
        """Bar width in degrees (``bar_width_deg``; default an eighth of the field of view)."""
        return self.bar_width_deg or self.fov_deg / 8


@dataclass(frozen=True)
class Timing:
    """The acquisition timing of a dataset and what its sidecars say about it.

    Attributes
    ----------
    slice_timing : ndarray or None
        ``SliceTiming`` of the raw sidecars (s, per slice), None when they give none.
    corrected : bool
        ``SliceTimingCorrected`` of the preprocessed BOLD's sidecars.
    start_time : float or None
        ``StartTime`` of the preprocessed BOLD's sidecars (s), when corrected.
    """

    slice_timing: np.ndarray | None
    corrected: bool
    start_time: float | None

    def sample_times(self, slices: np.ndarray) -> np.ndarray:
        """(units,) time within the TR at which each unit's volumes sample the signal, seconds."""
        if self.start_time is not None:
            return np.full(slices.shape, self.start_time)
        if self.slice_timing is None:
            return np.zeros(slices.shape)
        return self.slice_timing[slices]

    def derivative_sidecar(self) -> dict[str, Any]:
        """What fMRIPrep's BOLD sidecars say about slice timing."""
        meta: dict[str, Any] = {"SliceTimingCorrected": self.corrected}
        if self.start_time is not None:
            meta["StartTime"] = self.start_time
        return meta


def acquisition_timing(config: SynthConfig, n_slices: int) -> Timing:
    """The slice timing ``config.slice_timing`` describes, for ``n_slices`` slices."""
    times = interleaved_slice_timing(n_slices, config.tr)
    mode = config.slice_timing
    if mode == "uncorrected":
        return Timing(times, False, None)
    if mode == "corrected":
        start = float(times.min() + config.slice_time_ref * (times.max() - times.min()))
        return Timing(times, True, round(start, 6))
    if mode == "start":
        return Timing(None, False, None)
    return Timing(None, True, config.tr / 2)
