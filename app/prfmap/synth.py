"""Synthetic BIDS + fMRIPrep datasets with known pRFs: the demo's data, the tests' data, and a
validation tool.

The forward model is plain numpy, independent of the engine: an isotropic Gaussian pRF's overlap
with a bar-sweep aperture, convolved with nilearn's SPM HRF sampled 50 times per TR, sampled at
the middle of each TR (fMRIPrep's slice-timing reference), plus a slow drift and AR(1) noise.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
from nilearn import datasets
from nilearn.glm.first_level.hemodynamic_models import spm_hrf

from prfmap import __version__
from prfmap.io.atomic import atomic_path, write_json_atomic, write_text_atomic
from prfmap.io.geometry import CiftiGeometry, GiftiGeometry, UnitGeometry, VolumeGeometry
from prfmap.synth_surfaces import fslr_cortex, native_hemispheres, prf_region, write_native_anat

SPACES = ("fsaverage5", "fsLR", "T1w", "fsnative")
DEFAULT_NOISE = 0.5
HRF_OVERSAMPLING = 50
AR1 = 0.3
TRUTH_LABELS = ("x", "y", "sigma", "amplitude", "baseline", "polarangle", "eccentricity")
FMRIPREP_BIDSIGNORE = (
    "*.html", "logs/", "figures/", "*_xfm.*", "*.surf.gii", "*_boldref.nii.gz",
    "*_bold.func.gii", "*_mixing.tsv", "*_AROMAnoiseICs.csv", "*_timeseries.tsv",
    "*_bold.dtseries.nii", "*hemi-*bold.json", "*den-*bold.json", "*.shape.gii",
)  # fmt: skip
"""fMRIPrep's own .bidsignore (what the specification does not cover yet), plus the surface and
CIFTI series and the fsnative surface shapes (sulcal depth) the current validator does not know
either, with their sidecars."""
TRUTH_BIDSIGNORE = ("*_boldmap.*", "*_mask.func.gii", "truth.json")
RAW_BOLD_SHAPE = (2, 2, 2)
"""Voxels of the raw BOLD stand-ins: the raw dataset is valid BIDS; prfmap reads derivatives."""
SPHERE_URI = "https://templateflow.s3.amazonaws.com/tpl-fsaverage/tpl-fsaverage_hemi-{}_den-10k_sphere.surf.gii"
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

    n_pixels: int = 0
    n_steps: int = 0
    n_blank: int = 0
    bar_width_deg: float = 0.0

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
    """Units of one participant and the pRFs among them.

    Attributes
    ----------
    geometry : UnitGeometry
        How units lie in the output format.
    params : dict
        Label → (units,) ground truth (NaN where no pRF).
    prf : ndarray of bool
        Units with a pRF.
    empty : ndarray of bool
        Units with no signal at all (medial wall), written as zeros.
    s0 : ndarray
        Mean raw intensity of each unit.
    anat : dict, optional
        fsnative: hemisphere → the participant's surfaces (``synth_surfaces.NativeHemisphere``).
    """

    geometry: UnitGeometry
    params: dict[str, np.ndarray]
    prf: np.ndarray
    empty: np.ndarray
    s0: np.ndarray
    anat: dict | None = None


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


def hrf_kernel(tr: float, n_taps: int | None = None) -> np.ndarray:
    """Response of a mid-TR sample to a unit stimulus shown for one TR, m TRs earlier.

    nilearn's SPM HRF (unit sum) sampled at ``tr / 50`` is convolved with a one-TR boxcar on
    that fine grid and read at ``(m + 0.5) tr``.

    Returns
    -------
    ndarray
        (n_taps,) kernel; a sustained stimulus gives a response of 1.
    """
    hrf = spm_hrf(tr, oversampling=HRF_OVERSAMPLING)
    n_taps = n_taps or int(np.ceil(len(hrf) / HRF_OVERSAMPLING)) + 2
    boxcar = np.zeros(n_taps * HRF_OVERSAMPLING)
    boxcar[:HRF_OVERSAMPLING] = 1.0
    fine = np.convolve(boxcar, hrf)[: n_taps * HRF_OVERSAMPLING]
    return fine[HRF_OVERSAMPLING // 2 :: HRF_OVERSAMPLING][:n_taps]


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


def convolve(neural: np.ndarray, kernel: np.ndarray) -> np.ndarray:
    """Causal convolution of (units, frames) with a per-TR kernel, truncated to the frames."""
    n = neural.shape[1]
    out = np.zeros_like(neural)
    for m, k in enumerate(kernel[:n]):
        out[:, m:] += k * neural[:, : n - m]
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

    pole, anterior, dorsal = near([sign * 10, -104, 0]), near([sign * 6, -70, 6]), near(
        [sign * 6, -90, 25]
    )
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
    return _gifti_layout([
        (np.asarray(mesh["pial"].parts[part].coordinates), np.asarray(mesh["sphere"].parts[part].coordinates))
        for part in ("left", "right")
    ])


def _gifti_layout(
    parts: list[tuple[np.ndarray, np.ndarray]],
) -> tuple[UnitGeometry, dict, np.ndarray, np.ndarray]:
    """pRFs on the occipital pole of left and right (pial, fsaverage-registered sphere) meshes."""
    u_all, v_all, sign_all, prf_all, empty_all = [], [], [], [], []
    for (pial, sphere), sign in zip(parts, (-1.0, 1.0), strict=True):
        u, v = _occipital_coordinates(pial, sphere, sign)
        medial = (sign * pial[:, 0] < 8) & (pial[:, 1] > -45) & (pial[:, 1] < 25) & (
            pial[:, 2] > -15
        ) & (pial[:, 2] < 30)
        prf = prf_region(u, v, pial, medial)
        u_all.append((u + 2) / 40)
        v_all.append(v / 20)
        sign_all.append(np.full(len(u), -sign))
        prf_all.append(prf)
        empty_all.append(medial)
    geom = GiftiGeometry(hemis={"L": len(u_all[0]), "R": len(u_all[1])})
    coords = {"u": np.concatenate(u_all), "v": np.concatenate(v_all),
              "sign": np.concatenate(sign_all)}
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
    coords = {"u": (inside[:, 1] + 1) / 0.55, "v": inside[:, 2] / 0.6, "sign": -side}
    header = nib.Nifti1Header()
    header.set_qform(affine, code=1)
    header.set_sform(affine, code=1)
    geom = VolumeGeometry(mask=mask, affine=affine, header=header)
    return geom, coords, prf, np.zeros(len(prf), bool)


def make_layout(config: SynthConfig, rng: np.random.Generator) -> Layout:
    """Units and ground-truth pRFs of one participant in ``config.space``."""
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
    params = {k: np.full(n, np.nan) for k in ("x", "y", "sigma", "amplitude")}
    jitter = {k: coords[k][prf] + rng.normal(0, 0.01, prf.sum()) for k in ("u", "v")}
    for k, val in retinotopy(jitter["u"], jitter["v"], coords["sign"][prf], rng).items():
        params[k][prf] = val
    s0 = rng.uniform(600, 1200, n)
    s0[empty] = 0.0
    return Layout(geom, params, prf, empty, s0, anat if config.space == "fsnative" else None)


def simulate_run(
    layout: Layout, design: np.ndarray, config: SynthConfig, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Raw BOLD of one run and the noise-free percent-signal-change response of each unit.

    Returns
    -------
    bold : ndarray
        (units, dummy_scans + frames) float32 raw intensities.
    response : ndarray
        (units, frames) noise-free response in percent of S0 (0 where no pRF).
    """
    n_frames = design.shape[0]
    n_units = layout.geometry.n_units
    response = np.zeros((n_units, n_frames))
    p = layout.params
    idx = np.flatnonzero(layout.prf)
    overlap = gaussian_overlap(design, config.fov_deg, p["x"][idx], p["y"][idx], p["sigma"][idx])
    response[idx] = p["amplitude"][idx, None] * convolve(overlap, hrf_kernel(config.tr))
    n_vol = n_frames + config.dummy_scans
    t = np.arange(n_vol) / max(n_vol - 1, 1)
    drift = (rng.normal(0, 0.7, (n_units, 1)) * (t - 0.5)
             + rng.normal(0, 0.5, (n_units, 1)) * np.cos(np.pi * t))
    innovations = rng.normal(0, config.noise * np.sqrt(1 - AR1**2), (n_units, n_vol))
    noise = np.empty_like(innovations)
    noise[:, 0] = rng.normal(0, config.noise, n_units)
    for k in range(1, n_vol):
        noise[:, k] = AR1 * noise[:, k - 1] + innovations[:, k]
    signal = drift + noise
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
    layout: Layout, bold: np.ndarray, config: SynthConfig, func: Path, stem: str,
    rng: np.random.Generator,
) -> list[Path]:
    geom = layout.geometry
    meta = {"RepetitionTime": config.tr, "SliceTimingCorrected": True, "StartTime": config.tr / 2}
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
    space = {"fsaverage5": "space-fsaverage5", "fsLR": "space-fsLR_den-91k",
             "T1w": "space-T1w", "fsnative": "space-fsnative"}[config.space]
    return f"sub-{sub}_task-{config.task}", space


