"""Synthetic BIDS + fMRIPrep datasets with known pRFs: the demo's data, the tests' data, and a
validation tool.

The forward model is plain numpy, independent of the engine: an isotropic Gaussian pRF's overlap
with a bar-sweep aperture, convolved with each unit's own SPM two-gamma HRF (delay and dispersion
vary across units) integrated over each TR and read at the unit's sample time (its slice's
acquisition time, or the slice-timing correction's reference, as the sidecars say), plus slow
drifts and noise (AR(1) and aliased physiological cycles; :mod:`prfmap.synth_model`).
Units without a pRF (``noise`` in the ground truth) carry the drifts and noise alone.
``CLEAN`` gives the earlier, idealised data: one canonical HRF, every volume sampled mid-TR,
AR(1) noise only, every unit of the mapped region with a pRF.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
from nilearn import datasets
from nilearn.glm.first_level.hemodynamic_models import spm_hrf

from prfmap import __version__
from prfmap.io.atomic import atomic_path, write_json_atomic, write_text_atomic
from prfmap.io.geometry import CiftiGeometry, GiftiGeometry, UnitGeometry, VolumeGeometry
from prfmap.synth_model import (
    AR1,
    HRF_DELAY,
    NOISE_MODELS,
    Acquisition,
    ar1_noise,
    convolve_units,
    drift,
    interleaved_slice_timing,
    realistic_noise,
    slice_of,
    unit_kernels,
    unit_noise_levels,
)
from prfmap.synth_surfaces import fslr_cortex, native_hemispheres, prf_region, write_native_anat

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
TRUTH_LABELS = (
    "x",
    "y",
    "sigma",
    "amplitude",
    "baseline",
    "polarangle",
    "eccentricity",
    "hrfdelay",
    "hrfdispersion",
    "sampletime",
)
TRUTH_MASKS = {"mask": "prf", "noise": "noise"}
"""Ground-truth masks (``load_truth`` key → ``desc`` label): units with a pRF; units with signal
but no pRF (drifts and noise only)."""
FMRIPREP_BIDSIGNORE = (
    "*.html",
    "logs/",
    "figures/",
    "*_xfm.*",
    "*.surf.gii",
    "*_boldref.nii.gz",
    "*_bold.func.gii",
    "*_mixing.tsv",
    "*_AROMAnoiseICs.csv",
    "*_timeseries.tsv",
    "*_bold.dtseries.nii",
    "*hemi-*bold.json",
    "*den-*bold.json",
    "*.shape.gii",
)
"""fMRIPrep's own .bidsignore (what the specification does not cover yet), plus the surface and
CIFTI series and the fsnative surface shapes (sulcal depth) the current validator does not know
either, with their sidecars."""
TRUTH_BIDSIGNORE = ("*_boldmap.*", "*_mask.func.gii", "truth.json")
RAW_BOLD_SHAPE = (2, 2)
"""Voxels per slice of the raw BOLD stand-ins (one plane per acquisition slice, so that
``SliceTiming`` matches them): the raw dataset is valid BIDS; prfmap reads derivatives."""
SPHERE_URI = (
    "https://templateflow.s3.amazonaws.com/tpl-fsaverage/tpl-fsaverage_hemi-{}_den-10k_sphere.surf.gii"
)
# bar directions (degrees, direction of motion; 0 = rightwards, 90 = upwards)
BAR_DIRECTIONS = (0, 225, 90, 315, 180, 45, 270, 135)


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


@dataclass
class Layout:
    """Units of one participant, the pRFs among them and how the acquisition samples them.

    Attributes
    ----------
    geometry : UnitGeometry
        How units lie in the output format.
    params : dict
        Label → (units,) ground truth (NaN where no pRF): x, y, sigma, amplitude and the HRF's
        ``hrf_delay`` (s) and ``hrf_dispersion``.
    prf : ndarray of bool
        Units with a pRF.
    empty : ndarray of bool
        Units with no signal at all (medial wall), written as zeros.
    s0 : ndarray
        Mean raw intensity of each unit.
    slices : ndarray of int
        The acquisition slice of each unit (0 = lowest).
    anat : dict, optional
        fsnative: hemisphere → the participant's surfaces (``synth_surfaces.NativeHemisphere``).
    """

    geometry: UnitGeometry
    params: dict[str, np.ndarray]
    prf: np.ndarray
    empty: np.ndarray
    s0: np.ndarray
    slices: np.ndarray
    anat: dict | None = None

    @property
    def noise(self) -> np.ndarray:
        """Units with signal but no pRF: drifts and noise only."""
        return ~self.prf & ~self.empty

    @property
    def n_slices(self) -> int:
        """Slices of the simulated acquisition."""
        return int(self.slices.max()) + 1 if self.slices.size else 1


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


def pixel_coordinates(fov_deg: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Visual-field ``(x, y)`` of the pixel centres, each (n, n); row 0 = top (y = +fov/2)."""
    x = np.linspace(-fov_deg / 2, fov_deg / 2, n)
    return np.meshgrid(x, x[::-1])


