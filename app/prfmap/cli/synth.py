"""The ``prfmap-synth`` console script: write a synthetic BIDS + fMRIPrep dataset with known pRFs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from prfmap import __version__
from prfmap.cli.parser import (
    PrfmapArgumentParser,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
)
from prfmap.synth import DEFAULT_NOISE, SPACES, SynthConfig, make_synthetic_dataset


def build_parser() -> argparse.ArgumentParser:
    """The ``prfmap-synth`` command line.

    Returns
    -------
    argparse.ArgumentParser
        Usage errors exit 64 with one line on stderr.
    """
    parser = PrfmapArgumentParser(
        prog="prfmap-synth",
        description=(
            "Write a synthetic retinotopy dataset: raw BIDS (events with stim_file, bar-sweep "
            "apertures in stimuli/), fMRIPrep-style derivatives (BOLD with HRF, drift and AR(1) "
            "noise) and the ground-truth pRFs under derivatives/prfsynth."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="folder to write to")
    parser.add_argument("--subjects", type=positive_int, default=1, metavar="N",
                        help="number of participants")
    parser.add_argument("--runs", type=positive_int, default=2, metavar="N",
                        help="runs per participant, all with the same bar sweeps")
    parser.add_argument("--space", choices=SPACES, default="fsaverage5",
                        help="fsaverage5 GIFTI, fsLR CIFTI (den-91k) or a T1w NIfTI volume")
    parser.add_argument("--noise", type=nonnegative_float, default=DEFAULT_NOISE,
                        metavar="SD", help="AR(1) noise standard deviation, percent signal change")
    parser.add_argument("--tr", type=positive_float, default=1.5, metavar="S",
                        help="repetition time in seconds")
    parser.add_argument("--seed", type=nonnegative_int, default=0, metavar="N",
                        help="random seed")
    parser.add_argument("--dummy-scans", type=nonnegative_int, default=0, metavar="N",
                        help="non-steady-state volumes at the start of each run, flagged in the "
                        "confounds as fMRIPrep does")
    parser.add_argument("--small", action="store_true",
                        help="a quick test-size dataset (smaller aperture, shorter runs, few "
                        "grayordinates/voxels for fsLR and T1w)")
    parser.add_argument("--overwrite", action="store_true",
                        help="write into OUT_DIR even if it is not empty")
    parser.add_argument("--version", action="version", version=f"prfmap-synth {__version__}")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``prfmap-synth OUT_DIR [options]``.

    Parameters
    ----------
    argv : sequence of str, optional
        Arguments after the program name (default ``sys.argv[1:]``).

    Returns
    -------
    int
        0 on success; 64 for usage errors (one line on stderr).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    out = args.out_dir
    if out.exists() and not out.is_dir():
        parser.error(f"OUT_DIR {out} exists and is not a folder; choose another path")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        parser.error(f"OUT_DIR {out} is not empty; choose a new folder or pass --overwrite")
    config = SynthConfig(
        subjects=args.subjects, runs=args.runs, space=args.space, noise=args.noise, tr=args.tr,
        seed=args.seed, small=args.small, dummy_scans=args.dummy_scans,
    )
    make_synthetic_dataset(out, config)
    print(f"prfmap-synth: wrote {args.subjects} participant(s) × {args.runs} run(s) in "
          f"{args.space} to {out} (ground truth: {out / 'derivatives' / 'prfsynth'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
