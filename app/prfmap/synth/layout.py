"""Where a synthetic participant's units lie, which carry a pRF, and the pRFs' retinotopy."""

from __future__ import annotations

from dataclasses import dataclass

import nibabel as nib
import numpy as np
from nilearn import datasets

from prfmap.io.geometry import CiftiGeometry, GiftiGeometry, UnitGeometry, VolumeGeometry
from prfmap.synth.config import MODEL_SEED, PRF_MODELS, SPACES, SURFACE_SLICES, SynthConfig
from prfmap.synth.model import (
    HRF_DELAY,
    slice_of,
)
from prfmap.synth.surfaces import fslr_cortex, native_hemispheres, prf_region


@dataclass
class Layout:
    """Units of one participant, the pRFs among them and how the acquisition samples them.

    Attributes
    ----------
    geometry : UnitGeometry
        How units lie in the output format.
    params : dict
        Label → (units,) ground truth (NaN where no pRF): x, y, sigma, amplitude, the HRF's
        ``hrf_delay`` (s) and ``hrf_dispersion``, the pRF ``model`` (its index in
        :data:`~prfmap.synth.config.PRF_MODELS`) and the model extras (NaN where the unit's model
        has none): the CSS exponent ``n``, the DoG ``sigma_surround`` (deg) and
        ``surround_ratio`` (surround integral over the centre's).
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
    driven : ndarray of bool, optional
        Units whose signal is neither a pRF's nor noise alone: connective-field targets, and the
        source area of resting-state runs (:mod:`prfmap.synth.connective`).
    """

    geometry: UnitGeometry
    params: dict[str, np.ndarray]
    prf: np.ndarray
    empty: np.ndarray
    s0: np.ndarray
    slices: np.ndarray
    anat: dict | None = None
    driven: np.ndarray | None = None

    @property
    def noise(self) -> np.ndarray:
        """Units with signal but no pRF: drifts and noise only."""
        noise = ~self.prf & ~self.empty
        return noise if self.driven is None else noise & ~self.driven

    @property
    def n_slices(self) -> int:
        """Slices of the simulated acquisition."""
        return int(self.slices.max()) + 1 if self.slices.size else 1


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


def assign_models(
    prf: np.ndarray, sigma: np.ndarray, config: SynthConfig, rng: np.random.Generator
) -> dict[str, np.ndarray]:
    """Each pRF unit's model, drawn uniformly among ``config.prf_models``, and its model extras.

    Parameters
    ----------
    prf : ndarray of bool
        (units,) units with a pRF.
    sigma : ndarray
        (units,) their Gaussian (centre) sizes, degrees.
    config : SynthConfig
        ``prf_models`` and the ranges of the extras.
    rng : numpy.random.Generator
        The models' own generator: with ``gauss`` alone it draws nothing; otherwise the model of
        each pRF unit, then ``n``, the surround scale and the surround ratio of every pRF unit (so
        a unit's extras do not depend on which models are listed, only on the draw of its model).

    Returns
    -------
    dict
        ``model`` (index in :data:`PRF_MODELS`; NaN where no pRF), ``n``, ``sigma_surround``,
        ``surround_ratio`` (NaN where the unit's model has no such parameter).
    """
    n_units, k = len(prf), int(prf.sum())
    out = {key: np.full(n_units, np.nan) for key in ("model", "n", "sigma_surround", "surround_ratio")}
    if not config.beyond_gauss:
        out["model"][prf] = 0.0
        return out
    codes = np.array([PRF_MODELS.index(m) for m in config.prf_models])
    model = codes[rng.integers(0, len(codes), k)]
    exponent = rng.uniform(*config.css_exponent, k)
    scale = rng.uniform(*config.dog_surround_scale, k)
    ratio = rng.uniform(*config.dog_surround_ratio, k)
    css, dog = model == PRF_MODELS.index("css"), model == PRF_MODELS.index("dog")
    idx = np.flatnonzero(prf)
    out["model"][idx] = model
    out["n"][idx[css]] = exponent[css]
    out["sigma_surround"][idx[dog]] = sigma[idx[dog]] * scale[dog]
    out["surround_ratio"][idx[dog]] = ratio[dog]
    return out


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
    """PRFs on the occipital pole of left and right (pial, fsaverage-registered sphere) meshes."""
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


def _volume_layout(small: bool, voxel_mm: float = 3.0) -> tuple[UnitGeometry, dict, np.ndarray, np.ndarray]:
    shape = tuple(round(n * 3.0 / voxel_mm) for n in ((12, 14, 10) if small else (32, 40, 28)))
    zooms = voxel_mm
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


def make_layout(
    config: SynthConfig, rng: np.random.Generator, model_rng: np.random.Generator | None = None
) -> Layout:
    """Units, ground-truth pRFs and HRFs, and acquisition slices of one participant.

    Parameters
    ----------
    config : SynthConfig
        The dataset's settings.
    rng : numpy.random.Generator
        Every draw but the pRF models'.
    model_rng : numpy.random.Generator, optional
        The pRF models' draws (:func:`assign_models`; default a fresh
        ``np.random.default_rng([config.seed, MODEL_SEED])``: pass one generator for all
        participants of a dataset).
    """
    if config.space == "fsaverage5":
        geom, coords, prf, empty = _fsaverage5_layout(rng)
    elif config.space == "fsLR":
        geom, coords, prf, empty = _fslr_layout(config.small)
    elif config.space == "T1w":
        geom, coords, prf, empty = _volume_layout(config.small, config.voxel_mm)
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
    if model_rng is None:
        model_rng = np.random.default_rng([config.seed, MODEL_SEED])
    params.update(assign_models(prf, params["sigma"], config, model_rng))
    s0 = rng.uniform(600, 1200, n)
    s0[empty] = 0.0
    if "z" in coords:
        n_slices = len(np.unique(coords["z"])) if config.space == "T1w" else SURFACE_SLICES
        slices = slice_of(coords["z"], n_slices)
    else:  # no anatomy (fsLR's block of grayordinates): slices drawn at random
        slices = rng.integers(0, SURFACE_SLICES, n)
    return Layout(geom, params, prf, empty, s0, slices, anat if config.space == "fsnative" else None)