def bar_apertures(config: SynthConfig) -> np.ndarray:
    """Eight bar sweeps inside a circular aperture, with blank periods between sweep pairs.

    Returns
    -------
    ndarray
        float32 (frames, rows, cols) of 0 and 1; row 0 = top.
    """
    n, fov = config.aperture_px, config.fov_deg
    x, y = pixel_coordinates(fov, n)
    radius = fov / 2
    inside = np.hypot(x, y) <= radius + 1e-9
    width = config.bar_width
    positions = np.linspace(-radius, radius, config.steps_per_sweep)
    blank = np.zeros((config.blank_frames, n, n), np.float32)
    frames = [blank]
    for i, direction in enumerate(BAR_DIRECTIONS):
        theta = np.radians(direction)
        along = x * np.cos(theta) + y * np.sin(theta)
        for s in positions:
            frames.append(((np.abs(along - s) <= width / 2) & inside)[None].astype(np.float32))
        if i % 2 == 1:
            frames.append(blank)
    return np.concatenate(frames, axis=0)


def hrf_kernel(tr: float, n_taps: int | None = None, sample_time: float | None = None) -> np.ndarray:
    """Response of a volume to a unit stimulus shown for one TR, m TRs earlier, computed
    numerically from nilearn's canonical SPM HRF: the independent check of
    :func:`prfmap.synth_model.unit_kernels` (and of the engine's kernels).

    nilearn's SPM HRF (unit sum) sampled at ``tr / 50`` is convolved with a one-TR boxcar on
    that fine grid and read at ``m tr + sample_time``.

    Parameters
    ----------
    tr : float
        Repetition time, seconds.
    n_taps : int, optional
        Kernel length in TRs.
    sample_time : float, optional
        When within its TR a volume samples the response (default TR/2).

    Returns
    -------
    ndarray
        (n_taps,) kernel; a sustained stimulus gives a response of 1.
    """
    hrf = spm_hrf(tr, oversampling=HRF_OVERSAMPLING)
    n_taps = n_taps or int(np.ceil(len(hrf) / HRF_OVERSAMPLING)) + 2
    offset = int(round((tr / 2 if sample_time is None else sample_time) / tr * HRF_OVERSAMPLING))
    boxcar = np.zeros((n_taps + 1) * HRF_OVERSAMPLING)
    boxcar[:HRF_OVERSAMPLING] = 1.0
    fine = np.convolve(boxcar, hrf)[: len(boxcar)]
    return fine[offset::HRF_OVERSAMPLING][:n_taps]


def gaussian_overlap(
    design: np.ndarray, fov_deg: float, x: np.ndarray, y: np.ndarray, sigma: np.ndarray
) -> np.ndarray:
    """Fraction of each Gaussian pRF's volume covered by the aperture, per frame.

    Returns
    -------
    ndarray
        (units, frames), in [0, 1].
    """
    n = design.shape[1]
    px, py = pixel_coordinates(fov_deg, n)
    area = (fov_deg / (n - 1)) ** 2
    flat = design.reshape(design.shape[0], -1).astype(np.float64)
    out = np.empty((len(x), design.shape[0]))
    for start in range(0, len(x), 512):
        sl = slice(start, start + 512)
        d2 = (px.ravel()[None] - x[sl, None]) ** 2 + (py.ravel()[None] - y[sl, None]) ** 2
        g = np.exp(-d2 / (2 * sigma[sl, None] ** 2)) * area / (2 * np.pi * sigma[sl, None] ** 2)
        out[sl] = g @ flat.T
    return out