def _truth_path(func: Path, prefix: str, space: str, tail: str) -> Callable[[str | None], Path]:
    def path_for(hemi: str | None) -> Path:
        hemi_part = f"hemi-{hemi}_" if hemi else ""
        ext = ".func.gii" if hemi else ".nii.gz"
        return func / f"{prefix}_{hemi_part}{space}_{tail}{ext}"

    return path_for


def _write_truth(layout: Layout, truth: dict[str, np.ndarray], config: SynthConfig,
                 func: Path, sub: str) -> list[Path]:
    geom = layout.geometry
    prefix, space = _truth_entities(sub, config)
    meta = {"Description": "prfmap-synth ground truth"}
    mask = layout.prf.astype(np.float32)
    if isinstance(geom, CiftiGeometry):
        maps = {**truth, "mask": mask}
        path = func / f"{prefix}_{space}_model-gauss_boldmap.dscalar.nii"
        return geom.write_maps(maps, lambda h: path, meta)
    written: list[Path] = []
    for label, values in truth.items():
        path_for = _truth_path(func, prefix, space, f"model-gauss_desc-{label}_boldmap")
        written += geom.write_maps({label: values}, path_for, meta)
    written += geom.write_maps({"mask": mask}, _truth_path(func, prefix, space, "desc-prf_mask"))
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
    write_json_atomic(fmriprep / "dataset_description.json", _deriv_description(
        "fMRIPrep-like (synthetic)",
        "Synthetic stand-in for fMRIPrep outputs, written by prfmap-synth", root))
    write_json_atomic(truth_dir / "dataset_description.json", _deriv_description(
        "prfsynth ground truth", "Ground-truth pRF parameters of the synthetic dataset", root))
    write_json_atomic(truth_dir / "truth.json", {
        "Settings": asdict(config),
        "Model": "gauss",
        "Units": {"x": "deg", "y": "deg", "sigma": "deg", "amplitude": "percent",
                  "baseline": "percent", "polarangle": "deg", "eccentricity": "deg"},
        "ForwardModel": (
            "bold = S0 * (1 + (response + drift + noise) / 100); response = amplitude * "
            "(HRF * overlap)(t) sampled at mid-TR; overlap = fraction of the Gaussian's volume "
            "inside the aperture; HRF = nilearn spm_hrf, unit integral, oversampled 50x; "
            "amplitude and baseline stored relative to the noise-free run mean"
        ),
        "NoiseAR1": AR1,
        "PolarAngleConvention": "atan2(y, x), 0 = right horizontal meridian, counter-clockwise",
    })
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
            bold, response = simulate_run(layout, design, config, rng)
            mean_response = response
            _write_raw_run(raw_func, stem, config, design.shape[0])
            _write_raw_bold(raw_func / f"{stem}_bold.nii.gz", config, bold.shape[1], rng)
            _write_bold(layout, bold, config, der_func, stem, rng)
            write_text_atomic(der_func / f"{stem}_desc-confounds_timeseries.tsv",
                              _confounds(bold, config, rng))
        assert mean_response is not None
        _write_truth(layout, _truth_maps(layout, mean_response), config,
                     truth_dir / f"sub-{sub}" / "func", sub)
        _write_spatial_references(layout, fmriprep, sub, truth_dir / f"sub-{sub}" / "func")
    write_text_atomic(fmriprep / ".bidsignore", "\n".join(FMRIPREP_BIDSIGNORE) + "\n")
    write_text_atomic(truth_dir / ".bidsignore", "\n".join(TRUTH_BIDSIGNORE) + "\n")
    return root


