"""The ``prfmap-stimulus`` console script: apertures from screenshots, a screen recording or a ``.mat`` stack.

It writes one aperture file in prfmap's convention with its JSON sidecar, a QC sheet (PNG and HTML)
beside it, and, with ``--events``, the runs' ``stim_file`` column; a summary goes to the terminal.
Errors are one line on stderr (``prfmap-stimulus: error: ...``) with the exit codes of
:mod:`prfmap.errors`, and nothing is written.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from prfmap import __version__
from prfmap.cli.parser import PrfmapArgumentParser, nonnegative_float, positive_float, positive_int
from prfmap.errors import ExitCode, PrfmapError, one_line, output_error
from prfmap.stimulus.geometry import CENTRES

if TYPE_CHECKING:
    from prfmap.stimulus import Options

PROG = "prfmap-stimulus"


def _level(value: str) -> float:
    number = nonnegative_float(value)
    if number > 255:
        raise argparse.ArgumentTypeError(f"{value!r} must lie in [0, 255] (8-bit levels)")
    return number


def build_parser() -> argparse.ArgumentParser:
    """The ``prfmap-stimulus`` command line (usage errors exit 64 with one line on stderr)."""
    parser = PrfmapArgumentParser(
        prog=PROG,
        description=(
            "Make a stimulus aperture file (NIfTI rows × columns × 1 × volumes in [0, 1], row 0 = top, with "
            "its JSON sidecar) from screenshots, a screen recording or a .mat image stack and sequence. "
            "Stimulus is what differs from the background colour, whatever the carrier; static marks (the "
            "fixation mark, letterbox bars) never are. A QC sheet (PNG + HTML) is written beside the output."
        ),
        epilog="Docs: docs/stimuli.md. Exit codes: 64 usage or geometry, 65 unusable input, 66 missing "
        "input.",
    )
    parser.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help="a folder or glob of PNG/JPEG screenshots (in natural order), picture files, one "
        "video (MP4/AVI/MOV/MKV) or one .mat file",
    )
    parser.add_argument(
        "--output",
        "-o",
        type=Path,
        required=True,
        metavar="FILE.nii.gz",
        help="aperture file to write (e.g. bids/stimuli/bars.nii.gz); its sidecar FILE.json",
    )
    _geometry_and_timing(parser)
    _mat_and_detection(parser)
    _crop_and_output(parser)
    return parser


def _geometry_and_timing(parser: argparse.ArgumentParser) -> None:
    """The viewing geometry and the timing options."""
    geometry = parser.add_argument_group("geometry (the screen's, or the stimulated width)")
    geometry.add_argument(
        "--screen-size-cm",
        type=positive_float,
        nargs=2,
        metavar=("W", "H"),
        help="width and height of the area the frames show, centimetres",
    )
    geometry.add_argument(
        "--screen-distance-cm", type=positive_float, metavar="D", help="eye to screen, centimetres"
    )
    geometry.add_argument(
        "--fov-deg",
        type=positive_float,
        metavar="DEG",
        help="instead: the full width of the stimulated region, degrees, edge to edge (the outer "
        "pixels' outer edges; the sidecar's FieldOfViewDeg, which prfmap reads, is the distance between "
        "the outer pixel centres: this width × (n - 1) / n for n written columns)",
    )
    geometry.add_argument(
        "--fov-centres-deg",
        type=positive_float,
        metavar="DEG",
        help="instead: the distance between the first and last pixel centres of a row, degrees: the "
        "FieldOfViewDeg written, prfmap's --stimulus-fov-deg and prfpy's screen_size_degrees (pixel "
        "coordinates from -DEG/2 to +DEG/2)",
    )
    timing = parser.add_argument_group("timing")
    timing.add_argument(
        "--tr",
        type=positive_float,
        metavar="S",
        help="seconds per volume (needed for videos, --frame-rate and sequence timing)",
    )
    timing.add_argument(
        "--frame-rate",
        type=positive_float,
        metavar="HZ",
        help="pictures or sequence entries per second (default: one per volume; videos "
        "follow their own time stamps)",
    )
    timing.add_argument(
        "--start-time",
        type=nonnegative_float,
        default=0.0,
        metavar="S",
        help="seconds of the recording or sequence before the first volume (default 0)",
    )
    timing.add_argument(
        "--volumes",
        type=positive_int,
        metavar="N",
        help="volumes to write (default every volume the frames cover)",
    )


def _mat_and_detection(parser: argparse.ArgumentParser) -> None:
    """The .mat variables and the detection options."""
    mat = parser.add_argument_group(".mat image stack and sequence")
    mat.add_argument(
        "--images",
        metavar="VAR",
        help="the image stack (rows × cols × N or × 3 × N), e.g. stimulus.images (default: the only one)",
    )
    mat.add_argument(
        "--sequence",
        metavar="VAR",
        help="which image each frame shows, e.g. stimulus.seq "
        "(default: the only integer vector; none: each image is a frame)",
    )
    mat.add_argument(
        "--sequence-timing",
        metavar="VAR",
        help="each frame's onset in seconds, e.g. "
        "stimulus.seqtiming (default: a *tim* vector beside the sequence)",
    )
    mat.add_argument(
        "--sequence-base",
        type=int,
        choices=(0, 1),
        default=1,
        help="index of the first image (default 1, MATLAB's, where 0 shows a blank screen)",
    )
    detection = parser.add_argument_group("detection")
    detection.add_argument(
        "--background",
        type=_level,
        nargs=3,
        metavar=("R", "G", "B"),
        help="the blank screen's colour in 8-bit levels (default: detected)",
    )
    detection.add_argument(
        "--threshold",
        type=_level,
        metavar="LEVELS",
        help="colour difference from the background that counts as stimulus, 8-bit levels "
        "(default: above the noise and 8 %% of the stimulus contrast, at least 4)",
    )
    detection.add_argument(
        "--fill-px",
        type=positive_int,
        metavar="N",
        help="half-width of the box in which background-coloured carrier pixels are filled "
        "(default 1 %% of the screen's shorter side)",
    )
    fixation = detection.add_mutually_exclusive_group()
    fixation.add_argument(
        "--fixation-radius-deg",
        type=positive_float,
        metavar="R",
        help="also exclude a disk of R degrees around the centre",
    )
    fixation.add_argument(
        "--fixation-radius-px",
        type=positive_float,
        metavar="R",
        help="also exclude a disk of R pixels around the centre",
    )


def _crop_and_output(parser: argparse.ArgumentParser) -> None:
    """The crop and output options."""
    crop = parser.add_argument_group("crop")
    crop.add_argument(
        "--centre",
        choices=CENTRES,
        default="auto",
        help="the visual field's origin: the fixation mark's centre (auto: when found, else the "
        "screen's), the screen's, or the stimulated region's",
    )
    crop.add_argument(
        "--centre-px",
        type=float,
        nargs=2,
        metavar=("X", "Y"),
        help="the origin in pixels from the top-left corner of the frames",
    )
    crop.add_argument(
        "--region-px",
        type=int,
        nargs=4,
        metavar=("LEFT", "TOP", "WIDTH", "HEIGHT"),
        help="write this rectangle of the frames, instead of the detected stimulated one",
    )
    crop.add_argument("--square", action="store_true", help="pad the written rectangle to a square")
    out = parser.add_argument_group("output")
    out.add_argument(
        "--size",
        type=positive_int,
        metavar="N",
        help="columns of the written aperture (default the grid prfmap fits at, about 100)",
    )
    out.add_argument(
        "--qc",
        type=Path,
        metavar="FILE.png",
        help="QC sheet to write, an HTML page beside it (default OUTPUT's stem + _qc.png)",
    )
    out.add_argument("--no-qc", action="store_true", help="write no QC sheet")
    out.add_argument(
        "--events",
        type=Path,
        nargs="+",
        metavar="EVENTS.tsv",
        help="runs' events files whose stim_file column should name the output (created with one "
        "row when missing; OUTPUT must lie in the dataset's stimuli/ folder)",
    )
    out.add_argument("--overwrite", action="store_true", help="replace an existing OUTPUT")
    out.add_argument("--version", action="version", version=f"{PROG} {__version__}")


def options_from(args: argparse.Namespace) -> Options:
    """The :class:`Options` the parsed arguments ask for."""
    # Deferred, as in run(): --help needs none of the readers (they import nilearn, imageio, scipy.io).
    from prfmap.stimulus import Options, Screen

    screen = Screen(
        tuple(args.screen_size_cm) if args.screen_size_cm else None,
        args.screen_distance_cm,
        args.fov_deg,
        args.fov_centres_deg,
    )
    return Options(
        screen=screen,
        tr=args.tr,
        volumes=args.volumes,
        size=args.size,
        background=None if args.background is None else tuple(v / 255.0 for v in args.background),
        threshold=None if args.threshold is None else args.threshold / 255.0,
        fill_px=args.fill_px,
        fixation_radius_deg=args.fixation_radius_deg,
        fixation_radius_px=args.fixation_radius_px,
        centre=args.centre,
        centre_px=tuple(args.centre_px) if args.centre_px else None,
        square=args.square,
        region_px=tuple(args.region_px) if args.region_px else None,
    )


def run(args: argparse.Namespace, command: str) -> list[str]:
    """Make and write the aperture; returns the summary lines."""
    # Deferred: --help needs none of the readers and writers (they import nilearn, imageio, scipy.io).
    from prfmap.stimulus import make_aperture, open_source

    # Deferred as the readers are: the writers import nibabel's and the QC sheet's libraries.
    from prfmap.stimulus.output import check_output, events_update, qc_paths, write_all

    # Deferred as the readers are: the QC summary is only needed once an aperture is made.
    from prfmap.stimulus.qc import summary_rows

    check_output(args.output, args.overwrite)
    options = options_from(args)
    source = open_source(
        args.inputs,
        frame_rate=args.frame_rate,
        start_time=args.start_time,
        images=args.images,
        sequence=args.sequence,
        timing=args.sequence_timing,
        base=args.sequence_base,
    )
    result = make_aperture(source, options)
    updates = [events_update(path, args.output, len(result.design), args.tr) for path in args.events or ()]
    qc = None if args.no_qc else qc_paths(args.output, args.qc)
    written = write_all(result, args.output, command=command, qc=qc, events=updates)
    width = max(len(what) for what, _ in summary_rows(result))
    lines = [f"{PROG}: {what.ljust(width)}  {value}" for what, value in summary_rows(result)]
    lines += [f"{PROG}: {'events'.ljust(width)}  {u.path}: {note}" for u in updates for note in u.notes]
    lines += [f"{PROG}: wrote {path}" for path in written]
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``prfmap-stimulus INPUT... --output FILE.nii.gz [options]``.

    Returns
    -------
    int
        0 on success; the :class:`prfmap.errors.PrfmapError` exit code (64 usage and geometry, 65
        unusable input, 66 missing input, 73 cannot write) with one line on stderr; 1 for an unexpected
        failure.
    """
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    command = shlex.join([PROG, *(sys.argv[1:] if argv is None else argv)])
    try:
        lines = run(args, command)
    except PrfmapError as err:
        return _error(str(err), int(err.exit_code))
    except KeyboardInterrupt:
        return _error("interrupted", 130)
    except OSError as err:
        mapped = output_error(err)
        if mapped is None:
            return _error(f"unexpected {type(err).__name__}: {err}", int(ExitCode.UNEXPECTED))
        return _error(str(mapped), int(mapped.exit_code))
    except Exception as err:  # noqa: BLE001  (the one broad catch: one line, exit 1)
        return _error(f"unexpected {type(err).__name__}: {err}", int(ExitCode.UNEXPECTED))
    print("\n".join(lines))
    return int(ExitCode.OK)


def _error(message: str, code: int) -> int:
    sys.stderr.write(f"{PROG}: error: {one_line(message)}\n")
    sys.stderr.flush()
    return code


if __name__ == "__main__":
    sys.exit(main())
