"""Measure prfmap-stimulus on rendered material at full size; the figures of docs/stimuli.md.

    KERAS_BACKEND=jax .venv/bin/python tests/benchmarks/validate_stimulus.py [--qc docs/stimuli-qc.png]

- letterboxed 1920 × 1080 screenshots: bar, wedge and ring sweeps × checkerboard, pink-noise and
  coloured-object carriers, anti-aliased edges, a fixation dot changing colour: IoU per stimulus volume
  (median, smallest), fixation-mark pixels taken for stimulus;
- a 1280 × 720 H.264 MP4 at 60 Hz of bars moving every frame, averaged to a TR of 1.5 s: the same, and
  the error of the fractions;
- a 768 × 768 .mat image stack + sequence (v5 and v7.3);
- end to end: pRF maps fitted with the recovered apertures against those fitted with the true ones
  (median centre and σ differences, degrees);
- with ``--qc``: the QC sheet of 1920 × 1080 PNG screenshots of bars over pink noise, written by
  ``prfmap-stimulus`` itself (its summary goes to the terminal).

Prints one Markdown table per part (tests/stimulus and tests/cli/test_stimulus_cli.py assert the
thresholds on smaller material).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from prfmap.stimulus import ArrayFrames, Options, Screen, make_aperture, open_source  # noqa: E402
from stimulus_render import (  # noqa: E402
    CARRIERS,
    SHAPES,
    Scene,
    aperture,
    carrier,
    compare_fits,
    field_design,
    fixation_mark,
    measure,
    moving_bars,
    render,
    sequence,
    to_uint8,
    write_mp4,
)

SCREEN = Screen((52.0, 29.25), 57.0)
TR = 1.5


def qc_sheet(qc: Path) -> list[str]:
    """Run the command on full-HD PNG screenshots (bars over pink noise) with ``--qc``; its summary."""
    from PIL import Image

    from prfmap.cli.stimulus import main as stimulus_main

    with tempfile.TemporaryDirectory() as tmp:
        shots = Path(tmp) / "shots"
        shots.mkdir()
        for i, frame in enumerate(render(Scene(), "bars", "pinknoise", steps=8)):
            Image.fromarray(to_uint8(frame[0])).save(shots / f"frame_{i}.png", compress_level=1)
        out = Path(tmp) / "stimuli" / "bars.nii.gz"
        argv = [
            str(shots),
            "--output",
            str(out),
            "--screen-size-cm",
            "52",
            "29.25",
            "--screen-distance-cm",
            "57",
            "--tr",
            "1.5",
            "--qc",
            str(qc),
        ]
        code = stimulus_main(argv)
        qc.with_suffix(".html").unlink(missing_ok=True)
    return [f"exit {code}"]


def screenshots() -> list[str]:
    rows = [
        "| sweep | carrier | volumes | IoU median | IoU min | fixation pixels as stimulus | seconds |",
        "|---|---|---|---|---|---|---|",
    ]
    for shape in SHAPES:
        for kind in CARRIERS:
            frames = list(render(Scene(), shape, kind, steps=8))
            pictures = np.stack([f[0] for f in frames])
            start = time.perf_counter()
            result = make_aperture(ArrayFrames(pictures), Options(SCREEN, tr=TR))
            took = time.perf_counter() - start
            got = measure(result, np.stack([f[1] for f in frames]), frames[0][2])
            rows.append(
                f"| {shape} | {kind} | {got['volumes']} | {got['iou_median']:.4f} | {got['iou_min']:.4f} | "
                f"{got['fixation_pixels']} | {took:.1f} |"
            )
    return rows


def video() -> list[str]:
    scene = Scene(rows=720, cols=1280, radius=340.0, letterbox=80, fixation_radius=6.0)
    truths: list[np.ndarray] = []

    def pictures():
        for picture, truth in moving_bars(scene, tr=TR, rate=60, sweep_volumes=4):
            truths.append(truth)
            yield picture

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "recording.mp4"
        write_mp4(path, pictures(), 60)
        start = time.perf_counter()
        result = make_aperture(open_source([path]), Options(SCREEN, tr=TR))
        took = time.perf_counter() - start
    truth = np.stack(truths).reshape(-1, 90, scene.rows, scene.cols).mean(axis=1)
    got = measure(result, truth, fixation_mark(scene, scene.polar()))
    return [
        "| frames | volumes | IoU median | IoU min | fixation pixels | mean abs. fraction error | "
        "largest fraction error | largest stimulated-share error | seconds |",
        "|---|---|---|---|---|---|---|---|---|",
        f"| {result.frames_read} | {got['volumes']} | {got['iou_median']:.4f} | {got['iou_min']:.4f} | "
        f"{got['fixation_pixels']} | {got['value_error_mean']:.4f} | {got['value_error_max']:.3f} | "
        f"{got['share_error_max']:.4f} | {took:.1f} |",
    ]


def mat_files() -> list[str]:
    import hdf5storage
    import scipy.io

    scene = Scene(rows=768, cols=768, radius=380.0, letterbox=0, fixation_radius=6.0)
    polar = scene.polar()
    fixation = fixation_mark(scene, polar)
    rng = np.random.default_rng(2)
    images, truths = [], []
    for spec in sequence("wedges", steps=6, blanks=0):
        truths.append(aperture(scene, spec, polar) * (1 - fixation))
        for _ in range(3):
            carried = carrier("pinknoise", scene, 0, rng, polar)
            images.append(
                to_uint8((0.5 + truths[-1][..., None] * (carried - 0.5)) * (1 - fixation[..., None]))
            )
    seq = [0] * 12 + [1 + 3 * k + j % 3 for k in range(len(truths)) for j in range(6)] + [0] * 12
    none = np.zeros_like(truths[0])
    truth = np.stack([none, none, *truths, none, none])
    stack = np.stack(images, axis=-1)  # rows × cols × 3 × N
    rows = ["| file | volumes | IoU median | IoU min | fixation pixels |", "|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        v5, v73 = Path(tmp) / "v5.mat", Path(tmp) / "v73.mat"
        scipy.io.savemat(
            v5,
            {
                "stimulus": {
                    "images": stack,
                    "seq": np.array(seq, float),
                    "seqtiming": np.arange(len(seq)) * 0.25,
                }
            },
        )
        hdf5storage.savemat(str(v73), {"images": stack, "seq": np.array(seq, float)}, format="7.3")
        for path, kw in ((v5, {}), (v73, {"frame_rate": 4.0})):
            result = make_aperture(open_source([path], **kw), Options(Screen(fov_deg=20.0), tr=TR))
            got = measure(result, truth, fixation)
            rows.append(
                f"| {path.name} | {got['volumes']} | {got['iou_median']:.4f} | {got['iou_min']:.4f} | "
                f"{got['fixation_pixels']} |"
            )
    return rows


def end_to_end() -> list[str]:
    rows = [
        "| sweep, carrier | units | median centre difference (°) | median σ difference (°) | "
        "truth-fit median centre error (°) |",
        "|---|---|---|---|---|",
    ]
    scene = Scene()
    for kind in CARRIERS:
        frames = list(render(scene, "bars", kind, steps=10, blanks=3))
        truth = np.stack([f[1] for f in frames])
        result = make_aperture(ArrayFrames(np.stack([f[0] for f in frames])), Options(SCREEN, tr=TR))
        got = compare_fits(
            field_design(scene, truth, SCREEN), (result.design, result.fov_deg), tr=TR, n=400, sigma_max=3.0
        )
        rows.append(
            f"| bars, {kind} | 400 | {got['centre']:.4f} | {got['sigma']:.4f} | {got['truth_error']:.3f} |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--qc", type=Path, help="write the QC sheet of the full-HD bars over pink noise here")
    parser.add_argument("--parts", nargs="*", default=["screenshots", "video", "mat", "fit"])
    args = parser.parse_args()
    parts = {"screenshots": screenshots, "video": video, "mat": mat_files, "fit": end_to_end}
    if args.qc is not None:
        parts["qc"] = lambda: qc_sheet(args.qc)
        args.parts.append("qc")
    for name in args.parts:
        print(f"\n### {name}\n")
        print("\n".join(parts[name]()), flush=True)


if __name__ == "__main__":
    main()
