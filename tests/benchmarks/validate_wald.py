"""How well Laplace's intervals of the centre hold when the fitted model is the generating one (issue 37).

An engine simulation: ``--units`` Gaussian pRFs at 0.3–6° of eccentricity with σ = (0.15 + 0.12 ·
eccentricity) · exp(N(0, 0.2²)), prfmap-synth's two bar runs of different sweep orders (its defaults,
``sweep_order="shuffled"``), the response predicted by prfmap's own forward model sampled at the TR's
start, white noise of ``--noise`` times each response's SD, fitted with ``fit_prf``'s defaults (whose
standard errors also carry the HRF's default between-unit variability). Nothing differs between the
generator and the fit but the noise, so what the intervals miss is their own approximation: the
curvature at the estimate standing in for the spread of the estimate. Then what the participant
level adds, one at a time: ``--rho`` makes the noise AR(1) (run by run) and the fit whitens with the
AR(1) model ``estimate_noise`` pools over the pRF units and as many units without a pRF;
``--drift`` adds prfmap-synth's drifts (a linear trend of SD 0.7 % and a half cosine of SD 0.5 % per
run, times it, of a response whose SD is 1 %) and hands the fit a nuisance basis spanning the
participant level's (SPM's DCT high-pass at 0.01 Hz per run, one constant per run; built here, not
by the participant level's own code). Prints one JSON line per noise
level: the coverage of x and y (and σ) by the nominal 95 % intervals, and the robust SD of the errors
over their standard errors, overall and by eccentricity band; for σ also its interval's coverage (the
interval is asymmetric in log σ), overall and by true σ, and the share of its log errors beyond 1.96
of the SD its width implies, and σ's median error in degrees (its bias), overall and by true σ.
``--sigma-prior eccentricity`` fits with the σ prior (``none``, the engine's default, without).

    KERAS_BACKEND=jax python tests/benchmarks/validate_wald.py --noise 0.25 0.5 1.0 2.0 [--rho 0.3]
        [--drift 1] [--sigma-prior eccentricity]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))

from prfmap.engine import Stimulus, estimate_noise, fit_prf, predict  # noqa: E402
from prfmap.engine.catalog import Z95  # noqa: E402
from prfmap.participant.preprocess import dct_basis  # noqa: E402
from prfmap.synth import SynthConfig  # noqa: E402
from prfmap.synth.response import stimulus_apertures, sweep_orders  # noqa: E402

ECC_BANDS = ((0.0, 2.0), (2.0, 4.0), (4.0, 6.0))
SIGMA_BANDS = ((0.0, 0.5), (0.5, 0.8), (0.8, 3.0))


def participant_stimulus(seed: int) -> tuple[Stimulus, float]:
    """prfmap-synth's two runs of bars (shuffled second order) and its TR."""
    config = SynthConfig(seed=seed, sweep_order="shuffled")
    designs = [stimulus_apertures(config, order) for order in sweep_orders(config)]
    stim = Stimulus(np.concatenate(designs), config.fov_deg, run_lengths=[len(d) for d in designs])
    return stim, config.tr


