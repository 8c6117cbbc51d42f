"""The engine benchmarks' workloads: apertures, ground truth and noisy data, one definition for all.

``W`` is the engine's reference workload (both fsaverage5 hemispheres, one bar run); ``long`` a long
multi-aperture acquisition as the HCP 7T retinotopy protocol records it (five runs of 300 frames at
TR 1 s: wedges both ways, rings both ways, bars); ``fsaverage`` the full fsaverage mesh with one bar
run of 300 frames; ``hcp`` the long acquisition on every cortical grayordinate of CIFTI 91k.

Every workload's data are the engine's own predictions of known pRFs (``predict``: SPM HRF, exact
per-TR integration) plus white noise of ``noise`` times each unit's signal SD, so a fit is checked
against the truth. Numpy only until :func:`make` calls the engine (Keras is imported there).

    from workloads import WORKLOADS, make
    case = make(WORKLOADS["long"], units=3000)
    res = fit_prf(case.data, case.stim, case.tr, nuisance=case.nuisance, grid=case.grid)
    case.errors(res.params)     # median centre and sigma errors, degrees
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

RUN_KINDS = ("bars", "wedge_ccw", "wedge_cw", "ring_expanding", "ring_contracting", "bars_blank")


@dataclass(frozen=True)
class Workload:
    """A benchmark workload: its size, its runs' apertures and its acquisition.

    Attributes
    ----------
    name : str
    units : int
        Units (vertices, grayordinates) fitted.
    runs : tuple of str
        One aperture kind per run (:data:`RUN_KINDS`); the runs are concatenated.
    frames_per_run : int
    tr : float
        Seconds per frame.
    size : int
        Aperture pixels along each side.
    fov : float
        Aperture width, degrees.
    noise : float
        Noise SD relative to each unit's signal SD.
    grid : tuple of int
        Eccentricities, angles and sizes of the starting grid (``polar_grid``).
    """

    name: str
    units: int
    runs: tuple[str, ...]
    frames_per_run: int
    tr: float
    size: int = 101
    fov: float = 20.0
    noise: float = 0.5
    grid: tuple[int, int, int] = (20, 20, 20)

    @property
    def frames(self) -> int:
        """Frames of all runs together."""
        return self.frames_per_run * len(self.runs)

    def scaled(self, **changes: Any) -> Workload:
        """The same workload with some attributes changed (e.g. fewer units for a dry run)."""
        return dataclasses.replace(self, **changes)


HCP_RUNS = ("wedge_ccw", "wedge_cw", "ring_expanding", "ring_contracting", "bars_blank")
WORKLOADS = {
    "W": Workload("W", 20484, ("bars",), 200, tr=1.5),
    "long": Workload("long", 3000, HCP_RUNS, 300, tr=1.0),
    "fsaverage": Workload("fsaverage", 327684, ("bars",), 300, tr=1.5),
    "hcp": Workload("hcp", 59412, HCP_RUNS, 300, tr=1.0),
}
"""The workloads by name: W (20,484 × 200), long (3,000 × 1,500), fsaverage (327,684 × 300),
hcp (59,412 × 1,500)."""


def _field(size: int, fov: float) -> tuple[np.ndarray, np.ndarray]:
    """Pixel-centre coordinates (x right, y up; row 0 at the top), each (size, size), degrees."""
    x = np.linspace(-fov / 2, fov / 2, size)
    return np.meshgrid(x, x[::-1])


def bar_apertures(n_frames: int, size: int, fov: float) -> np.ndarray:
    """Eight bar sweeps in a circular aperture, as in a standard retinotopy run (workload W's run)."""
    xx, yy = _field(size, fov)
    angles = np.arange(8) * 45.0
    per = int(np.ceil(n_frames / len(angles)))
    frames = []
    for angle in angles:
        a = np.radians(angle)
        along = xx * np.cos(a) + yy * np.sin(a)
        for pos in np.linspace(-fov / 2, fov / 2, per):
            frames.append((np.abs(along - pos) < fov / 16) & (np.hypot(xx, yy) <= fov / 2))
    return np.asarray(frames[:n_frames], dtype=np.float32)


CYCLE = 32  # positions per wedge or ring cycle, and per bar sweep, of the long runs
CYCLES = 8


def _cycled(frames: list[np.ndarray], n_frames: int, size: int) -> np.ndarray:
    """``frames`` between equal blank stretches at the start and the end of a run of ``n_frames``."""
    body = np.asarray(frames, dtype=np.float32)[:n_frames]
    lead = (n_frames - len(body)) // 2
    out = np.zeros((n_frames, size, size), dtype=np.float32)
    out[lead : lead + len(body)] = body
    return out


def long_run(kind: str, n_frames: int, size: int, fov: float) -> np.ndarray:
    """One run of the long acquisition: 8 cycles of 32 positions between blanks (HCP 7T's layout).

    Wedges are 90° wide and turn by 11.25° per frame (``wedge_cw`` visits the positions of
    ``wedge_ccw`` in reverse order); rings are log-spaced in eccentricity, a quarter of their own
    eccentricity wide (``ring_contracting`` reverses ``ring_expanding``); ``bars_blank`` is eight
    sweeps of 32 positions with the same blanks. All inside a disc of radius ``fov / 2``.
    """
    xx, yy = _field(size, fov)
    radius, angle = np.hypot(xx, yy), np.degrees(np.arctan2(yy, xx)) % 360.0
    disc = radius <= fov / 2
    positions: list[np.ndarray] = []
    if kind.startswith("wedge"):
        for step in range(CYCLE):
            start = step * 360.0 / CYCLE
            positions.append(disc & (((angle - start) % 360.0) < 90.0))
        if kind == "wedge_cw":
            positions = positions[::-1]
    elif kind.startswith("ring"):
        centres = np.geomspace(0.5, fov / 2, CYCLE)
        for centre in centres:
            positions.append(disc & (np.abs(radius - centre) < max(0.25 * centre, fov / 40)))
        if kind == "ring_contracting":
            positions = positions[::-1]
    elif kind == "bars_blank":
        return _cycled(list(bar_apertures(CYCLES * CYCLE, size, fov)), n_frames, size)
    else:
        raise ValueError(f"unknown run kind {kind!r}; choose from {RUN_KINDS}")
    return _cycled(positions * CYCLES, n_frames, size)


def apertures(workload: Workload) -> np.ndarray:
    """The concatenated apertures (frames, size, size) of every run of ``workload``."""
    runs = []
    for kind in workload.runs:
        if kind == "bars":
            runs.append(bar_apertures(workload.frames_per_run, workload.size, workload.fov))
        else:
            runs.append(long_run(kind, workload.frames_per_run, workload.size, workload.fov))
    return np.concatenate(runs)


def distinct_frames(design: np.ndarray) -> int:
    """How many different apertures the frames of ``design`` (frames, rows, cols) hold."""
    return int(np.unique(design.reshape(len(design), -1), axis=0).shape[0])


def truth(n_units: int, rng: np.random.Generator, max_eccentricity: float = 9.0) -> dict[str, np.ndarray]:
    """Random pRFs: centres uniform over a disc, sizes 0.3–4°, amplitudes 1–3, no baseline."""
    ecc = max_eccentricity * np.sqrt(rng.uniform(size=n_units))
    angle = rng.uniform(0, 2 * np.pi, n_units)
    return {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": rng.uniform(0.3, 4.0, n_units),
        "amplitude": rng.uniform(1, 3, n_units),
        "baseline": np.zeros(n_units),
    }


def run_constants(workload: Workload) -> np.ndarray | None:
    """One constant per run after the first (frames, runs - 1), as preprocessing removes run means."""
    if len(workload.runs) < 2:
        return None
    labels = np.repeat(np.arange(len(workload.runs)), workload.frames_per_run)
    return (labels[:, None] == np.arange(1, len(workload.runs))[None]).astype(np.float64)


@dataclass(frozen=True)
class Case:
    """One workload made: the stimulus, the data, the truth and what ``fit_prf`` needs besides."""

    workload: Workload
    stim: Any  # prfmap.engine.Stimulus
    data: np.ndarray  # (units, frames)
    truth: dict[str, np.ndarray]
    nuisance: np.ndarray | None
    grid: dict[str, np.ndarray]

    @property
    def tr(self) -> float:
        return self.workload.tr

    def errors(self, params: dict[str, np.ndarray]) -> dict[str, float]:
        """Median absolute error of the centre and of sigma against the truth, degrees."""
        centre = np.hypot(params["x"] - self.truth["x"], params["y"] - self.truth["y"])
        sigma = np.abs(params["sigma"] - self.truth["sigma"])
        return {"centre_deg": float(np.nanmedian(centre)), "sigma_deg": float(np.nanmedian(sigma))}


def make(workload: Workload, units: int | None = None, seed: int = 0, chunk: int = 65536) -> Case:
    """The workload's stimulus, truth and noisy data (``units`` overrides its unit count)."""
    from prfmap.engine import Stimulus, polar_grid, predict

    workload = workload if units is None else workload.scaled(units=units)
    stim = Stimulus(
        apertures(workload), workload.fov, run_lengths=(workload.frames_per_run,) * len(workload.runs)
    )
    rng = np.random.default_rng(seed)  # truth, then noise, from one stream (W as measured before)
    params = truth(workload.units, rng)
    data = np.empty((workload.units, workload.frames))
    for start in range(0, workload.units, chunk):
        stop = min(start + chunk, workload.units)
        block = predict({k: v[start:stop] for k, v in params.items()}, stim, workload.tr)
        noise = rng.standard_normal(block.shape)
        data[start:stop] = block + workload.noise * block.std(axis=1, keepdims=True) * noise
    return Case(workload, stim, data, params, run_constants(workload), polar_grid(stim, *workload.grid))
