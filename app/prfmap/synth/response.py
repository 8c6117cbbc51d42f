"""The stimulus of a synthetic dataset and the BOLD response to it: bar sweeps, the pRF overlap, runs."""

from __future__ import annotations

import numpy as np
from nilearn.glm.first_level.hemodynamic_models import spm_hrf

from prfmap.synth.config import (
    CYCLES,
    HRF_OVERSAMPLING,
    PRF_MODELS,
    WEDGE_DEG,
    SynthConfig,
    acquisition_timing,
)
from prfmap.synth.layout import Layout
from prfmap.synth.model import (
    Acquisition,
    ar1_noise,
    convolve_units,
    drift,
    realistic_noise,
    unit_kernels,
    unit_noise_levels,
)

BAR_DIRECTIONS = (0, 225, 90, 315, 180, 45, 270, 135)
"""Directions of the bar sweeps (degrees, direction of motion; 0 = rightwards, 90 = upwards)."""
SWEEP_ORDER_SEED = 7
"""Mixed into ``SynthConfig.seed`` for the runs' sweep orders (the other draws stay as they were)."""


def pixel_coordinates(fov_deg: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Visual-field ``(x, y)`` of the pixel centres, each (n, n); row 0 = top (y = +fov/2)."""
    x = np.linspace(-fov_deg / 2, fov_deg / 2, n)
    return np.meshgrid(x, x[::-1])


def sweep_orders(config: SynthConfig) -> list[tuple[int, ...]]:
    """Each run's order of :data:`BAR_DIRECTIONS` (``config.sweep_order``; the first run's is theirs).

    Returns
    -------
    list of tuple of int
        One order per run.
    """
    rng = np.random.default_rng([config.seed, SWEEP_ORDER_SEED])
    orders = [BAR_DIRECTIONS]
    for _ in range(1, config.runs):
        same = config.sweep_order == "same"
        orders.append(BAR_DIRECTIONS if same else tuple(int(d) for d in rng.permutation(BAR_DIRECTIONS)))
    return orders


def stimulus_apertures(config: SynthConfig, directions: tuple[int, ...] = BAR_DIRECTIONS) -> np.ndarray:
    """The apertures of ``config.stimulus_design`` (:data:`prfmap.synth.config.STIMULUS_DESIGNS`).

    Parameters
    ----------
    config : SynthConfig
        The settings.
    directions : tuple of int
        The order of the bar sweeps (:func:`sweep_orders`).

    Returns
    -------
    ndarray
        float32 (frames, rows, cols) of 0 and 1; row 0 = top.
    """
    bars = bar_apertures(config, directions)
    if config.stimulus_design != "hcp":
        return bars
    return np.concatenate([wedge_ring_apertures(config), bars], axis=0)


def wedge_ring_apertures(config: SynthConfig) -> np.ndarray:
    """A wedge turning counter-clockwise, then a ring expanding, each followed by a blank period.

    As the HCP 7T retinotopy's wedge and ring runs (Benson et al. 2018), in one sequence: a wedge of
    :data:`~prfmap.synth.config.WEDGE_DEG` starting on the right horizontal meridian, and a ring of an
    eighth of the field of view in width whose centre moves from fixation to the edge, each over
    :data:`~prfmap.synth.config.CYCLES` cycles of ``2 * steps_per_sweep`` frames, inside the circular
    aperture.

    Returns
    -------
    ndarray
        float32 (frames, rows, cols) of 0 and 1; row 0 = top.
    """
    n, fov = config.aperture_px, config.fov_deg
    x, y = pixel_coordinates(fov, n)
    radius = fov / 2
    ecc = np.hypot(x, y)
    inside = ecc <= radius + 1e-9
    angle = np.degrees(np.arctan2(y, x)) % 360
    per_cycle = 2 * config.steps_per_sweep
    blank = np.zeros((config.blank_frames, n, n), np.float32)
    frames = []
    for k in range(CYCLES * per_cycle):
        start = 360.0 * k / per_cycle
        frames.append(((angle - start) % 360 < WEDGE_DEG) & inside)
    frames = [np.asarray(frames, np.float32), blank]
    width = fov / 8
    rings = []
    for k in range(CYCLES * per_cycle):
        centre = (k % per_cycle + 0.5) / per_cycle * (radius + width / 2)
        rings.append((np.abs(ecc - centre) <= width / 2) & inside)
    frames += [np.asarray(rings, np.float32), blank]
    return np.concatenate(frames, axis=0)


def bar_apertures(config: SynthConfig, directions: tuple[int, ...] = BAR_DIRECTIONS) -> np.ndarray:
    """Eight bar sweeps inside a circular aperture, with blank periods between sweep pairs.

    The sequence (blank, then four sweep pairs each followed by a blank) is repeated once per
    width of ``config.sweep_widths``, in order, each repetition with bars of that width; the sweeps
    move in the ``directions`` given, in that order.

    Returns
    -------
    ndarray
        float32 (frames, rows, cols) of 0 and 1; row 0 = top.
    """
    n, fov = config.aperture_px, config.fov_deg
    x, y = pixel_coordinates(fov, n)
    radius = fov / 2
    inside = np.hypot(x, y) <= radius + 1e-9
    positions = np.linspace(-radius, radius, config.steps_per_sweep)
    blank = np.zeros((config.blank_frames, n, n), np.float32)
    frames = []
    for width in config.sweep_widths:
        frames.append(blank)
        for i, direction in enumerate(directions):
            theta = np.radians(direction)
            along = x * np.cos(theta) + y * np.sin(theta)
            for s in positions:
                frames.append(((np.abs(along - s) <= width / 2) & inside)[None].astype(np.float32))
            if i % 2 == 1:
                frames.append(blank)
    return np.concatenate(frames, axis=0)


def hrf_kernel(tr: float, n_taps: int | None = None, sample_time: float | None = None) -> np.ndarray:
    """Response of a volume to a unit stimulus shown for one TR, m TRs earlier.

    Computed numerically from nilearn's canonical SPM HRF: the independent check of
    :func:`prfmap.synth.model.unit_kernels` (and of the engine's kernels).

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


def prf_overlap(design: np.ndarray, fov_deg: float, params: dict[str, np.ndarray]) -> np.ndarray:
    """The neural response of pRF units to the aperture, before the amplitude and the HRF.

    With ``g(s)`` the fraction of a unit-integral Gaussian of size ``s`` at (x, y) covered by the
    aperture (:func:`gaussian_overlap`): ``gauss`` units give ``g(sigma)``; ``css`` units
    ``g(sigma) ** n`` (compressive spatial summation, Kay et al. 2013); ``dog`` units
    ``g(sigma) - surround_ratio * g(sigma_surround)`` (a difference of unit-integral Gaussians,
    Zuiderbaan et al. 2012). The definitions of prfmap's ``css`` and ``dog`` models.

    Parameters
    ----------
    design : ndarray
        (frames, rows, cols) aperture.
    fov_deg : float
        Its full width, degrees.
    params : dict
        (units,) ``x y sigma`` and, when a unit's model is not the Gaussian, ``model`` (index in
        :data:`~prfmap.synth.config.PRF_MODELS`), ``n``, ``sigma_surround``, ``surround_ratio``.

    Returns
    -------
    ndarray
        (units, frames).
    """
    x, y, sigma = params["x"], params["y"], params["sigma"]
    out = gaussian_overlap(design, fov_deg, x, y, sigma)
    model = params.get("model")
    if model is None:
        return out
    css = np.flatnonzero(model == PRF_MODELS.index("css"))
    if css.size:
        out[css] = out[css] ** params["n"][css, None]
    dog = np.flatnonzero(model == PRF_MODELS.index("dog"))
    if dog.size:
        surround = gaussian_overlap(design, fov_deg, x[dog], y[dog], params["sigma_surround"][dog])
        out[dog] -= params["surround_ratio"][dog, None] * surround
    return out


def prf_response(layout: Layout, design: np.ndarray, config: SynthConfig) -> np.ndarray:
    """The noise-free percent-signal-change response of each unit to the apertures.

    Parameters
    ----------
    layout : Layout
        The units, their pRFs and slices.
    design : ndarray
        (frames, rows, cols) apertures.
    config : SynthConfig
        The settings (TR, field of view, slice timing).

    Returns
    -------
    ndarray
        (units, frames) in percent of S0 (0 where no pRF): each pRF unit's amplitude times its
        :func:`prf_overlap` convolved with its HRF.
    """
    timing = acquisition_timing(config, layout.n_slices)
    sample_time = timing.sample_times(layout.slices)
    response = np.zeros((layout.geometry.n_units, design.shape[0]))
    p = layout.params
    idx = np.flatnonzero(layout.prf)
    overlap = prf_overlap(design, config.fov_deg, {k: v[idx] for k, v in p.items()})
    kernels = unit_kernels(config.tr, sample_time[idx], p["hrf_delay"][idx], p["hrf_dispersion"][idx])
    response[idx] = p["amplitude"][idx, None] * convolve_units(overlap, kernels)
    return response


def measure_run(
    layout: Layout,
    response: np.ndarray,
    config: SynthConfig,
    rng: np.random.Generator,
    respond: bool = True,
) -> np.ndarray:
    """Raw BOLD of one run: a noise-free response plus drifts, noise and the dummy scans' decay.

    Parameters
    ----------
    layout : Layout
        The units (S0, slices, the medial wall written as zeros).
    response : ndarray
        (units, frames) noise-free signal in percent of S0.
    config : SynthConfig
        The noise, drift and dummy-scan settings.
    rng : numpy.random.Generator
        The noise levels, noise and drifts are drawn from it, in that order.
    respond : bool
        False: the run carries drifts and noise only.

    Returns
    -------
    ndarray
        (units, dummy_scans + frames) float32 raw intensities:
        ``S0 * (1 + (response + drift + noise) / 100)``.
    """
    n_units, n_frames = response.shape
    timing = acquisition_timing(config, layout.n_slices)
    acquisition = Acquisition(config.tr, timing.sample_times(layout.slices))
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
    return bold.astype(np.float32)


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
        (units, dummy_scans + frames) float32 raw intensities (:func:`measure_run`).
    response : ndarray
        (units, frames) noise-free response in percent of S0 (:func:`prf_response`).
    """
    response = prf_response(layout, design, config)
    return measure_run(layout, response, config, rng, respond), response
