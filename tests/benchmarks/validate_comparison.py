"""Per-vertex model comparison on held-out synthetic participants (issue 31's Must show 1).

For each case, ``prfmap-synth`` writes a participant whose pRF vertices are drawn from the Gaussian,
CSS (n 0.2–0.5) and DoG (surround 2–4 σ, ratio 0.1–0.3) models (or the Gaussian alone), with the
default realistic noise (AR(1), aliased physiology, spread levels), drifts, per-vertex HRFs and slice
timing, under a stimulus design (``--stimulus-design``: bars, multiwidth, hcp); ``prfmap ...
participant --model all`` fits and compares the four models; the winners of the ``model-best`` maps
are scored against the true model, over vertices whose winner cvr2 ≥ 0.2: all of them, those the
identifiability oracle (:mod:`prfmap.synth.oracle`) calls distinguishable, and each per SNR bin:

    python tests/benchmarks/validate_comparison.py --out /tmp/cmp [--seed 21] [--json FILE] \
        [--stimulus-design bars multiwidth hcp] [--noise 0.25 0.5 1.0] [--runs 2 4]

Prints one table row per (case, true model, subset): vertices, share won by each model, share
correct; and the share of each non-Gaussian model's pRFs that the oracle calls distinguishable; then
the Markdown table of ``docs/validation.md`` (per SNR bin: the distinguishable CSS and DoG vertices,
all the Gaussian ones).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "app"))

from prfmap.synth import load_truth  # noqa: E402
from prfmap.synth.dataset import read_map  # noqa: E402
from prfmap.synth.oracle import identifiability  # noqa: E402

BIN = Path(sys.executable).parent
MODELS = ("gauss", "css", "dog", "dn")
TRUE = ("gauss", "css", "dog")
CVR2_MIN = 0.2
SNR_BINS = (0.0, 0.5, 1.0, np.inf)
"""Bins of each vertex's signal-to-noise ratio: the noise-free response's standard deviation (drifts
out) over the noise's, both as the oracle measures them."""


@dataclass(frozen=True)
class Case:
    """One synthetic participant: its seed, noise, runs, true models, bar widths and design."""

    seed: int
    noise: float
    runs: int
    prf_models: tuple[str, ...]
    bar_widths: tuple[float, ...] = ()
    design: str = "bars"

    @property
    def name(self) -> str:
        """The participant's folder name."""
        name = f"seed{self.seed}_noise{self.noise:g}_runs{self.runs}_{'-'.join(self.prf_models)}"
        name += f"_bars{'-'.join(f'{w:g}' for w in self.bar_widths)}" if self.bar_widths else ""
        return name + (f"_{self.design}" if self.design != "bars" else "")


def run_case(out: Path, case: Case, fit: str, backend: str = "jax") -> dict:
    """Write one participant, fit and compare its models, score the winners."""
    seed, noise, runs, prf_models, design = case.seed, case.noise, case.runs, case.prf_models, case.design
    name = case.name
    widths = ["--bar-widths", *(f"{w:g}" for w in case.bar_widths)] if case.bar_widths else []
    suffix = "" if backend == "jax" else f"-{backend}"
    bids, result = out / name / "bids", out / name / f"out{suffix}"
    if not bids.exists():
        subprocess.run(
            [str(BIN / "prfmap-synth"), str(bids), "--seed", str(seed), "--noise", str(noise),
             "--runs", str(runs), "--prf-models", *prf_models, *widths, "--stimulus-design", design],
            check=True, capture_output=True,
        )  # fmt: skip
    start = time.perf_counter()
    if not list(result.glob("sub-01/func/*_model-best_desc-winner_boldmap.*")):
        subprocess.run(
            [str(BIN / "prfmap"), str(bids), str(result), "participant", "--model", *fit.split(),
             "--work-dir", str(out / name / f"work{suffix}"), "--no-report", "--backend", backend],
            check=True, capture_output=True,
        )  # fmt: skip
    seconds = time.perf_counter() - start
    truth = load_truth(bids)
    func = result / "sub-01" / "func"
    winner = read_map(func, "*_model-best_desc-winner_boldmap")
    np.save(out / name / f"winner{suffix}.npy", winner)
    cvr2 = read_map(func, "*_model-best_desc-cvr2_boldmap")
    true_model = truth.get("truemodel", np.where(truth["mask"], 0.0, np.nan))
    oracle = identifiability(bids)
    snr = oracle.signal_sd / oracle.noise_sd
    rows, shares = [], {}
    for code, model in enumerate(TRUE):
        of_model = truth["mask"] & (true_model == code)
        if not of_model.any():
            continue
        kept = of_model & (cvr2 >= CVR2_MIN)
        subsets = {"all": kept}
        if code:  # the oracle's distinguishable share, then recognition where it is distinguishable
            subsets["distinguishable"] = kept & oracle.distinguishable
        for low, high in zip(SNR_BINS[:-1], SNR_BINS[1:], strict=True):
            subsets[f"snr {low:g}-{high:g}"] = kept & (snr >= low) & (snr < high)
            if code:
                subsets[f"distinguishable, snr {low:g}-{high:g}"] = (
                    subsets[f"snr {low:g}-{high:g}"] & oracle.distinguishable
                )
        for subset, chosen in subsets.items():
            won = {m: float(np.mean(winner[chosen] == i)) if chosen.any() else float("nan")
                   for i, m in enumerate(MODELS)}  # fmt: skip
            rows.append(
                {
                    "true": model,
                    "subset": subset,
                    "vertices": int(chosen.sum()),
                    "won": won,
                    "correct": won[model],
                }
            )
        if code:
            shares[model] = float(oracle.distinguishable[of_model].mean())
    noise_units = truth["noise"]
    return {
        "case": name,
        "noise": noise,
        "runs": runs,
        "bar_widths": list(case.bar_widths),
        "design": design,
        "seconds": round(seconds, 1),
        "rows": rows,
        "distinguishable_share": shares,
        "noise_vertices_non_gauss": float(np.mean(winner[noise_units & np.isfinite(winner)] != 0)),
    }


