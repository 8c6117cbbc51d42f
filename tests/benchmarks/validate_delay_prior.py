"""σ's one-sided bias from each vertex's own HRF delay, and what a per-vertex delay would do (issue 37).

An engine simulation: ``--units`` pRFs (log σ growing with eccentricity, as the σ prior's tests draw
them), two runs of one bar design, each unit's HRF delay 6 ± 1 s and dispersion 1 ± 0.2 (uniform, as
prfmap-synth draws them), AR(1) noise ρ 0.3 at ``--noise`` times the response's SD. Fitted three
ways, the σ prior on: with the participant's HRF (delay 6 s, the between-vertex delay SD 0.577 s in
the standard errors); with per-vertex derivative weights (``hrf="vertex"``); and with a per-vertex
delay chosen from the participant's + {−1, −0.5, 0, +0.5, +1} s by ``RSS / s² + (offset / SD)²``
(the discrete posterior mode of the delay under N(0, SD²); five whole fits here; the built version,
``delay_prior="spread"``, profiles the refined units' σ over three delays). Prints σ's
coverage and median error overall and by the true delay (< 5.5 s, 5.5–6.5 s, > 6.5 s).

    KERAS_BACKEND=jax python tests/benchmarks/validate_delay_prior.py --noise 0.25 0.5 1.0
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))
sys.path.append(str(Path(__file__).resolve().parents[1]))  # helpers, after the engine's conftest

from conftest import FOV, TR, bar_design  # noqa: E402
from helpers import ar1_noise  # noqa: E402
from prfmap.engine import FitResult, NoiseModel, Stimulus, catalog, fit_prf, predict  # noqa: E402
from prfmap.engine.hrf import HRF  # noqa: E402

RUN = 148
DELAY_SD = 1 / np.sqrt(3)
"""The SD of a delay uniform in ± 1 s."""
OFFSETS = np.array([-1.0, -0.5, 0.0, 0.5, 1.0])
DELAY_BANDS = ((0.0, 5.5), (5.5, 6.5), (6.5, 9.0))


def simulate(
    units: int, noise: float, seed: int
) -> tuple[dict, np.ndarray, np.ndarray, Stimulus, np.ndarray]:
    """Truth, each unit's delay, data, stimulus and the runs' nuisance regressors."""
    rng = np.random.default_rng(seed)
    stim = Stimulus(np.concatenate([bar_design(RUN, size=101)] * 2), FOV, run_lengths=(RUN, RUN))
    ecc, angle = 9 * np.sqrt(rng.uniform(0, 1, units)), rng.uniform(0, 2 * np.pi, units)
    truth = {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": (0.25 + 0.12 * ecc) * np.exp(rng.normal(0, 0.2, units)),
        "amplitude": rng.uniform(1, 3, units),
        "baseline": np.zeros(units),
    }
    delay, dispersion = 6 + rng.uniform(-1, 1, units), 1 + rng.uniform(-0.2, 0.2, units)
    clean = np.stack(
        [
            predict({k: v[i : i + 1] for k, v in truth.items()}, stim, TR, dtype="float64", hrf=HRF(d, w))[0]
            for i, (d, w) in enumerate(zip(delay, dispersion, strict=True))
        ]
    )
    e = ar1_noise(rng, clean.shape, RUN)
    nuisance = np.zeros((2 * RUN, 2))
    nuisance[:RUN, 0] = nuisance[RUN:, 1] = 1.0
    return truth, delay, clean + noise * clean.std(axis=1, keepdims=True) * e, stim, nuisance


def measure(
    sigma: np.ndarray, lower: np.ndarray, upper: np.ndarray, keep: np.ndarray, truth: dict, delay: np.ndarray
) -> dict:
    """σ's coverage and median error over ``keep``, overall and per band of the true delay."""
    inside = (lower <= truth["sigma"]) & (truth["sigma"] <= upper)
    error = sigma - truth["sigma"]
    out = {"units": int(keep.sum()), "coverage": round(float(inside[keep].mean()), 3)}
    out["median_error"] = round(float(np.median(error[keep])), 3)
    for low, high in DELAY_BANDS:
        band = keep & (delay >= low) & (delay < high)
        out[f"delay_{low:g}-{high:g}"] = [
            round(float(inside[band].mean()), 3),
            round(float(np.median(error[band])), 3),
        ]
    return out


def kept(result: FitResult) -> np.ndarray:
    """Units with σ's standard error and no doubtful flag."""
    return ~catalog.doubtful(result.status) & np.isfinite(result.uncertainty.se["sigma"])


def chosen(values: list[np.ndarray], best: np.ndarray) -> np.ndarray:
    """Each unit's value from the fit its delay's posterior mode chose."""
    return np.stack(values, axis=1)[np.arange(len(best)), best]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.25])
    parser.add_argument("--units", type=int, default=800)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for noise in args.noise:
        truth, delay, data, stim, nuisance = simulate(args.units, noise, args.seed)
        common = {"nuisance": nuisance, "noise": NoiseModel("ar1", (0.3,), 2), "sigma_prior": "eccentricity"}
        fits = [fit_prf(data, stim, TR, hrf=HRF(6.0 + o, 1.0, delay_sd=DELAY_SD), **common) for o in OFFSETS]
        vertex = fit_prf(data, stim, TR, hrf="vertex", **common)
        participant = fits[int(np.flatnonzero(OFFSETS == 0)[0])]
        scale = participant.loss / (data.shape[1] - 7)
        score = np.stack([f.loss for f in fits], axis=1) / scale[:, None] + (OFFSETS / DELAY_SD) ** 2
        best = np.argmin(np.nan_to_num(score, nan=np.inf), axis=1)

        record = {"noise": noise, "units": args.units, "seed": args.seed}
        for name, result in (("participant", participant), ("vertex", vertex)):
            unc = result.uncertainty
            record[name] = measure(
                result.params["sigma"], unc.lower["sigma"], unc.upper["sigma"], kept(result), truth, delay
            )
        record["delay_map"] = measure(
            chosen([f.params["sigma"] for f in fits], best),
            chosen([f.uncertainty.lower["sigma"] for f in fits], best),
            chosen([f.uncertainty.upper["sigma"] for f in fits], best),
            chosen([kept(f) for f in fits], best),
            truth,
            delay,
        )
        record["delay_map"]["offset_truth_correlation"] = round(
            float(np.corrcoef(OFFSETS[best], delay - 6)[0, 1]), 3
        )
        print(json.dumps(record), flush=True)


if __name__ == "__main__":
    main()