def retinotopy(
    u: np.ndarray, v: np.ndarray, hemi_sign: np.ndarray, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Log-polar map from cortical coordinates to pRF centres and sizes.

    Parameters
    ----------
    u : ndarray
        Position along the calcarine axis, 0 (pole, fovea) to 1 (periphery).
    v : ndarray
        Position across it, -1 (ventral bank, upper vertical meridian) to 1 (dorsal, lower).
    hemi_sign : ndarray
        +1 for the left hemisphere (right visual field), -1 for the right.

    Returns
    -------
    dict
        x, y, sigma, amplitude (degrees; amplitude in percent signal change).
    """
    e0, emax = 0.75, 9.0
    ecc = e0 * (np.exp(np.clip(u, 0, 1) * np.log1p(emax / e0)) - 1) + 0.2
    theta = np.radians(-85.0 * np.clip(v, -1, 1))
    sigma = (0.4 + 0.12 * ecc) * np.exp(rng.normal(0, 0.1, len(u)))
    return {
        "x": hemi_sign * ecc * np.cos(theta),
        "y": ecc * np.sin(theta),
        "sigma": sigma,
        "amplitude": rng.uniform(2.0, 4.0, len(u)),
    }


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _occipital_coordinates(pial: np.ndarray, sphere: np.ndarray, sign: float):
    """Arc coordinates (degrees) around the occipital pole: along the calcarine, and across."""
    s = _unit(sphere)

    def near(point):
        return int(np.argmin(np.linalg.norm(pial - np.asarray(point), axis=1)))

    pole, anterior, dorsal = near([sign * 10, -104, 0]), near([sign * 6, -70, 6]), near([sign * 6, -90, 25])
    c = s[pole]
    e1 = _unit(s[anterior] - (s[anterior] @ c) * c)
    e2 = np.cross(c, e1)
    if (s[dorsal] - c) @ e2 < 0:
        e2 = -e2
    d = np.degrees(np.arccos(np.clip(s @ c, -1, 1)))
    t = s - (s @ c)[:, None] * c
    norm = np.maximum(np.linalg.norm(t, axis=1), 1e-12)
    return d * (t @ e1) / norm, d * (t @ e2) / norm


def _fsaverage5_layout(rng: np.random.Generator) -> tuple[UnitGeometry, dict, np.ndarray, np.ndarray]:
    mesh = datasets.load_fsaverage("fsaverage5")
    return _gifti_layout(
        [
            (
                np.asarray(mesh["pial"].parts[part].coordinates),
                np.asarray(mesh["sphere"].parts[part].coordinates),
            )
            for part in ("left", "right")
        ]
    )


def _gifti_layout(
    parts: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[UnitGeometry, dict, np.ndarray, np.ndarray]:
    """pRFs on the occipital pole of left and right (pial, fsaverage-registered sphere) meshes."""
    u_all, v_all, sign_all, prf_all, empty_all, z_all = [], [], [], [], [], []
    for (pial, sphere), sign in zip(parts, (-1.0, 1.0), strict=True):
        u, v = _occipital_coordinates(pial, sphere, sign)
        medial = (
            (sign * pial[:, 0] < 8)
            & (pial[:, 1] > -45)
            & (pial[:, 1] < 25)
            & (pial[:, 2] > -15)
            & (pial[:, 2] < 30)
        )
        prf = prf_region(u, v, pial, medial)
        u_all.append((u + 2) / 40)
        v_all.append(v / 20)
        sign_all.append(np.full(len(u), -sign))
        prf_all.append(prf)
        empty_all.append(medial)
        z_all.append(pial[:, 2])
    geom = GiftiGeometry(hemis={"L": len(u_all[0]), "R": len(u_all[1])})
    coords = {
        "u": np.concatenate(u_all),
        "v": np.concatenate(v_all),
        "sign": np.concatenate(sign_all),
        "z": np.concatenate(z_all),
    }
    return geom, coords, np.concatenate(prf_all), np.concatenate(empty_all)


def _fslr_layout(small: bool) -> tuple[UnitGeometry, dict, np.ndarray, np.ndarray]:
    n_vertices = 32492
    n_prf = 150 if small else 450
    axes, coords, prf = [], [], []
    for name, vertices, c, mask in fslr_cortex(small, n_prf, _occipital_coordinates):
        axes.append(nib.cifti2.BrainModelAxis.from_surface(vertices, n_vertices, name))
        coords.append(c)
        prf.append(mask)
    n_sub = 40 if small else 31870
    affine = np.array([[-2.0, 0, 0, 90], [0, 2, 0, -126], [0, 0, 2, -72], [0, 0, 0, 1]])
    mask = np.zeros((91, 109, 91), bool)
    mask.reshape(-1)[np.flatnonzero(_box((91, 109, 91), (30, 40, 20), (62, 80, 60)))[:n_sub]] = True
    for name, half in (("thalamus_left", slice(46, 91)), ("thalamus_right", slice(0, 46))):
        part = np.zeros_like(mask)
        part[half] = mask[half]
        if part.any():
            axes.append(nib.cifti2.BrainModelAxis.from_mask(part, name=name, affine=affine))
            n = int(part.sum())
            coords.append({k: np.full(n, np.nan) for k in ("u", "v", "sign")})
            prf.append(np.zeros(n, bool))
    models = axes[0]
    for ax in axes[1:]:
        models = models + ax
    merged = {k: np.concatenate([c[k] for c in coords]) for k in ("u", "v", "sign")}
    prf_all = np.concatenate(prf)
    return CiftiGeometry(brain_models=models), merged, prf_all, np.zeros(len(prf_all), bool)


def _box(shape, lo, hi) -> np.ndarray:
    out = np.zeros(shape, bool)
    out[lo[0] : hi[0], lo[1] : hi[1], lo[2] : hi[2]] = True
    return out


def _volume_layout(small: bool) -> tuple[UnitGeometry, dict, np.ndarray, np.ndarray]:
    shape = (12, 14, 10) if small else (32, 40, 28)
    zooms = 3.0
    affine = np.diag([zooms, zooms, zooms, 1.0])
    affine[:3, 3] = -np.array(shape) * zooms / 2
    ijk = np.indices(shape).reshape(3, -1).T.astype(float)
    centre = (np.array(shape) - 1) / 2
    rel = (ijk - centre) / (np.array(shape) / 2)
    mask = (np.sum(rel**2, axis=1) <= 0.95).reshape(shape)
    inside = rel[mask.ravel()]
    # posterior (low j) fifth, either side of the midline: pRFs, u from the back, v from z
    posterior = inside[:, 1] < -0.45
    side = np.sign(inside[:, 0])
    prf = posterior & (np.abs(inside[:, 0]) > 0.05) & (np.abs(inside[:, 2]) < 0.6)
    coords = {
        "u": (inside[:, 1] + 1) / 0.55,
        "v": inside[:, 2] / 0.6,
        "sign": -side,
        "z": ijk[mask.ravel(), 2],
    }
    header = nib.Nifti1Header()
    header.set_qform(affine, code=1)
    header.set_sform(affine, code=1)
    geom = VolumeGeometry(mask=mask, affine=affine, header=header)
    return geom, coords, prf, np.zeros(len(prf), bool)


def make_layout(config: SynthConfig, rng: np.random.Generator) -> Layout:
    """Units, ground-truth pRFs and HRFs, and acquisition slices of one participant."""
    if config.space == "fsaverage5":
        geom, coords, prf, empty = _fsaverage5_layout(rng)
    elif config.space == "fsLR":
        geom, coords, prf, empty = _fslr_layout(config.small)
    elif config.space == "T1w":
        geom, coords, prf, empty = _volume_layout(config.small)
    elif config.space == "fsnative":
        anat = native_hemispheres(rng)
        geom, coords, prf, empty = _gifti_layout([(anat[h].pial, anat[h].sphere) for h in ("L", "R")])
    else:
        raise ValueError(f"space must be one of {SPACES}, got {config.space!r}")
    n = geom.n_units
    prf = prf & (rng.uniform(size=n) >= config.noise_fraction)
    params = {k: np.full(n, np.nan) for k in ("x", "y", "sigma", "amplitude", "hrf_delay", "hrf_dispersion")}
    jitter = {k: coords[k][prf] + rng.normal(0, 0.01, prf.sum()) for k in ("u", "v")}
    for k, val in retinotopy(jitter["u"], jitter["v"], coords["sign"][prf], rng).items():
        params[k][prf] = val
    d, w = config.hrf_delay_jitter, config.hrf_dispersion_jitter
    params["hrf_delay"][prf] = HRF_DELAY + config.hrf_delay_shift + rng.uniform(-d, d, prf.sum())
    params["hrf_dispersion"][prf] = 1.0 + rng.uniform(-w, w, prf.sum())
    s0 = rng.uniform(600, 1200, n)
    s0[empty] = 0.0
    if "z" in coords:
        n_slices = len(np.unique(coords["z"])) if config.space == "T1w" else SURFACE_SLICES
        slices = slice_of(coords["z"], n_slices)
    else:  # no anatomy (fsLR's block of grayordinates): slices drawn at random
        slices = rng.integers(0, SURFACE_SLICES, n)
    return Layout(geom, params, prf, empty, s0, slices, anat if config.space == "fsnative" else None)


def simulate_run(
    layout: Layout,
    design: np.ndarray,
    config: SynthConfig,
    rng: np.random.Generator,
    respond: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """Raw BOLD of one run and the noise-free percent-signal-change response of each unit.

    Parameters
    ----------
    respond : bool
        False: the run carries drifts and noise only (a run of pure noise), though the response
        it would have had is returned all the same.

    Returns
    -------
    bold : ndarray
        (units, dummy_scans + frames) float32 raw intensities.
    response : ndarray
        (units, frames) noise-free response in percent of S0 (0 where no pRF).
    """
    n_frames = design.shape[0]
    n_units = layout.geometry.n_units
    timing = acquisition_timing(config, layout.n_slices)
    acquisition = Acquisition(config.tr, timing.sample_times(layout.slices))
    response = np.zeros((n_units, n_frames))
    p = layout.params
    idx = np.flatnonzero(layout.prf)
    overlap = gaussian_overlap(design, config.fov_deg, p["x"][idx], p["y"][idx], p["sigma"][idx])
    kernels = unit_kernels(
        config.tr, acquisition.sample_time[idx], p["hrf_delay"][idx], p["hrf_dispersion"][idx]
    )
    response[idx] = p["amplitude"][idx, None] * convolve_units(overlap, kernels)
    n_vol = n_frames + config.dummy_scans
    levels = unit_noise_levels(n_units, config.noise, config.noise_model, rng)
    if config.noise_model == "ar1":
        noise = ar1_noise(levels, n_vol, rng)
    else:
        noise = realistic_noise(levels, acquisition, n_vol, rng, config.noise_model)
    signal = drift(n_units, n_vol, config.drift, rng) + noise
    if respond:
        signal[:, config.dummy_scans :] += response
    if config.dummy_scans:
        signal[:, : config.dummy_scans] += 30.0 * np.exp(-np.arange(config.dummy_scans))
    bold = layout.s0[:, None] * (1 + signal / 100)
    bold[layout.empty] = 0.0
    return bold.astype(np.float32), response


def _confounds(bold: np.ndarray, config: SynthConfig, rng: np.random.Generator) -> str:
    n_vol = bold.shape[1]
    cols = {
        "global_signal": bold.mean(axis=0),
        "csf": 400 + rng.normal(0, 2, n_vol),
        "white_matter": 500 + rng.normal(0, 1, n_vol),
    }
    motion = np.cumsum(rng.normal(0, 0.01, (n_vol, 6)), axis=0)
    for i, name in enumerate(("trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z")):
        cols[name] = motion[:, i]
    fd = np.abs(np.diff(motion, axis=0)).sum(axis=1)
    for d in range(config.dummy_scans):
        cols[f"non_steady_state_outlier{d:02d}"] = (np.arange(n_vol) == d).astype(float)
    lines = ["\t".join([*cols, "framewise_displacement"])]
    for k in range(n_vol):
        row = [f"{cols[c][k]:.6g}" for c in cols]
        lines.append("\t".join([*row, "n/a" if k == 0 else f"{fd[k - 1]:.6g}"]))
    return "\n".join(lines) + "\n"


def _bold_name(sub: str, config: SynthConfig, run: int) -> str:
    return f"sub-{sub}_task-{config.task}_run-{run}"


def _write_bold(
    layout: Layout,
    bold: np.ndarray,
    config: SynthConfig,
    func: Path,
    stem: str,
    rng: np.random.Generator,
) -> list[Path]:
    geom = layout.geometry
    timing = acquisition_timing(config, layout.n_slices)
    meta = {"RepetitionTime": config.tr, **timing.derivative_sidecar()}
    if isinstance(geom, GiftiGeometry):
        paths = geom.write_series(
            bold, lambda h: func / f"{stem}_hemi-{h}_space-{config.space}_bold.func.gii", config.tr
        )
        for h in "LR":
            write_json_atomic(func / f"{stem}_hemi-{h}_space-{config.space}_bold.json", meta)
        return paths
    if isinstance(geom, CiftiGeometry):
        paths = geom.write_series(
            bold, lambda h: func / f"{stem}_space-fsLR_den-91k_bold.dtseries.nii", config.tr
        )
        write_json_atomic(func / f"{stem}_space-fsLR_den-91k_bold.json", meta)
        return paths
    assert isinstance(geom, VolumeGeometry)
    vol = rng.normal(20, 2, (*geom.mask.shape, bold.shape[1])).astype(np.float32)
    vol[geom.mask] = bold
    img = nib.Nifti1Image(vol, geom.affine)
    img.header.set_xyzt_units("mm", "sec")
    img.header.set_zooms((*img.header.get_zooms()[:3], config.tr))
    path = func / f"{stem}_space-T1w_desc-preproc_bold.nii.gz"
    with atomic_path(path) as tmp:
        nib.save(img, tmp)
    mask = nib.Nifti1Image(geom.mask.astype(np.uint8), geom.affine)
    mask.header.set_xyzt_units("mm")
    with atomic_path(func / f"{stem}_space-T1w_desc-brain_mask.nii.gz") as tmp:
        nib.save(mask, tmp)
    write_json_atomic(func / f"{stem}_space-T1w_desc-preproc_bold.json", meta)
    return [path]


def _truth_entities(sub: str, config: SynthConfig) -> tuple[str, str]:
    space = {
        "fsaverage5": "space-fsaverage5",
        "fsLR": "space-fsLR_den-91k",
        "T1w": "space-T1w",
        "fsnative": "space-fsnative",
    }[config.space]
    return f"sub-{sub}_task-{config.task}", space


def _truth_path(func: Path, prefix: str, space: str, tail: str) -> Callable[[str | None], Path]:
    def path_for(hemi: str | None) -> Path:
        hemi_part = f"hemi-{hemi}_" if hemi else ""
        ext = ".func.gii" if hemi else ".nii.gz"
        return func / f"{prefix}_{hemi_part}{space}_{tail}{ext}"

    return path_for


def _write_truth(
    layout: Layout, truth: dict[str, np.ndarray], config: SynthConfig, func: Path, sub: str
) -> list[Path]:
    geom = layout.geometry
    prefix, space = _truth_entities(sub, config)
    meta = {"Description": "prfmap-synth ground truth"}
    masks = {"mask": layout.prf.astype(np.float32), "noise": layout.noise.astype(np.float32)}
    if isinstance(geom, CiftiGeometry):
        path = func / f"{prefix}_{space}_model-gauss_boldmap.dscalar.nii"
        return geom.write_maps({**truth, **masks}, lambda h: path, meta)
    written: list[Path] = []
    for label, values in truth.items():
        path_for = _truth_path(func, prefix, space, f"model-gauss_desc-{label}_boldmap")
        written += geom.write_maps({label: values}, path_for, meta)
    for key, desc in TRUTH_MASKS.items():
        written += geom.write_maps({key: masks[key]}, _truth_path(func, prefix, space, f"desc-{desc}_mask"))
    return written


def make_synthetic_dataset(out_dir: str | os.PathLike, config: SynthConfig | None = None) -> Path:
    """Write a raw BIDS dataset, fMRIPrep-style derivatives and the ground truth.

    Layout under ``out_dir``: ``dataset_description.json``, ``participants.tsv``, ``README``,
    ``sub-XX/func/*_events.tsv`` (``stim_file``) and ``*_bold.json`` (RepetitionTime,
    TaskName), ``stimuli/bars.nii.gz`` + ``bars.json`` (FieldOfViewDeg), ``derivatives/fmriprep``
    (BOLD, masks, confounds) and ``derivatives/prfsynth`` (ground truth maps in the BOLD's
    format: x, y, sigma, amplitude, baseline, polarangle, eccentricity and the pRF mask).

    The ground truth's ``amplitude`` and ``baseline`` are in percent signal change relative to
    each unit's noise-free run mean: the BOLD is ``baseline + amplitude * (HRF * overlap)`` where
    ``overlap`` is the fraction of the Gaussian's volume inside the aperture and the HRF has unit
    integral.

    Parameters
    ----------
    out_dir : path-like
        Destination (created; existing files are overwritten).
    config : SynthConfig, optional
        Settings; defaults give the demo dataset.

    Returns
    -------
    pathlib.Path
        ``out_dir``.
    """
    config = config or SynthConfig()
    if config.space not in SPACES:
        raise ValueError(f"space must be one of {SPACES}, got {config.space!r}")
    root = Path(out_dir)
    rng = np.random.default_rng(config.seed)
    design = bar_apertures(config)
    _write_raw_top(root, config, design)
    fmriprep = root / "derivatives" / "fmriprep"
    truth_dir = root / "derivatives" / "prfsynth"
    write_json_atomic(
        fmriprep / "dataset_description.json",
        _deriv_description(
            "fMRIPrep-like (synthetic)",
            "Synthetic stand-in for fMRIPrep outputs, written by prfmap-synth",
            root,
        ),
    )
    write_json_atomic(
        truth_dir / "dataset_description.json",
        _deriv_description(
            "prfsynth ground truth", "Ground-truth pRF parameters of the synthetic dataset", root
        ),
    )
    write_json_atomic(truth_dir / "truth.json", _truth_description(config))
    for s in range(1, config.subjects + 1):
        sub = f"{s:02d}"
        layout = make_layout(config, rng)
        if layout.anat is not None:
            write_native_anat(fmriprep / f"sub-{sub}" / "anat", sub, layout.anat)
        raw_func = root / f"sub-{sub}" / "func"
        der_func = fmriprep / f"sub-{sub}" / "func"
        mean_response = None
        for run in range(1, config.runs + 1):
            stem = _bold_name(sub, config, run)
            respond = run <= config.runs - config.noise_runs
            bold, response = simulate_run(layout, design, config, rng, respond=respond)
            mean_response = response
            timing = acquisition_timing(config, layout.n_slices)
            _write_raw_run(raw_func, stem, config, design.shape[0], timing)
            _write_raw_bold(raw_func / f"{stem}_bold.nii.gz", config, bold.shape[1], layout.n_slices, rng)
            _write_bold(layout, bold, config, der_func, stem, rng)
            write_text_atomic(
                der_func / f"{stem}_desc-confounds_timeseries.tsv", _confounds(bold, config, rng)
            )
        assert mean_response is not None
        _write_truth(
            layout, _truth_maps(layout, mean_response, config), config, truth_dir / f"sub-{sub}" / "func", sub
        )
        _write_spatial_references(layout, fmriprep, sub, truth_dir / f"sub-{sub}" / "func")
    write_text_atomic(fmriprep / ".bidsignore", "\n".join(FMRIPREP_BIDSIGNORE) + "\n")
    write_text_atomic(truth_dir / ".bidsignore", "\n".join(TRUTH_BIDSIGNORE) + "\n")
    return root


def _truth_description(config: SynthConfig) -> dict[str, Any]:
    """``truth.json``: the settings, units and forward model of the ground truth."""
    return {
        "Settings": asdict(config),
        "Model": "gauss",
        "Units": {
            "x": "deg",
            "y": "deg",
            "sigma": "deg",
            "amplitude": "percent",
            "baseline": "percent",
            "polarangle": "deg",
            "eccentricity": "deg",
            "hrfdelay": "s",
            "hrfdispersion": "1",
            "sampletime": "s",
        },
        "ForwardModel": (
            "bold = S0 * (1 + (response + drift + noise) / 100); response = amplitude * "
            "(HRF * overlap)(t), the HRF integrated over each TR and read at the unit's sample "
            "time (sampletime: its slice's acquisition time, or the slice-timing correction's "
            "StartTime); overlap = fraction of the Gaussian's volume inside the aperture; HRF = "
            "SPM two-gamma of unit integral with peak delay hrfdelay (undershoot delay moved "
            "alike) and peak dispersion hrfdispersion; amplitude and baseline stored relative to "
            "the noise-free run mean; noise units (desc-noise_mask) carry drift and noise only"
        ),
        "NoiseModel": config.noise_model,
        "NoiseAR1": AR1,
        "PolarAngleConvention": "atan2(y, x), 0 = right horizontal meridian, counter-clockwise",
    }


def _truth_maps(layout: Layout, response: np.ndarray, config: SynthConfig) -> dict[str, np.ndarray]:
    p = layout.params
    scale = 1.0 / (1.0 + response.mean(axis=1) / 100)
    timing = acquisition_timing(config, layout.n_slices)
    signal = ~layout.empty
    truth = {
        "x": p["x"],
        "y": p["y"],
        "sigma": p["sigma"],
        "amplitude": p["amplitude"] * scale,
        "baseline": np.where(layout.prf, 100 * (scale - 1), np.nan),
        "polarangle": np.degrees(np.arctan2(p["y"], p["x"])),
        "eccentricity": np.hypot(p["x"], p["y"]),
        "hrfdelay": p["hrf_delay"],
        "hrfdispersion": p["hrf_dispersion"],
        "sampletime": np.where(signal, timing.sample_times(layout.slices), np.nan),
    }
    return {k: np.asarray(v, dtype=np.float32) for k, v in truth.items()}


def _deriv_description(name: str, description: str, root: Path) -> dict:
    return {
        "Name": name,
        "BIDSVersion": "1.9.0",
        "DatasetType": "derivative",
        "GeneratedBy": [{"Name": "prfmap-synth", "Version": __version__, "Description": description}],
        "SourceDatasets": [{"URL": "bids:raw:"}],
        "DatasetLinks": {"raw": "../.."},
    }


def _write_raw_top(root: Path, config: SynthConfig, design: np.ndarray) -> None:
    write_json_atomic(
        root / "dataset_description.json",
        {
            "Name": "prfmap synthetic retinotopy dataset",
            "BIDSVersion": "1.9.0",
            "DatasetType": "raw",
            "GeneratedBy": [{"Name": "prfmap-synth", "Version": __version__}],
            "License": "CC0",
        },
    )
    rows = ["participant_id\tage\tsex"] + [f"sub-{s:02d}\tn/a\tn/a" for s in range(1, config.subjects + 1)]
    write_text_atomic(root / "participants.tsv", "\n".join(rows) + "\n")
    write_text_atomic(
        root / "README",
        (
            "Synthetic pRF mapping dataset written by prfmap-synth. Bar sweeps (stimuli/bars.nii.gz),"
            " preprocessed BOLD in derivatives/fmriprep (synthetic, not made by fMRIPrep) and the "
            "ground truth in derivatives/prfsynth.\n"
        ),
    )
    stim = np.moveaxis(design, 0, -1)[:, :, None, :].astype(np.uint8)
    img = nib.Nifti1Image(stim, np.eye(4))
    with atomic_path(root / "stimuli" / "bars.nii.gz") as tmp:
        nib.save(img, tmp)
    write_json_atomic(
        root / "stimuli" / "bars.json",
        {
            "FieldOfViewDeg": config.fov_deg,
            "RepetitionTime": config.tr,
            "Description": (
                "Bar apertures: axis 0 rows top to bottom, axis 1 columns left to "
                "right, axis 2 singleton, axis 3 frames (one per TR); 1 = stimulus"
            ),
        },
    )
    write_json_atomic(
        root / f"task-{config.task}_events.json",
        {
            "stim_file": {"Description": "Aperture file under stimuli/ shown during the run"},
        },
    )


def _write_raw_run(func: Path, stem: str, config: SynthConfig, n_frames: int, timing: Timing) -> None:
    onset = config.dummy_scans * config.tr
    write_text_atomic(
        func / f"{stem}_events.tsv",
        f"onset\tduration\ttrial_type\tstim_file\n{onset:g}\t{n_frames * config.tr:g}\tbars\tbars.nii.gz\n",
    )
    meta: dict[str, Any] = {"RepetitionTime": config.tr, "TaskName": config.task}
    if timing.slice_timing is not None:
        meta["SliceTiming"] = [float(t) for t in timing.slice_timing]
    write_json_atomic(func / f"{stem}_bold.json", meta)


def _write_raw_bold(
    path: Path, config: SynthConfig, n_volumes: int, n_slices: int, rng: np.random.Generator
) -> None:
    """A raw BOLD stand-in of a few voxels per slice with the run's volumes and TR (prfmap reads
    the fMRIPrep-like derivatives, but a BIDS dataset has the raw data its sidecars describe)."""
    shape = (*RAW_BOLD_SHAPE, n_slices)
    data = (1000 + rng.integers(-2, 3, (*shape, n_volumes))).astype(np.int16)
    img = nib.Nifti1Image(data, np.diag([3.0, 3.0, 3.0, 1.0]))
    img.header.set_xyzt_units("mm", "sec")
    img.header.set_zooms((3.0, 3.0, 3.0, config.tr))
    with atomic_path(path) as tmp:
        nib.save(img, tmp)


def _write_spatial_references(layout: Layout, fmriprep: Path, sub: str, truth_func: Path) -> None:
    """``SpatialReference`` in the sidecars that need one (spaces that are not standard
    templates): the fsaverage5 sphere for GIFTI; for T1w, a preprocessed T1w image in ``anat/``
    (the BOLD's grid) that the BOLD, its mask and the ground-truth mask refer to."""
    func = fmriprep / f"sub-{sub}" / "func"
    geom = layout.geometry
    if isinstance(geom, GiftiGeometry):
        for sidecar in sorted(func.glob("*_hemi-*_space-fsaverage5_bold.json")):
            hemi = "L" if "_hemi-L_" in sidecar.name else "R"
            _add_to_json(sidecar, {"SpatialReference": SPHERE_URI.format(hemi)})
        return
    if not isinstance(geom, VolumeGeometry):
        return  # fsLR is a standard template space
    anat = f"sub-{sub}/anat/sub-{sub}_desc-preproc_T1w.nii.gz"
    t1w = nib.Nifti1Image(np.where(geom.mask, 100.0, 10.0).astype(np.float32), geom.affine)
    t1w.header.set_xyzt_units("mm")
    with atomic_path(fmriprep / anat) as tmp:
        nib.save(t1w, tmp)
    _add_to_json(fmriprep / anat.replace(".nii.gz", ".json"), {"SkullStripped": False})
    for sidecar in sorted(func.glob("*_space-T1w_desc-preproc_bold.json")):
        _add_to_json(sidecar, {"SpatialReference": f"bids::{anat}", "SkullStripped": False})
    for mask in sorted(func.glob("*_space-T1w_desc-brain_mask.nii.gz")):
        _add_to_json(
            mask.with_name(mask.name.replace(".nii.gz", ".json")),
            {"SpatialReference": f"bids::{anat}", "Type": "Brain"},
        )
    _add_to_json(
        truth_func.parents[1] / "dataset_description.json",
        {"DatasetLinks": {"raw": "../..", "fmriprep": "../fmriprep"}},
    )
    what = {
        "prf": "voxels with a pRF in the ground truth",
        "noise": "voxels with signal but no pRF (drifts and noise only) in the ground truth",
    }
    for desc, description in what.items():
        for mask in sorted(truth_func.glob(f"*_desc-{desc}_mask.nii.gz")):
            _add_to_json(
                mask.with_name(mask.name.replace(".nii.gz", ".json")),
                {"SpatialReference": f"bids:fmriprep:{anat}", "Description": description},
            )


def _add_to_json(path: Path, content: dict) -> None:
    existing = json.loads(path.read_text()) if path.is_file() else {}
    write_json_atomic(path, {**existing, **content})


def load_truth(root: str | os.PathLike, subject: str = "01") -> dict[str, np.ndarray]:
    """Read a synthetic dataset's ground truth as (units,) arrays in the BOLD's unit order.

    Parameters
    ----------
    root : path-like
        The dataset root (``out_dir`` of :func:`make_synthetic_dataset`).
    subject : str
        Participant label.

    Returns
    -------
    dict
        ``x y sigma amplitude baseline polarangle eccentricity`` (NaN where no pRF), the pRF
        units' HRF ``hrfdelay`` (s) and ``hrfdispersion``, every unit's ``sampletime`` (s within
        the TR; NaN where no signal), and the bool masks ``mask`` (units with a pRF) and ``noise``
        (units with signal but no pRF).
    """
    func = Path(root) / "derivatives" / "prfsynth" / f"sub-{subject}" / "func"
    dscalar = sorted(func.glob("*_boldmap.dscalar.nii"))
    if dscalar:
        img = nib.load(dscalar[0])
        names = list(img.header.get_axis(0).name)
        values = img.get_fdata(dtype=np.float32)
        out = {n: values[i] for i, n in enumerate(names)}
    else:
        out = {label: _read_map(func, f"*_desc-{label}_boldmap") for label in TRUTH_LABELS}
        out.update({key: _read_map(func, f"*_desc-{desc}_mask") for key, desc in TRUTH_MASKS.items()})
    for key in TRUTH_MASKS:
        out[key] = out[key] > 0.5
    return out


def _read_map(func: Path, pattern: str) -> np.ndarray:
    gii = sorted(func.glob(pattern + ".func.gii"))
    if gii:
        by_hemi = {("L" if "hemi-L" in p.name else "R"): p for p in gii}
        return np.concatenate([np.asarray(nib.load(by_hemi[h]).darrays[0].data) for h in ("L", "R")])
    (path,) = sorted(func.glob(pattern + ".nii.gz"))
    brain = func.parents[2] / "fmriprep" / func.parent.name / "func"
    mask_path = sorted(brain.glob("*_desc-brain_mask.nii.gz"))[0]
    mask = np.asanyarray(nib.load(mask_path).dataobj) > 0
    return np.asarray(np.asanyarray(nib.load(path).dataobj)[mask], dtype=np.float32)
