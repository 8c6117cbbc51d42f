"""How well could any test tell a CSS or DoG pRF from a Gaussian with bar stimuli? An oracle's bound.

For pRFs drawn as ``prfmap-synth --prf-models`` draws them (centres within 6° of the fovea, σ 0.5–2°;
CSS n 0.2–0.5; DoG surround 2–4 σ, ratio 0.1–0.3), the noiseless time course of each (the
stimulus of ``--bar-widths``, the canonical HRF) is fitted by the best Gaussian on a fine grid
around it (x, y ± 1° in 9 steps, σ 0.2–8° in 40 log steps, amplitude and offset free). What the best
Gaussian leaves unexplained is all any model comparison can find. An oracle that knows both time
courses and the noise (AR(1), ρ 0.3, standard deviation ``noise``; amplitude 3 %), and tests the
difference one-sided at α 0.05 / 2 (the limit of prfmap's test for two models compared with the
Gaussian), detects it with the printed power. No fit, no noise drawn: it takes seconds.

    python tests/benchmarks/oracle_identifiability.py [--bar-widths 2.5 10] [--units 30]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.stats import norm

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))

from prfmap.synth.config import SynthConfig  # noqa: E402
from prfmap.synth.response import bar_apertures, gaussian_overlap, hrf_kernel  # noqa: E402

AMPLITUDE, RHO, ALPHA = 3.0, 0.3, 0.05 / 2


def _convolve(overlap: np.ndarray, hrf: np.ndarray) -> np.ndarray:
    return np.array([np.convolve(row, hrf)[: overlap.shape[1]] for row in overlap])


def unexplained_by_a_gaussian(
    truth: np.ndarray, design: np.ndarray, fov: float, hrf: np.ndarray, x: np.ndarray, y: np.ndarray
) -> np.ndarray:
    """Fraction of each time course's variance the best Gaussian on a grid around (x, y) leaves."""
    out = np.empty(len(truth))
    sigma = np.geomspace(0.2, 8, 40)
    steps = np.linspace(-1, 1, 9)
    for i, series in enumerate(truth):
        gx, gy, gs = np.meshgrid(x[i] + steps, y[i] + steps, sigma, indexing="ij")
        pred = _convolve(gaussian_overlap(design, fov, gx.ravel(), gy.ravel(), gs.ravel()), hrf)
        t = series - series.mean()
        p = pred - pred.mean(axis=1, keepdims=True)
        beta = (p @ t) / np.maximum((p * p).sum(axis=1), 1e-12)
        out[i] = ((t[None] - beta[:, None] * p) ** 2).sum(axis=1).min() / (t @ t)
    return out


def oracle_power(unexplained: np.ndarray, truth: np.ndarray, noise: float, runs: int) -> np.ndarray:
    """Power of a one-sided z test of the part the Gaussian misses, with known signal and noise."""
    energy = runs * unexplained * truth.var(axis=1) * truth.shape[1] * AMPLITUDE**2
    effect = np.sqrt(energy) / noise * np.sqrt((1 - RHO) / (1 + RHO))
    return norm.sf(norm.isf(ALPHA) - effect)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bar-widths", type=float, nargs="+", default=[2.5])
    parser.add_argument("--units", type=int, default=30)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = SynthConfig(bar_widths=tuple(args.bar_widths))
    design, fov, hrf = bar_apertures(config), config.fov_deg, hrf_kernel(1.5)
    rng = np.random.default_rng(args.seed)
    n = args.units
    x, y = rng.uniform(-6, 6, (2, n))
    sigma = rng.uniform(0.5, 2.0, n)
    centre = gaussian_overlap(design, fov, x, y, sigma)
    surround = gaussian_overlap(design, fov, x, y, sigma * rng.uniform(2, 4, n))
    models = {
        "css": centre ** rng.uniform(0.2, 0.5, n)[:, None],
        "dog": centre - rng.uniform(0.1, 0.3, n)[:, None] * surround,
    }
    print(f"bar widths {args.bar_widths} deg, {design.shape[0]} frames, {n} pRFs per model")
    for name, overlap in models.items():
        truth = _convolve(overlap, hrf)
        left = unexplained_by_a_gaussian(truth, design, fov, hrf, x, y)
        p10, p50, p90 = np.percentile(100 * left, [10, 50, 90])
        print(f"{name}: the best Gaussian leaves {p50:.3f} % of the variance (p10 {p10:.3f}, p90 {p90:.3f})")
        for noise in (0.5, 1.0):
            for runs in (2, 4):
                power = oracle_power(left, truth, noise, runs)
                median, mean = np.median(power), np.mean(power)
                print(f"  noise {noise} runs {runs}: oracle power median {median:.2f}, mean {mean:.2f}")


if __name__ == "__main__":
    main()
