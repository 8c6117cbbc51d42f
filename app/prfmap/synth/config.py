"""What a synthetic dataset is made of: :class:`SynthConfig`, its defaults, and the acquisition timing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from prfmap.io.atlases import ATLASES
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
PRF_MODELS = ("gauss", "css", "dog")
"""The pRF models a synthetic pRF unit can follow (``SynthConfig.prf_models``), in the order of their
codes in the ground truth's ``desc-truemodel`` map (0 gauss, 1 css, 2 dog)."""
MODEL_SEED = 21
"""The units' models and model parameters come from ``np.random.default_rng([seed, MODEL_SEED])``,
a generator of their own, so the Gaussian parameters, HRFs and noise stay those of the default
dataset whatever models are listed."""
SWEEP_ORDERS = ("same", "shuffled")
"""The order of the bar sweeps across runs (``SynthConfig.sweep_order``): ``same``, every run sees the
first run's apertures; ``shuffled``, every run after the first sweeps the same bars in its own random
order of the eight directions, written as its own aperture file (``stimuli/bars_order-<run>``)."""
STIMULUS_DESIGNS = ("bars", "multiwidth", "hcp")
"""prfmap-synth's stimulus designs (``SynthConfig.stimulus_design``): ``bars``, eight sweeps of bars of
one width (:attr:`SynthConfig.sweep_widths`); ``multiwidth``, that sequence with bars of an eighth and
then of half the field of view (2.5° and 10° in the default 20° field), two sizes that tell a
compressive pRF from a Gaussian (Kay et al. 2013); ``hcp``, in one run, the three stimuli of the HCP 7T
retinotopy (Benson et al. 2018): a 90° wedge turning counter-clockwise, a ring expanding, then the bar
sweeps, whose rings and wedges reach a pRF's surround without its centre."""
WEDGE_DEG = 90.0
"""Angular width of the ``hcp`` design's wedge (the HCP 7T retinotopy's)."""
CYCLES = 2
"""Cycles of the ``hcp`` design's wedge and of its ring."""
MODEL_FIELDS = ("prf_models", "css_exponent", "dog_surround_scale", "dog_surround_ratio")
"""The settings of the pRF models (left out of ``truth.json`` for the default, Gaussian-only data,
whose files stay byte-identical to those written before the option existed)."""
CF_ATLAS = "benson14"
"""The atlas whose areas name the connective fields' source and targets (on fsaverage5)."""
CF_AREAS = ATLASES[CF_ATLAS].areas
"""The areas ``SynthConfig.cf_source`` and ``cf_targets`` may name."""
CF_FIELDS = ("cf_source", "cf_targets", "cf_sizes", "cf_null_fraction", "rest", "cf_source_smoothness")
"""The connective-field settings (left out of ``truth.json`` without ``cf_source``, so that
datasets without connective fields stay byte-identical to those written before the option)."""


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
    prf_models : tuple of str
        The models of the pRF units (:data:`PRF_MODELS`; stored in that order, without
        repeats): each pRF unit follows one of them, drawn uniformly at random. ``gauss``: the
        aperture's overlap ``g`` with a unit-integral Gaussian; ``css``: ``g ** n`` (compressive
        spatial summation, Kay et al. 2013); ``dog``: ``g(sigma) - ratio * g(sigma_surround)``
        (difference of unit-integral Gaussians, Zuiderbaan et al. 2012); then the amplitude and
        the HRF.
    css_exponent : tuple of float
        Range ``(low, high)`` of the uniform draw of a CSS unit's exponent ``n``, in (0, 1].
    dog_surround_scale : tuple of float
        Range of a DoG unit's ``sigma_surround / sigma`` (> 1).
    dog_surround_ratio : tuple of float
        Range of a DoG unit's surround integral over its centre's (``amplitude_surround /
        amplitude``), in [0, 1).
    bar_widths : tuple of float
        Bar widths in degrees, each positive and at most ``fov_deg``: the eight-sweep sequence
        (blank periods included) is repeated once per width, in the order given, so runs get
        longer by that factor. Empty (the default; also what a single width equal to
        :attr:`bar_width` becomes): the design's widths (:attr:`sweep_widths`).
    stimulus_design : str
        One of :data:`STIMULUS_DESIGNS`.
    sweep_order : str
        One of :data:`SWEEP_ORDERS`.
    voxel_mm : float
        T1w only: the voxels' side in millimetres (default 3). The head keeps its size in millimetres,
        so smaller voxels give more of them and each spans less of the retinotopic map.
    cf_source : str or None
        fsaverage5 only: a benson14 area (:data:`CF_AREAS`) whose vertices are the source of
        connective-field targets (:mod:`prfmap.synth.connective`); None (the default): none.
    cf_targets : tuple of str
        The benson14 areas whose vertices get connective-field time series (not the source).
    cf_sizes : tuple of float
        Range ``(low, high)`` in mm of the uniform draw of each target's connective-field size.
    cf_null_fraction : float
        Share of the target vertices that carry noise only (no connective field).
    rest : bool
        Resting-state-like runs (needs ``cf_source``): task ``rest`` (unless ``task`` is set to
        another label), no events or stimulus; the source carries a spatially smooth random
        field, every vertex outside the source and targets noise only.
    cf_source_smoothness : float
        With ``rest``: the standard deviation (mm, along the source's surface) of the Gaussian that
        smooths the source's random field.
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
    prf_models: tuple[str, ...] = ("gauss",)
    css_exponent: tuple[float, float] = (0.2, 0.5)
    dog_surround_scale: tuple[float, float] = (2.0, 4.0)
    dog_surround_ratio: tuple[float, float] = (0.1, 0.3)
    bar_widths: tuple[float, ...] = ()
    stimulus_design: str = "bars"
    sweep_order: str = "same"
    voxel_mm: float = 3.0
    cf_source: str | None = None
    cf_targets: tuple[str, ...] = ("V2", "V3")
    cf_sizes: tuple[float, float] = (1.5, 6.0)
    cf_null_fraction: float = 0.2
    rest: bool = False
    cf_source_smoothness: float = 2.0

    n_pixels: int = 0
    n_steps: int = 0
    n_blank: int = 0
    bar_width_deg: float = 0.0

    def __post_init__(self) -> None:
        for name, choices in (
            ("slice_timing", SLICE_TIMINGS),
            ("noise_model", NOISE_MODELS),
            ("sweep_order", SWEEP_ORDERS),
        ):
            if getattr(self, name) not in choices:
                raise ValueError(f"{name} must be one of {choices}, got {getattr(self, name)!r}")
        for name in ("slice_time_ref", "noise_fraction"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name} must lie in [0, 1], got {getattr(self, name)}")
        if not 0 <= self.noise_runs <= self.runs:
            raise ValueError(f"noise_runs must lie in [0, runs], got {self.noise_runs}")
        if not 0 <= self.hrf_dispersion_jitter < 1 or self.hrf_delay_jitter < 0 or self.drift < 0:
            raise ValueError("hrf_delay_jitter and drift must be >= 0, hrf_dispersion_jitter in [0, 1)")
        if HRF_DELAY + self.hrf_delay_shift - self.hrf_delay_jitter <= 1.0:
            raise ValueError("hrf_delay_shift - hrf_delay_jitter must leave every HRF delay above 1 s")
        models = (self.prf_models,) if isinstance(self.prf_models, str) else tuple(self.prf_models)
        unknown = [m for m in models if m not in PRF_MODELS]
        if not models or unknown:
            raise ValueError(f"prf_models must be one or more of {PRF_MODELS}, got {self.prf_models!r}")
        object.__setattr__(self, "prf_models", tuple(m for m in PRF_MODELS if m in models))
        for name, valid, bounds in (
            ("css_exponent", lambda lo, hi: 0 < lo and hi <= 1, "0 < low <= high <= 1"),
            ("dog_surround_scale", lambda lo, hi: lo > 1 and np.isfinite(hi), "1 < low <= high"),
            ("dog_surround_ratio", lambda lo, hi: 0 <= lo and hi < 1, "0 <= low <= high < 1"),
        ):
            value = tuple(float(v) for v in getattr(self, name))
            if len(value) != 2 or not value[0] <= value[1] or not valid(*value):
                raise ValueError(
                    f"{name} must be a range (low, high) with {bounds}, got {getattr(self, name)!r}"
                )
            object.__setattr__(self, name, value)
        object.__setattr__(self, "bar_widths", self._checked_bar_widths())
        if self.stimulus_design not in STIMULUS_DESIGNS:
            raise ValueError(
                f"stimulus_design must be one of {STIMULUS_DESIGNS}, got {self.stimulus_design!r}"
            )
        self._check_connective_fields()

    def _check_connective_fields(self) -> None:
        """Validate the connective-field settings; ``cf_targets`` and ``cf_sizes`` become tuples."""
        targets = (self.cf_targets,) if isinstance(self.cf_targets, str) else tuple(self.cf_targets)
        object.__setattr__(self, "cf_targets", targets)
        sizes = tuple(float(v) for v in self.cf_sizes)
        object.__setattr__(self, "cf_sizes", sizes)
        if self.rest and self.cf_source is None:
            raise ValueError("rest needs cf_source: resting-state runs carry connective fields only")
        if self.rest and self.task == "prf":
            object.__setattr__(self, "task", "rest")
        if self.cf_source is None:
            return
        if self.space != "fsaverage5":
            raise ValueError(f"cf_source needs space fsaverage5 (the {CF_ATLAS} areas), not {self.space}")
        unknown = [a for a in (self.cf_source, *targets) if a not in CF_AREAS]
        if unknown:
            raise ValueError(f"{unknown[0]!r} is not an area of the {CF_ATLAS} atlas ({', '.join(CF_AREAS)})")
        if not targets or self.cf_source in targets:
            raise ValueError(f"cf_targets must name one or more areas other than the source {self.cf_source}")
        if len(sizes) != 2 or not 0 < sizes[0] <= sizes[1] or not np.isfinite(sizes[1]):
            raise ValueError(f"cf_sizes must be a range (low, high) in mm with 0 < low <= high, got {sizes}")
        if not 0 <= self.cf_null_fraction <= 1:
            raise ValueError(f"cf_null_fraction must lie in [0, 1], got {self.cf_null_fraction}")
        if not self.cf_source_smoothness > 0:
            raise ValueError(f"cf_source_smoothness must be > 0 mm, got {self.cf_source_smoothness}")

    def _checked_bar_widths(self) -> tuple[float, ...]:
        """``bar_widths`` as floats, validated; a single default width becomes ``()`` (the default)."""
        widths = (self.bar_widths,) if np.isscalar(self.bar_widths) else tuple(self.bar_widths)
        try:
            widths = tuple(float(w) for w in widths)
        except (TypeError, ValueError):
            raise ValueError(f"bar_widths must be numbers, got {self.bar_widths!r}") from None
        bad = [w for w in widths if not 0 < w <= self.fov_deg]
        if bad:
            raise ValueError(
                f"bar_widths must each lie in (0, fov_deg = {self.fov_deg:g}] degrees, got {bad[0]:g}"
            )
        return () if widths == (self.bar_width,) else widths

    @property
    def connective(self) -> bool:
        """Whether the dataset has connective-field targets (``cf_source`` set)."""
        return self.cf_source is not None

    @property
    def beyond_gauss(self) -> bool:
        """Whether any pRF unit follows a model other than the Gaussian (the extra truth maps)."""
        return self.prf_models != ("gauss",)

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

    @property
    def stimulus_name(self) -> str:
        """The stimulus file's name (``stimuli/<name>.nii.gz``) and the events' ``trial_type``."""
        return "hcp" if self.stimulus_design == "hcp" else "bars"

    def run_stimulus_name(self, run: int) -> str:
        """The stimulus file of run ``run`` (from 1): :attr:`stimulus_name`, or its own sweep order's."""
        if self.sweep_order == "same" or run == 1:
            return self.stimulus_name
        return f"{self.stimulus_name}_order-{run}"

    @property
    def sweep_widths(self) -> tuple[float, ...]:
        """The bar width of each repetition of the eight-sweep sequence, degrees.

        ``bar_widths`` where given, else an eighth and half the field of view for the ``multiwidth``
        design, else :attr:`bar_width`.
        """
        if self.bar_widths:
            return self.bar_widths
        if self.stimulus_design == "multiwidth":
            return (self.fov_deg / 8, self.fov_deg / 2)
        return (self.bar_width,)


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