def _truth_maps(layout: Layout, response: np.ndarray) -> dict[str, np.ndarray]:
    p = layout.params
    scale = 1.0 / (1.0 + response.mean(axis=1) / 100)
    truth = {
        "x": p["x"], "y": p["y"], "sigma": p["sigma"],
        "amplitude": p["amplitude"] * scale,
        "baseline": np.where(layout.prf, 100 * (scale - 1), np.nan),
        "polarangle": np.degrees(np.arctan2(p["y"], p["x"])),
        "eccentricity": np.hypot(p["x"], p["y"]),
    }
    return {k: np.asarray(v, dtype=np.float32) for k, v in truth.items()}


def _deriv_description(name: str, description: str, root: Path) -> dict:
    return {
        "Name": name,
        "BIDSVersion": "1.9.0",
        "DatasetType": "derivative",
        "GeneratedBy": [{"Name": "prfmap-synth", "Version": __version__,
                         "Description": description}],
        "SourceDatasets": [{"URL": "bids:raw:"}],
        "DatasetLinks": {"raw": "../.."},
    }


def _write_raw_top(root: Path, config: SynthConfig, design: np.ndarray) -> None:
    write_json_atomic(root / "dataset_description.json", {
        "Name": "prfmap synthetic retinotopy dataset",
        "BIDSVersion": "1.9.0",
        "DatasetType": "raw",
        "GeneratedBy": [{"Name": "prfmap-synth", "Version": __version__}],
        "License": "CC0",
    })
    rows = ["participant_id\tage\tsex"] + [
        f"sub-{s:02d}\tn/a\tn/a" for s in range(1, config.subjects + 1)
    ]
    write_text_atomic(root / "participants.tsv", "\n".join(rows) + "\n")
    write_text_atomic(root / "README", (
        "Synthetic pRF mapping dataset written by prfmap-synth. Bar sweeps (stimuli/bars.nii.gz),"
        " preprocessed BOLD in derivatives/fmriprep (synthetic, not made by fMRIPrep) and the "
        "ground truth in derivatives/prfsynth.\n"
    ))
    stim = np.moveaxis(design, 0, -1)[:, :, None, :].astype(np.uint8)
    img = nib.Nifti1Image(stim, np.eye(4))
    with atomic_path(root / "stimuli" / "bars.nii.gz") as tmp:
        nib.save(img, tmp)
    write_json_atomic(root / "stimuli" / "bars.json", {
        "FieldOfViewDeg": config.fov_deg,
        "RepetitionTime": config.tr,
        "Description": ("Bar apertures: axis 0 rows top to bottom, axis 1 columns left to "
                        "right, axis 2 singleton, axis 3 frames (one per TR); 1 = stimulus"),
    })
    write_json_atomic(root / f"task-{config.task}_events.json", {
        "stim_file": {"Description": "Aperture file under stimuli/ shown during the run"},
    })


