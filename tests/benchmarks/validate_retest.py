"""Test–retest consistency of prfmap's intervals: fit each run alone, compare the two estimates.

For units with signal in both runs (r² ≥ 0.1 and not flagged doubtful in each fit), the share whose
two estimates differ by at most ``1.96 · sqrt(se₁² + se₂²)`` is ≈ 95 % when the standard errors are
right, whatever generated the data: it needs no ground truth, so it runs on real recordings as on
``prfmap-synth`` participants. Also printed: the median |Δ| and the median predicted SD of the
difference, per parameter (x, y, σ), and the units compared.

    KERAS_BACKEND=jax python tests/benchmarks/validate_retest.py BIDS_DIR [--subject 01]
        [--runs 1 2] [--keep DIR] [--json FILE] [-- extra prfmap options]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from validate_timing_cvr2 import APP, participant  # noqa: E402

sys.path.insert(0, str(APP))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from helpers import read_maps  # noqa: E402
from prfmap.engine import catalog  # noqa: E402

Z95 = 1.959963984540054
KEYS = ("x", "y", "sigma")
R2_MIN = 0.1


def with_signal(maps: dict[str, np.ndarray]) -> np.ndarray:
    """Units with r² ≥ :data:`R2_MIN` whose fit is not flagged doubtful."""
    status = np.nan_to_num(maps["status"]).astype(np.int64)
    doubtful = (status & catalog.DOUBTFUL_BITS) != 0
    return (np.nan_to_num(maps["r2"], nan=-1.0) >= R2_MIN) & ~doubtful


def consistency(first: dict, second: dict, se_first: dict, se_second: dict) -> dict:
    """The test–retest record of two fits' maps and standard errors.

    Parameters
    ----------
    first, second : dict
        ``x``, ``y``, ``sigma``, ``r2``, ``status`` of each run's fit, (units,) each.
    se_first, se_second : dict
        Their standard errors of ``x``, ``y``, ``sigma``.

    Returns
    -------
    dict
        ``units`` compared and, per parameter, the share within the 95 % bound, the median |Δ| and
        the median predicted SD of Δ.
    """
    both = with_signal(first) & with_signal(second)
    record: dict = {"units": int(both.sum())}
    for key in KEYS:
        sd = np.hypot(se_first[key], se_second[key])
        ok = both & np.isfinite(sd)
        delta = np.abs(first[key] - second[key])
        record[key] = {
            "within_95": round(float(np.mean(delta[ok] <= Z95 * sd[ok])), 3) if ok.any() else None,
            "median_abs_delta": round(float(np.median(delta[ok])), 3) if ok.any() else None,
            "median_sd": round(float(np.median(sd[ok])), 3) if ok.any() else None,
            "units": int(ok.sum()),
        }
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bids", type=Path)
    parser.add_argument("--subject", default="01")
    parser.add_argument("--runs", nargs=2, default=["1", "2"], help="the two runs, fitted one at a time")
    parser.add_argument("--keep", type=Path, help="keep the fits' outputs here")
    parser.add_argument("--json", type=Path)
    parser.add_argument("extra", nargs="*", help="more prfmap options, after --")
    args = parser.parse_args()
    scratch = args.keep or Path(tempfile.mkdtemp(prefix="prfmap-retest-"))
    fits, errors, seconds = [], [], []
    for run in args.runs:
        out = scratch / f"run-{run}"
        options = ("--participant-label", args.subject, "--run", run, *args.extra)
        seconds.append(round(participant(args.bids, out, *options), 1))
        fits.append(read_maps(args.bids, out, [*KEYS, "r2", "status"], subject=args.subject))
        errors.append(read_maps(args.bids, out, KEYS, subject=args.subject, stat="se"))
    record = {
        "bids": str(args.bids),
        "subject": args.subject,
        "runs": args.runs,
        "seconds": seconds,
        **consistency(fits[0], fits[1], errors[0], errors[1]),
    }
    print(json.dumps(record), flush=True)
    if args.json:
        args.json.write_text(json.dumps(record, indent=1) + "\n")
    if args.keep is None:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
