"""The ``prfmap-synth`` console script: write a synthetic BIDS + fMRIPrep dataset with known pRFs."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from prfmap import __version__
from prfmap.cli.parser import (
    PrfmapArgumentParser,
    fraction,
    nonnegative_float,
    nonnegative_int,
    positive_float,
    positive_int,
)
from prfmap.synth.config import (
    CF_AREAS,
    CLEAN,
    DEFAULT_NOISE,
    PRF_MODELS,
    SLICE_TIMINGS,
    SPACES,
    STIMULUS_DESIGNS,
    SWEEP_ORDERS,
    SynthConfig,
)
from prfmap.synth.model import NOISE_MODELS


def _dispersion_jitter(value: str) -> float:
    number = nonnegative_float(value)
    if number >= 1:
        raise argparse.ArgumentTypeError(f"{value!r} must lie in [0, 1)")
    return number


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
            "apertures in stimuli/), fMRIPrep-style derivatives (BOLD with per-unit HRFs, slice "
            "timing as the sidecars say, drifts, noise and units without a pRF) and the ground "
            "truth under derivatives/prfsynth."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("out_dir", type=Path, metavar="OUT_DIR", help="folder to write to")
    parser.add_argument(
        "--subjects", type=positive_int, default=1, metavar="N", help="number of participants"
    )
    parser.add_argument(
        "--runs",
        type=positive_int,
        default=2,
        metavar="N",
        help="runs per participant, all with the same bar sweeps",
    )
    parser.add_argument(
        "--space",
        choices=SPACES,
        default="fsaverage5",
        help="fsaverage5 GIFTI, fsLR CIFTI (den-91k), a T1w NIfTI volume, or fsnative GIFTI on "
        "synthetic participant surfaces (written with fMRIPrep's anat surfaces)",
    )
    parser.add_argument(
        "--noise",
        type=nonnegative_float,
        default=DEFAULT_NOISE,
        metavar="SD",
        help="AR(1) noise standard deviation, percent signal change",
    )
    parser.add_argument(
        "--tr", type=positive_float, default=1.5, metavar="S", help="repetition time in seconds"
    )
    parser.add_argument("--seed", type=nonnegative_int, default=0, metavar="N", help="random seed")
    parser.add_argument(
        "--dummy-scans",
        type=nonnegative_int,
        default=0,
        metavar="N",
        help="non-steady-state volumes at the start of each run, flagged in the confounds as fMRIPrep does",
    )
    parser.add_argument(
        "--slice-timing",
        choices=SLICE_TIMINGS,
        default="uncorrected",
        help="uncorrected: each unit sampled at its slice's time, SliceTiming in "
        "the raw sidecars, SliceTimingCorrected false; corrected: every unit at "
        "fMRIPrep's reference, SliceTimingCorrected true with its StartTime; start: "
        "every unit at the start of the TR, no SliceTiming, SliceTimingCorrected "
        "false; middle: every unit at TR/2, StartTime TR/2, no SliceTiming",
    )
    parser.add_argument(
        "--slice-time-ref",
        type=fraction,
        default=0.5,
        metavar="F",
        help="with --slice-timing corrected: fMRIPrep's --slice-time-ref, the "
        "fraction of the slice acquisition range the data were corrected to",
    )
    parser.add_argument(
        "--hrf-delay-jitter",
        type=nonnegative_float,
        default=1.0,
        metavar="S",
        help="each pRF unit's HRF delay is SPM's 6 s plus a shift drawn uniformly in [-S, S] seconds",
    )
    parser.add_argument(
        "--hrf-dispersion-jitter",
        type=_dispersion_jitter,
        default=0.2,
        metavar="F",
        help="each pRF unit's HRF peak dispersion is drawn uniformly in [1 - F, 1 + F]",
    )
    parser.add_argument(
        "--noise-model",
        choices=NOISE_MODELS,
        default="realistic",
        help="realistic: noise levels spread across units, AR(1) noise plus "
        "aliased respiration and cardiac cycles; global: the same plus a slow "
        "fluctuation shared by every unit (10 %% of the variance); ar1: AR(1) "
        "noise of one level",
    )
    parser.add_argument(
        "--noise-fraction",
        type=fraction,
        default=0.1,
        metavar="F",
        help="fraction of the units inside the mapped region without a pRF (noise only)",
    )
    parser.add_argument(
        "--drift",
        type=nonnegative_float,
        default=1.0,
        metavar="SCALE",
        help="scale of the slow drifts (1: linear trend sd 0.7 %%, half cosine sd 0.5 %%; 0: none)",
    )
    parser.add_argument(
        "--noise-runs",
        type=nonnegative_int,
        default=0,
        metavar="N",
        help="the last N runs carry no pRF responses, only drifts and noise (a "
        "validation case for cross-validated r²)",
    )
    parser.add_argument(
        "--clean",
        action="store_true",
        help="the earlier, idealised data: one canonical HRF, every volume "
        "sampled mid-TR (StartTime TR/2), AR(1) noise, a pRF in every unit of "
        "the mapped region (overrides the five options above but --drift)",
    )
    parser.add_argument(
        "--hrf-delay-shift",
        type=float,
        default=0.0,
        metavar="S",
        help="add S seconds to every pRF unit's HRF delay (the whole response "
        "later than SPM's for S > 0, as a participant's or another tool's HRF can "
        "be); --clean keeps it",
    )
    parser.add_argument(
        "--prf-models",
        nargs="+",
        choices=PRF_MODELS,
        default="gauss",
        metavar="MODEL",
        help="pRF models (gauss, css, dog): each pRF unit follows one of those listed, drawn "
        "uniformly at random; its x, y, sigma, drawn amplitude and HRF, and the noise, stay those of "
        "the Gaussian-only dataset. css: the Gaussian's overlap with the aperture to the power n ~ "
        "U(0.2, 0.5); dog: the overlap less ratio ~ U(0.1, 0.3) times that of a unit-integral "
        "surround Gaussian of size sigma × U(2, 4). Beyond gauss alone the ground truth adds "
        "desc-truemodel (0 gauss, 1 css, 2 dog, as its sidecar's Levels say), desc-n, "
        "desc-sigmasurround and desc-amplitudesurround (ratio × amplitude)",
    )
    parser.add_argument(
        "--stimulus-design",
        choices=STIMULUS_DESIGNS,
        default="bars",
        help="bars: eight sweeps of 2.5° bars (the default); multiwidth: the sweeps with 2.5° "
        "then 10° bars (runs twice as long), two sizes that tell a compressive pRF from a "
        "Gaussian; hcp: in one run, as the HCP 7T retinotopy, a 90° wedge turning "
        "counter-clockwise and a 2.5° ring expanding (two cycles each), then the bar sweeps: "
        "rings and wedges reach a pRF's surround without its centre",
    )
    parser.add_argument(
        "--sweep-order",
        choices=SWEEP_ORDERS,
        default="same",
        help="same: every run sees the same apertures (the default); shuffled: every run after the "
        "first sweeps the bars in its own random order of the eight directions (its own file "
        "stimuli/<design>_order-<run>.nii.gz): runs whose fits are independent tests of each other",
    )
    parser.add_argument(
        "--bar-widths",
        nargs="+",
        type=positive_float,
        default=None,
        metavar="W",
        help="bar widths in degrees, each at most the 20° field of view, instead of the design's: "
        "the eight-sweep sequence (blank periods included) is repeated once per width, in the "
        "order given, so runs get longer by that factor",
    )
    parser.add_argument(
        "--small",
        action="store_true",
        help="a quick test-size dataset (smaller aperture, shorter runs, few "
        "grayordinates/voxels for fsLR and T1w)",
    )
    parser.add_argument(
        "--voxel-mm",
        type=positive_float,
        default=3.0,
        metavar="MM",
        help="T1w only: the voxels' side in mm (default: 3); the head keeps its size, so smaller voxels "
        "give more of them, each spanning less of the retinotopic map",
    )
    _add_connective_options(parser)
    parser.add_argument("--overwrite", action="store_true", help="write into OUT_DIR even if it is not empty")
    parser.add_argument("--version", action="version", version=f"prfmap-synth {__version__}")
    return parser


def _add_connective_options(parser: argparse.ArgumentParser) -> None:
    defaults = SynthConfig()
    group = parser.add_argument_group("connective fields (--space fsaverage5)")
    group.add_argument(
        "--cf-source",
        choices=CF_AREAS,
        default=None,
        metavar="AREA",
        help="a benson14 area (V1, V2, V3, hV4, VO1, VO2, LO1, LO2, TO1, TO2, V3b, V3a) whose vertices "
        "drive connective-field targets: each target's time series is 1 × the mean of the source's "
        "noise-free signal weighted by a Gaussian of geodesic distance (along the source's "
        "midthickness surface, same hemisphere) from a centre vertex, plus the usual drifts and "
        "noise; the ground truth adds desc-truecfcenter (the centre's vertex index, -1 where none), "
        "desc-truecfsize (mm), desc-truecfgain, desc-truecfbaseline and the cfsource and cftarget "
        "masks (default: no connective fields)",
    )
    group.add_argument(
        "--cf-targets",
        nargs="+",
        choices=CF_AREAS,
        default=list(defaults.cf_targets),
        metavar="AREA",
        help="the benson14 areas whose vertices get connective-field time series (with bar runs, "
        "those the synth gave a pRF; each centred on the source vertex whose pRF centre is nearest "
        "its own, and written without a pRF of its own)",
    )
    group.add_argument(
        "--cf-sizes",
        nargs=2,
        type=positive_float,
        default=list(defaults.cf_sizes),
        metavar=("LOW", "HIGH"),
        help="the range of the targets' connective-field sizes in mm, drawn uniformly per target",
    )
    group.add_argument(
        "--cf-null-fraction",
        type=fraction,
        default=defaults.cf_null_fraction,
        metavar="F",
        help="the share of target vertices that carry noise only (truecfcenter -1, size NaN)",
    )
    group.add_argument(
        "--rest",
        action="store_true",
        help="with --cf-source: resting-state runs (task rest, no events, no stimuli): every run an "
        "independent random field on the source (white noise smoothed along its surface, convolved "
        "with the HRF, sd 0.6 %%), targets centred on uniformly random source vertices, every other "
        "vertex noise only",
    )
    group.add_argument(
        "--cf-source-smoothness",
        type=positive_float,
        default=defaults.cf_source_smoothness,
        metavar="MM",
        help="with --rest: the standard deviation (mm along the source's surface) of the Gaussian "
        "smoothing the source's random field",
    )


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
    if args.noise_runs > args.runs:
        parser.error(f"--noise-runs {args.noise_runs} exceeds --runs {args.runs}")
    fov = SynthConfig().fov_deg
    too_wide = [w for w in args.bar_widths or () if w > fov]
    if too_wide:
        parser.error(f"--bar-widths {too_wide[0]:g} exceeds the {fov:g}° field of view")
    if args.voxel_mm != 3.0 and args.space != "T1w":
        parser.error(f"--voxel-mm applies to --space T1w, not {args.space}")
    if args.cf_source is not None and args.space != "fsaverage5":
        parser.error(f"--cf-source needs --space fsaverage5 (the benson14 areas' mesh), not {args.space}")
    if args.rest and args.cf_source is None:
        parser.error("--rest needs --cf-source: resting-state runs carry connective fields only")
    if args.cf_source is not None and args.cf_source in args.cf_targets:
        parser.error(f"--cf-targets names the source {args.cf_source}; a target area must be another area")
    if args.cf_sizes[0] > args.cf_sizes[1]:
        parser.error(f"--cf-sizes {args.cf_sizes[0]:g} {args.cf_sizes[1]:g}: LOW exceeds HIGH")
    if out.is_dir() and any(out.iterdir()) and not args.overwrite:
        parser.error(f"OUT_DIR {out} is not empty; choose a new folder or pass --overwrite")
    realism = {
        "slice_timing": args.slice_timing,
        "hrf_delay_jitter": args.hrf_delay_jitter,
        "hrf_dispersion_jitter": args.hrf_dispersion_jitter,
        "noise_model": args.noise_model,
        "noise_fraction": args.noise_fraction,
    }
    config = SynthConfig(
        subjects=args.subjects,
        runs=args.runs,
        space=args.space,
        noise=args.noise,
        tr=args.tr,
        seed=args.seed,
        small=args.small,
        dummy_scans=args.dummy_scans,
        slice_time_ref=args.slice_time_ref,
        drift=args.drift,
        noise_runs=args.noise_runs,
        hrf_delay_shift=args.hrf_delay_shift,
        prf_models=args.prf_models,  # a list, or the default's one name
        bar_widths=tuple(args.bar_widths or ()),
        stimulus_design=args.stimulus_design,
        sweep_order=args.sweep_order,
        voxel_mm=args.voxel_mm,
        cf_source=args.cf_source,
        cf_targets=tuple(args.cf_targets),
        cf_sizes=tuple(args.cf_sizes),
        cf_null_fraction=args.cf_null_fraction,
        rest=args.rest,
        cf_source_smoothness=args.cf_source_smoothness,
        **(CLEAN if args.clean else realism),
    )
    # Deferred: --help needs none of the forward model and writers (nilearn's fsaverage, the meshes).
    from prfmap.synth.dataset import make_synthetic_dataset

    make_synthetic_dataset(out, config)
    print(
        f"prfmap-synth: wrote {args.subjects} participant(s) × {args.runs} run(s) in "
        f"{args.space} to {out} (ground truth: {out / 'derivatives' / 'prfsynth'})"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
