"""Fixtures of the report tests: pRF maps laid out on fsaverage5, with data and predictions."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import fit_settings
from prfmap.io.geometry import SurfaceLayout
from prfmap.report.context import ReportContext
from prfmap.synth import SynthConfig, bar_apertures

FOV = 20.0
TR = 1.5


def bar_design() -> np.ndarray:
    """prfmap-synth's bar sweeps (eight directions, blanks between pairs) over a 31×31 aperture."""
    return bar_apertures(SynthConfig(fov_deg=FOV, n_pixels=31, n_steps=12, n_blank=2))


def gaussian_predictions(design: np.ndarray, x, y, sigma) -> np.ndarray:
    """Overlap of each Gaussian pRF with the aperture, convolved with SPM's two-gamma HRF."""
    from nilearn.glm.first_level import spm_hrf
    from scipy.signal import fftconvolve

    n = design.shape[1]
    coords = np.linspace(-FOV / 2, FOV / 2, n, dtype=np.float32)
    gx, gy = np.meshgrid(coords, coords[::-1])
    flat = design.reshape(design.shape[0], -1).T
    out = np.empty((len(x), design.shape[0]), dtype=np.float32)
    for start in range(0, len(x), 4096):
        sl = slice(start, start + 4096)
        d2 = (gx[None] - x[sl, None, None]) ** 2 + (gy[None] - y[sl, None, None]) ** 2
        rf = np.exp(-d2 / (2 * sigma[sl, None, None] ** 2)).astype(np.float32)
        out[sl] = rf.reshape(rf.shape[0], -1) @ flat
    hrf = spm_hrf(TR, oversampling=1)[None]
    return fftconvolve(out, hrf, axes=1)[:, : design.shape[0]].astype(np.float32)


def hemisphere_prfs(sphere: np.ndarray, hemi: str, rng: np.random.Generator):
    """pRFs of a retinotopic map around the occipital pole of a sphere mesh.

    Eccentricity grows with distance from the pole, polar angle turns with the direction
    around it (left hemisphere: right visual field, and the reverse), sigma grows with
    eccentricity; ``visual`` marks the vertices of the map.
    """
    unit = sphere / np.linalg.norm(sphere, axis=1, keepdims=True)
    dist = np.degrees(np.arccos(np.clip(-unit[:, 1], -1, 1)))
    visual = dist < 50
    ecc = 0.3 + 9.0 * dist / 50
    angle = np.degrees(np.arctan2(unit[:, 2], np.abs(unit[:, 0]) + 0.05)).clip(-89, 89)
    if hemi == "R":
        angle = np.where(angle >= 0, 180 - angle, -180 - angle)
    rad = np.radians(angle)
    x, y = ecc * np.cos(rad), ecc * np.sin(rad)
    sigma = 0.3 + 0.2 * ecc + rng.normal(0, 0.05, ecc.size)
    return x, y, np.abs(sigma), visual


def make_context(seed: int = 0) -> ReportContext:
    """A fsaverage5 report context whose data come from known pRFs plus noise."""
    from nilearn import datasets

    rng = np.random.default_rng(seed)
    sphere = datasets.load_fsaverage("fsaverage5")["sphere"]
    parts = [
        hemisphere_prfs(np.asarray(sphere.parts[p].coordinates), h, rng)
        for h, p in (("L", "left"), ("R", "right"))
    ]
    x, y, sigma, visual = (np.concatenate(a) for a in zip(*parts, strict=True))
    design = bar_design()
    fit = gaussian_predictions(design, x.astype(np.float32), y.astype(np.float32), sigma.astype(np.float32))
    fit -= fit.mean(axis=1, keepdims=True)
    signal = fit / (fit.std(axis=1, keepdims=True) + 1e-6)
    signal *= np.where(visual, rng.uniform(0.5, 3.0, x.size), 0.0)[:, None]
    data = (signal + rng.normal(0, 1, signal.shape)).astype(np.float32)
    data -= data.mean(axis=1, keepdims=True)
    beta = (fit * data).sum(1) / np.maximum((fit**2).sum(1), 1e-12)
    predictions = (beta[:, None] * fit).astype(np.float32)
    r2 = 1 - ((data - predictions) ** 2).sum(1) / (data**2).sum(1)
    r2[:40] = np.nan
    n = x.size // 2
    maps = {
        "x": x,
        "y": y,
        "sigma": sigma,
        "amplitude": beta,
        "baseline": np.zeros(x.size),
        "r2": r2,
        "polarangle": np.degrees(np.arctan2(y, x)),
        "eccentricity": np.hypot(x, y),
    }
    return ReportContext(
        subject="01",
        space="fsaverage5",
        maps=maps,
        model="gauss",
        task="bar",
        inputs=["sub-01_task-bar_run-1_hemi-L_space-fsaverage5_bold.func.gii"],
        runs=["task-bar_run-1"],
        tr=TR,
        dummy_scans=2,
        design=design,
        fov_deg=FOV,
        settings=fit_settings(),
        backend={"backend": "jax", "device": "cpu"},
        timings={"grid": 1.5, "refine": 3.25},
        warnings=["40 vertices have no signal <and were skipped>"],
        surface=SurfaceLayout(hemis={"L": n, "R": n}),
        data=data,
        predictions=predictions,
        r2_threshold=0.1,
    )


@pytest.fixture(scope="session")
def context() -> ReportContext:
    """A fsaverage5 context with known pRFs."""
    return make_context()


@pytest.fixture(scope="session")
def report(context: ReportContext, tmp_path_factory: pytest.TempPathFactory):
    """The participant report of ``context``, written once for the session."""
    from prfmap.report.participant import write_participant_report

    out = tmp_path_factory.mktemp("report")
    return write_participant_report(out, "sub-01", context)