def draw_prfs(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Centres uniform in angle and in eccentricity over 0.3–6°, σ growing with eccentricity."""
    ecc, angle = rng.uniform(0.3, 6.0, n), rng.uniform(0.0, 2 * np.pi, n)
    sigma = (0.15 + 0.12 * ecc) * np.exp(rng.normal(0.0, 0.2, n))
    return {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": sigma,
        "amplitude": np.ones(n),
        "baseline": np.zeros(n),
    }


def ar1_runs(
    shape: tuple[int, int], run_lengths: list[int], rho: float, rng: np.random.Generator
) -> np.ndarray:
    """Unit-variance AR(1) noise, restarted at each run."""
    out = []
    for n in run_lengths:
        e = rng.standard_normal((shape[0], n))
        block = np.empty_like(e)
        block[:, 0] = e[:, 0]
        for t in range(1, n):
            block[:, t] = rho * block[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
        out.append(block)
    return np.concatenate(out, axis=1)


def drifts(n_units: int, run_lengths: list[int], scale: float, rng: np.random.Generator) -> np.ndarray:
    """prfmap-synth's drifts per run (percent of a 1 % response SD): linear and a half cosine."""
    out = []
    for n in run_lengths:
        t = np.arange(n) / max(n - 1, 1)
        linear = rng.normal(0, 0.7, (n_units, 1)) * (t - 0.5)
        out.append(scale * (linear + rng.normal(0, 0.5, (n_units, 1)) * np.cos(np.pi * t)))
    return np.concatenate(out, axis=1)


def participant_nuisance(run_lengths: list[int], tr: float) -> np.ndarray:
    """The DCT high-pass basis (0.01 Hz) of each run, block-diagonal, and a constant per later run."""
    frames = sum(run_lengths)
    columns, start = [], 0
    for i, n in enumerate(run_lengths):
        basis = dct_basis(n, tr, 0.01)
        block = np.zeros((frames, basis.shape[1] + (i > 0)))
        block[start : start + n, : basis.shape[1]] = basis
        if i > 0:
            block[start : start + n, -1] = 1.0
        columns.append(block)
        start += n
    return np.concatenate(columns, axis=1)


def summary(z: np.ndarray) -> dict[str, float]:
    """Coverage of ``|z| <= Z95`` and the robust SD of ``z`` (1.4826 × its MAD)."""
    z = z[np.isfinite(z)]
    return {
        "n": int(z.size),
        "coverage": round(float(np.mean(np.abs(z) <= Z95)), 3),
        "robust_sd": round(float(1.4826 * np.median(np.abs(z - np.median(z)))), 3),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--units", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--rho", type=float, default=0.0, help="AR(1) coefficient of the noise")
    parser.add_argument("--drift", type=float, default=0.0, help="scale of the drifts (0: none)")
    parser.add_argument("--sigma-prior", choices=("none", "eccentricity"), default="none")
    args = parser.parse_args()
    stim, tr = participant_stimulus(args.seed)
    runs = list(stim.run_lengths)
    nuisance = participant_nuisance(runs, tr) if args.drift else None
    for level in args.noise:
        rng = np.random.default_rng([args.seed, 1])
        truth = draw_prfs(args.units, rng)
        clean = predict(truth, stim, tr, dtype="float64", slice_time_ref=0.0)
        scale = level * clean.std(axis=1, keepdims=True)
        data = clean + scale * (
            ar1_runs(clean.shape, runs, args.rho, rng) if args.rho else rng.standard_normal(clean.shape)
        )
        if args.drift:
            data += clean.std(axis=1, keepdims=True) * drifts(args.units, runs, args.drift, rng)
        options: dict = {"slice_time_ref": 0.0, "nuisance": nuisance}
        if args.rho:
            empty = np.median(scale) * ar1_runs(clean.shape, runs, args.rho, rng)
            if args.drift:
                empty += np.median(clean.std(axis=1)) * drifts(args.units, runs, args.drift, rng)
            noise = estimate_noise(np.concatenate([data, empty]), stim, tr, "ar1", **options)
            options["noise"] = noise
        fit = fit_prf(data, stim, tr, sigma_prior=args.sigma_prior, **options)
        ecc = np.hypot(truth["x"], truth["y"])
        record: dict = {
            "noise": level,
            "units": args.units,
            "rho": args.rho,
            "drift": args.drift,
            "sigma_prior": args.sigma_prior,
        }
        if args.rho:
            record["noise_model"] = noise.describe()
        for name in ("x", "y", "sigma"):
            z = (fit.params[name] - truth[name]) / fit.uncertainty.se[name]
            record[name] = summary(z)
            record[name]["by_eccentricity"] = {
                f"{low:g}-{high:g}": summary(z[(ecc >= low) & (ecc < high)]) for low, high in ECC_BANDS
            }
        lower, upper = fit.uncertainty.lower["sigma"], fit.uncertainty.upper["sigma"]
        held = (lower <= truth["sigma"]) & (truth["sigma"] <= upper)
        z_log = np.log(fit.params["sigma"] / truth["sigma"]) / (np.log(upper / lower) / (2 * Z95))
        finite = np.isfinite(z_log)  # the units with an interval, in every figure below
        record["sigma"]["interval"] = {
            "coverage": round(float(np.mean(held[finite])), 3),
            "beyond_1.96": round(float(np.mean(np.abs(z_log[finite]) > Z95)), 3),
            "by_true_sigma": {
                f"{low:g}-{high:g}": round(
                    float(np.mean(held[finite & (truth["sigma"] >= low) & (truth["sigma"] < high)])), 3
                )
                for low, high in SIGMA_BANDS
            },
        }
        error = fit.params["sigma"] - truth["sigma"]
        record["sigma"]["median_error"] = {
            "all": round(float(np.nanmedian(error)), 4),
            **{
                f"{low:g}-{high:g}": round(
                    float(np.nanmedian(error[(truth["sigma"] >= low) & (truth["sigma"] < high)])), 4
                )
                for low, high in SIGMA_BANDS
            },
        }
        print(json.dumps(record), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
