"""Does the ``uncertain`` flag need its edge criterion? pRFs inside the field's edge and beyond it.

The ``uncertain`` status bit has four criteria (:func:`prfmap.engine.fit.uncertainty.doubtful_uncertainty`);
one is the edge's: the centre's 95 % interval of eccentricity leaves the stimulated field. prfmap-synth
and the independent simulator place every pRF inside the field, so they measure only what that
criterion costs (true pRFs near the edge flagged), not what it is for (pRFs beyond the field, common
in the periphery of real V1–V3, fitted at the edge). This measurement simulates both with the
engine: pRFs at 3–6° (control), 7–9.5° (inside, near the edge) and 10.5–14° (beyond) of a 10° field,
``prfmap-synth``'s bar design twice, AR(1) noise of one SD for all units (so a pRF beyond the field
has the weak signal it would have), fitted with the defaults (σ prior, AR(1)). Per group it prints
one JSON line: the share flagged doubtful, the units only the edge criterion flags (their median
centre error and the share whose x and y intervals hold the truth), and the unflagged units with
and without the criterion (coverage, centres more than 3° and 5° off, and how many of those have r²
≥ 0.1, the reports' threshold).

    KERAS_BACKEND=jax python tests/benchmarks/validate_edge.py [--noise 0.5 1.0] [--units 200]
        [--seed 7] [--table FILE]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_timing_cvr2 import emit  # noqa: E402

from prfmap.engine import NoiseModel, Stimulus, catalog, fit_prf, predict  # noqa: E402
from prfmap.engine.catalog import Z95  # noqa: E402
from prfmap.synth import SynthConfig  # noqa: E402
from prfmap.synth.response import bar_apertures  # noqa: E402

GROUPS = {"inside 3-6": (3.0, 6.0), "inside edge 7-9.5": (7.0, 9.5), "beyond 10.5-14": (10.5, 14.0)}
"""Eccentricity ranges (degrees) of the simulated pRFs, in a field of radius 10°."""
AR1 = 0.3


def simulate(units: int, level: float, seed: int) -> tuple[dict, np.ndarray, Stimulus, np.ndarray, float]:
    """pRFs of :data:`GROUPS` (``units`` each), their time courses, stimulus, nuisance and TR."""
    rng = np.random.default_rng(seed)
    config = SynthConfig()
    run = bar_apertures(config)
    stim = Stimulus(np.concatenate([run, run]), config.fov_deg, run_lengths=(len(run), len(run)))
    ecc = np.concatenate([rng.uniform(lo, hi, units) for lo, hi in GROUPS.values()])
    angle = rng.uniform(0, 2 * np.pi, ecc.size)
    truth = {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "sigma": (0.25 + 0.12 * ecc) * np.exp(rng.normal(0, 0.2, ecc.size)),
        "amplitude": rng.uniform(1, 3, ecc.size),
        "baseline": np.zeros(ecc.size),
    }
    clean = predict(truth, stim, config.tr, dtype="float64")
    noise = rng.standard_normal(clean.shape)
    for start in (0, len(run)):
        for t in range(start + 1, start + len(run)):
            noise[:, t] = AR1 * noise[:, t - 1] + np.sqrt(1 - AR1**2) * noise[:, t]
    nuisance = np.zeros((2 * len(run), 2))
    nuisance[: len(run), 0] = nuisance[len(run) :, 1] = 1.0
    data = clean + level * float(np.median(clean.std(axis=1))) * noise
    return truth, data, stim, nuisance, config.tr


def measure(units: int, level: float, seed: int) -> list[dict]:
    """One record per group of :data:`GROUPS`."""
    truth, data, stim, nuisance, tr = simulate(units, level, seed)
    res = fit_prf(
        data, stim, tr, nuisance=nuisance, noise=NoiseModel("ar1", (AR1,), 1), sigma_prior="eccentricity"
    )
    unc, params, radius = res.uncertainty, res.params, stim.scales["radius"]
    codes = catalog.status_codes(res.status)
    doubtful = catalog.doubtful(res.status)
    other_bits = catalog.DOUBTFUL_BITS & ~catalog.STATUS_BITS["uncertain"]
    centre_se = np.fmax(unc.se["x"], unc.se["y"])
    others = (
        ((codes & other_bits) != 0)
        | ~np.isfinite(centre_se)
        | ~np.isfinite(unc.se["sigma"])
        | (centre_se > catalog.CENTRE_SE_LIMIT * radius)
        | (unc.upper["sigma"] - unc.lower["sigma"] > catalog.SIGMA_WIDTH_LIMIT * radius)
    )
    edge = np.hypot(params["x"], params["y"]) + Z95 * unc.se["eccentricity"] > radius
    refined = np.isfinite(params["x"]) & ~np.isnan(unc.se["x"])
    error = np.hypot(params["x"] - truth["x"], params["y"] - truth["y"])
    covered = (np.abs(params["x"] - truth["x"]) <= Z95 * unc.se["x"]) & (
        np.abs(params["y"] - truth["y"]) <= Z95 * unc.se["y"]
    )
    signal = np.nan_to_num(res.r2) >= 0.1
    records = []
    for i, (name, _) in enumerate(GROUPS.items()):
        group = np.zeros(error.size, dtype=bool)
        group[i * units : (i + 1) * units] = True
        group &= refined
        only_edge = group & edge & ~others
        kept = {"now": group & ~doubtful, "without_edge": group & ~others}

        def summary(rows: np.ndarray) -> dict:
            off3, off5 = rows & (error > 3), rows & (error > 5)
            return {
                "units": int(rows.sum()),
                "xy_coverage": round(float(np.mean(covered[rows])), 3) if rows.any() else None,
                "off_3deg": int(off3.sum()),
                "off_5deg": int(off5.sum()),
                "off_5deg_r2_ge_0.1": int((off5 & signal).sum()),
            }

        records.append(
            {
                "noise": level,
                "group": name,
                "refined": int(group.sum()),
                "doubtful": round(float(np.mean(doubtful[group])), 3),
                "only_edge": int(only_edge.sum()),
                "only_edge_median_error": round(float(np.median(error[only_edge])), 2)
                if only_edge.any()
                else None,
                "only_edge_xy_coverage": round(float(np.mean(covered[only_edge])), 3)
                if only_edge.any()
                else None,
                **{f"unflagged_{k}": summary(v) for k, v in kept.items()},
            }
        )
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--units", type=int, default=200, help="pRFs per group")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--table", type=Path, help="also append the JSON lines to this file")
    args = parser.parse_args()
    for level in args.noise:
        for record in measure(args.units, level, args.seed):
            emit(record, args.table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