def _write_raw_run(func: Path, stem: str, config: SynthConfig, n_frames: int) -> None:
    onset = config.dummy_scans * config.tr
    write_text_atomic(
        func / f"{stem}_events.tsv",
        "onset\tduration\ttrial_type\tstim_file\n"
        f"{onset:g}\t{n_frames * config.tr:g}\tbars\tbars.nii.gz\n",
    )
    write_json_atomic(func / f"{stem}_bold.json",
                {"RepetitionTime": config.tr, "TaskName": config.task})


def _write_raw_bold(path: Path, config: SynthConfig, n_volumes: int,
                    rng: np.random.Generator) -> None:
    """A raw BOLD stand-in of a few voxels with the run's volumes and TR (prfmap reads the
    fMRIPrep-like derivatives, but a BIDS dataset has the raw data its sidecars describe)."""
    data = rng.normal(1000, 10, (*RAW_BOLD_SHAPE, n_volumes)).astype(np.int16)
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
        _add_to_json(mask.with_name(mask.name.replace(".nii.gz", ".json")),
                     {"SpatialReference": f"bids::{anat}", "Type": "Brain"})
    _add_to_json(truth_func.parents[1] / "dataset_description.json",
                 {"DatasetLinks": {"raw": "../..", "fmriprep": "../fmriprep"}})
    truth_meta = {"SpatialReference": f"bids:fmriprep:{anat}",
                  "Description": "voxels with a pRF in the ground truth"}
    for mask in sorted(truth_func.glob("*_desc-prf_mask.nii.gz")):
        _add_to_json(mask.with_name(mask.name.replace(".nii.gz", ".json")), truth_meta)


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
        ``x y sigma amplitude baseline polarangle eccentricity`` and ``mask`` (bool).
    """
    func = Path(root) / "derivatives" / "prfsynth" / f"sub-{subject}" / "func"
    dscalar = sorted(func.glob("*_boldmap.dscalar.nii"))
    if dscalar:
        img = nib.load(dscalar[0])
        names = list(img.header.get_axis(0).name)
        values = img.get_fdata(dtype=np.float32)
        out = {n: values[i] for i, n in enumerate(names)}
    else:
        out = {}
        for label in (*TRUTH_LABELS, "mask"):
            pattern = f"*_desc-{label}_boldmap" if label != "mask" else "*_desc-prf_mask"
            out[label] = _read_map(func, pattern)
    out["mask"] = out["mask"] > 0.5
    return out


def _read_map(func: Path, pattern: str) -> np.ndarray:
    gii = sorted(func.glob(pattern + ".func.gii"))
    if gii:
        by_hemi = {("L" if "hemi-L" in p.name else "R"): p for p in gii}
        return np.concatenate(
            [np.asarray(nib.load(by_hemi[h]).darrays[0].data) for h in ("L", "R")]
        )
    (path,) = sorted(func.glob(pattern + ".nii.gz"))
    brain = func.parents[2] / "fmriprep" / func.parent.name / "func"
    mask_path = sorted(brain.glob("*_desc-brain_mask.nii.gz"))[0]
    mask = np.asanyarray(nib.load(mask_path).dataobj) > 0
    return np.asarray(np.asanyarray(nib.load(path).dataobj)[mask], dtype=np.float32)