def markdown_rows(case: dict) -> list[str]:
    """The case's rows of the table in ``docs/validation.md``: recognition over all vertices, over
    those the oracle calls distinguishable, and per SNR bin (distinguishable ones for CSS and DoG)."""
    rows = {(r["true"], r["subset"]): r for r in case["rows"]}
    gauss_only = "css" not in case["case"]

    def cell(true: str, subset: str) -> str:
        row = rows.get((true, subset))
        if row is None or row["vertices"] == 0:
            return "–"
        return f"{100 * row['correct']:.1f} % of {row['vertices']}"

    out = []
    for true in TRUE:
        if (true, "all") not in rows:
            continue
        prefix = "distinguishable, " if true != "gauss" else ""
        share = case["distinguishable_share"].get(true)
        edges = zip(SNR_BINS[:-1], SNR_BINS[1:], strict=True)
        bins = [cell(true, f"{prefix}snr {lo:g}-{hi:g}") for lo, hi in edges]
        out.append(
            " | ".join(
                [
                    f"| {case['design']}",
                    f"{case['noise']:g}",
                    str(case["runs"]),
                    true + (" (Gaussian-only participant)" if gauss_only else ""),
                    cell(true, "all"),
                    "–" if share is None else f"{100 * share:.1f} %",
                    cell(true, "distinguishable") if true != "gauss" else "–",
                    *bins,
                ]
            )
            + " |"
        )
    return out


def compare_backends(args: argparse.Namespace) -> None:
    """The first case on JAX, PyTorch and TensorFlow: the share of vertices with the same winner."""
    noise, runs = args.noise[0], args.runs[0]
    winners = {}
    for backend in ("jax", "torch", "tensorflow"):
        case = run_case(
            args.out, Case(args.seed, noise, runs, TRUE, tuple(args.bar_widths)), args.fit, backend
        )
        suffix = "" if backend == "jax" else f"-{backend}"
        winners[backend] = np.load(args.out / case["case"] / f"winner{suffix}.npy")
        print(f"{backend}: {case['seconds']} s", flush=True)
    fitted = np.isfinite(winners["jax"])
    for backend in ("torch", "tensorflow"):
        same = np.mean(winners[backend][fitted] == winners["jax"][fitted])
        print(
            f"{backend} vs jax: the same winner at {100 * same:.2f} % of {int(fitted.sum())} vertices",
            flush=True,
        )
        contested = fitted & (
            (winners["jax"] > 0) | (winners[backend] > 0)
        )  # a non-Gaussian winner on either
        agree = np.mean(winners[backend][contested] == winners["jax"][contested]) if contested.any() else 1.0
        print(
            f"{backend} vs jax: of the {int(contested.sum())} vertices either gives to a non-Gaussian model, "
            f"the same winner at {100 * agree:.2f} %",
            flush=True,
        )


def main() -> None:
    """Run the cases and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seed", type=int, default=21)
    parser.add_argument("--noise", type=float, nargs="+", default=[0.5, 1.0])
    parser.add_argument("--runs", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--fit", default="all", help="the --model value(s) of the fit")
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--bar-widths",
        type=float,
        nargs="+",
        default=[],
        help="prfmap-synth --bar-widths (default: one width)",
    )
    parser.add_argument(
        "--stimulus-design", nargs="+", default=["bars"], help="prfmap-synth --stimulus-design, each in turn"
    )
    parser.add_argument("--backends", action="store_true", help="only the first case, on all three backends")
    args = parser.parse_args()
    if args.backends:
        compare_backends(args)
        return
    cases = [(d, n, r, TRUE) for d in args.stimulus_design for n in args.noise for r in args.runs]
    cases.append((args.stimulus_design[0], args.noise[0], args.runs[0], ("gauss",)))  # Gaussian only
    results = []
    for design, noise, runs, prf_models in cases:
        widths = tuple(args.bar_widths)
        case = run_case(args.out, Case(args.seed, noise, runs, prf_models, widths, design), args.fit)
        results.append(case)
        for row in case["rows"]:
            won = " ".join(f"{m} {100 * v:5.1f}" for m, v in row["won"].items())
            print(
                f"{case['case']:<44} true {row['true']:<5} {row['subset']:<30} n={row['vertices']:4d}  "
                f"won % {won}  correct {100 * row['correct']:.1f} %",
                flush=True,
            )
        for model, share in case["distinguishable_share"].items():
            print(f"{case['case']:<44} {model} pRFs distinguishable by the oracle: {100 * share:.1f} %")
        print(f"{case['case']:<40} noise-only vertices won by a non-Gaussian model "
              f"{100 * case['noise_vertices_non_gauss']:.1f} %; {case['seconds']} s", flush=True)  # fmt: skip
    print("| design | noise | runs | true model | correct, all | distinguishable (oracle) | correct, "
          "distinguishable | SNR 0–0.5 | SNR 0.5–1 | SNR ≥ 1 |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|---|")
    for case in results:
        print("\n".join(markdown_rows(case)))
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
