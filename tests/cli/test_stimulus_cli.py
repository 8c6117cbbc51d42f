"""``prfmap-stimulus`` on letterboxed full-HD screenshots (PNG files, one per volume): the aperture file
reads back with prfmap's reader, matches the rendered truth, comes with its QC sheet, and ``--events``
names it in a synthetic dataset's runs; bad inputs and wrong geometry end with one line and an exit code
and write nothing (issue 20, Must show 1 and 3)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import html5lib
import numpy as np
import pandas as pd
import pytest
from PIL import Image

from helpers import subprocess_env
from prfmap.cli.stimulus import main
from prfmap.io.aperture import load_aperture
from prfmap.io.bids import find_inputs
from prfmap.stimulus.geometry import Crop, resampler
from stimulus_render import Scene, iou, render, to_uint8, write_mp4

GEOMETRY = ["--screen-size-cm", "52", "29.25", "--screen-distance-cm", "57"]
FULL_HD = Scene()  # 1920 × 1080, grey, black letterbox bars, an 8-pixel fixation dot changing colour


def save_pngs(folder: Path, pictures) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i, picture in enumerate(pictures):
        Image.fromarray(to_uint8(picture)).save(folder / f"frame_{i}.png", compress_level=1)
    return folder


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """20 letterboxed 1920 × 1080 screenshots of bar sweeps over pink noise, and their true apertures."""
    frames = list(render(FULL_HD, "bars", "pinknoise", steps=4))
    folder = save_pngs(tmp_path_factory.mktemp("shots") / "shots", (f[0] for f in frames))
    return folder, np.stack([f[1] for f in frames])


@pytest.fixture(scope="module")
def made(screenshots, tmp_path_factory: pytest.TempPathFactory) -> dict:
    folder, _ = screenshots
    out = tmp_path_factory.mktemp("out") / "bars.nii.gz"
    process = subprocess.run(
        [
            sys.executable,
            "-m",
            "prfmap.cli.stimulus",
            str(folder / "*.png"),
            "--output",
            str(out),
            *GEOMETRY,
            "--tr",
            "1.5",
        ],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return {"process": process, "out": out, "sidecar": json.loads(out.with_name("bars.json").read_text())}


def test_the_command_writes_the_aperture_sidecar_and_qc_sheet(made: dict) -> None:
    process, out = made["process"], made["out"]
    assert process.returncode == 0, process.stderr
    assert process.stderr == ""
    names = sorted(p.name for p in out.parent.iterdir())
    assert names == ["bars.json", "bars.nii.gz", "bars_qc.html", "bars_qc.png"]
    summary = process.stdout
    for line in (
        "frames read         20 (1920×1080 pixels)",
        "background          RGB (128, 128, 128)",
        "blank volumes       4 (1-2, 19-20)",
        "distinct apertures  8",
        f"wrote {out}",
    ):
        assert line in summary, summary
    meta = made["sidecar"]
    assert meta["RepetitionTime"] == 1.5 and meta["BackgroundColor"] == [128, 128, 128]
    assert meta["ScreenSizePx"] == [1920, 1080] and meta["BlankVolumes"] == [1, 2, 19, 20]
    assert meta["CropPx"]["CentreX"] == 960 and meta["CropPx"]["CentreY"] == 540
    assert meta["FixationMaskPx"] >= np.pi * 8**2


def test_the_aperture_reads_back_and_matches_the_rendered_truth(made: dict, screenshots) -> None:
    _, truth = screenshots
    meta = made["sidecar"]
    aperture = load_aperture(made["out"], tr=1.5)
    assert aperture.design.shape == (20, 101, 101) and aperture.fov_deg == pytest.approx(
        meta["FieldOfViewDeg"]
    )
    c = meta["CropPx"]
    crop = Crop(c["Left"], c["Top"], c["Width"], c["Height"], (c["CentreX"], c["CentreY"]), "given")
    grid = resampler(crop, meta["StimulatedWidthDeg"], 101)
    assert grid.fov_out == pytest.approx(aperture.fov_deg, rel=1e-5)
    expected = grid(np.stack([crop.cut(t) for t in truth]))
    shown = expected.sum(axis=(1, 2)) > 0
    ious = [iou(a, b) for a, b in zip(aperture.design[shown], expected[shown], strict=True)]
    assert np.median(ious) >= 0.97, ious
    assert np.abs(aperture.design - expected).max() <= 0.25
    assert aperture.design[:2].max() == 0 and aperture.design[-2:].max() == 0


def test_the_qc_page_shows_the_sheet_and_the_summary(made: dict) -> None:
    out = made["out"]
    page = out.with_name("bars_qc.html").read_text()
    html5lib.HTMLParser(strict=True).parse(page)
    assert 'src="bars_qc.png"' in page and "distinct apertures" in page and "bars.nii.gz" in page
    with Image.open(out.with_name("bars_qc.png")) as sheet:
        assert sheet.format == "PNG" and sheet.size[0] > 800


def test_help_and_version(capsys) -> None:
    process = subprocess.run(
        [sys.executable, "-m", "prfmap.cli.stimulus", "--help"],
        env=subprocess_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert process.returncode == 0
    for option in (
        "--screen-size-cm",
        "--fov-deg",
        "--frame-rate",
        "--images",
        "--sequence",
        "--events",
        "--size",
    ):
        assert option in process.stdout
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("prfmap-stimulus ")


@pytest.fixture(scope="module")
def small_shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scene = Scene(rows=270, cols=480, radius=120.0, letterbox=30, fixation_radius=3.0)
    return save_pngs(
        tmp_path_factory.mktemp("small") / "rings",
        (f[0] for f in render(scene, "rings", "checkerboard", steps=4)),
    )


def test_the_field_of_view_round_trips_in_either_convention(small_shots: Path, tmp_path: Path) -> None:
    """Another tool's 10.38° between the outer pixel centres (prfpy's screen_size_degrees) is given as
    such and read back by the fit as 10.38; edge to edge, the same number is the stimulated width and
    FieldOfViewDeg is n - 1 of its n columns (issue 36)."""
    written = {}
    for flag in ("--fov-centres-deg", "--fov-deg"):
        out = tmp_path / flag.strip("-") / "rings.nii.gz"
        assert main([str(small_shots), "--output", str(out), flag, "10.38", "--tr", "1.5"]) == 0
        meta = json.loads(out.with_name("rings.json").read_text())
        aperture = load_aperture(out, tr=1.5)
        written[flag] = (meta, aperture)
        assert aperture.fov_deg == pytest.approx(meta["FieldOfViewDeg"], abs=1e-6)
    meta, aperture = written["--fov-centres-deg"]
    assert aperture.fov_deg == pytest.approx(10.38, abs=1e-6)
    n = aperture.design.shape[2]
    assert meta["StimulatedWidthDeg"] == pytest.approx(10.38 * n / (n - 1), abs=1e-5)
    meta, aperture = written["--fov-deg"]
    assert meta["StimulatedWidthDeg"] == pytest.approx(10.38, abs=1e-6)
    assert aperture.fov_deg == pytest.approx(10.38 * (n - 1) / n, abs=1e-5)
    assert (
        main(
            [
                str(small_shots),
                "--output",
                str(tmp_path / "both.nii.gz"),
                "--fov-deg",
                "10",
                "--fov-centres-deg",
                "10",
                "--tr",
                "1.5",
            ]
        )
        == 64
    )


def test_animations_jpeg_and_odd_sizes_are_named(small_shots: Path, tmp_path: Path, capsys) -> None:
    """Issue 36: an animated GIF was read as its first frame in silence, JPEG screenshots (whose
    ringing widens the stimulated area) passed without a word, and an 8000-pixel screen was reported
    as 7998 (the working grid's multiple of its scale)."""
    pictures = [Image.open(p).convert("RGB") for p in sorted(small_shots.glob("*.png"))]
    gif = tmp_path / "sweep.gif"
    pictures[0].save(gif, save_all=True, append_images=pictures[1:], duration=100)
    assert main([str(gif), "--output", str(tmp_path / "gif.nii.gz"), "--fov-deg", "10", "--tr", "1.5"]) == 65
    line = capsys.readouterr().err.strip()
    assert (
        "sweep.gif is an animation of" in line and "ffmpeg" in line and "\n" not in line
    )  # GIF merges repeats
    jpegs = tmp_path / "jpeg"
    jpegs.mkdir()
    for i, picture in enumerate(pictures):
        picture.save(jpegs / f"frame_{i:02d}.jpg", quality=85)
    assert (
        main([str(jpegs), "--output", str(tmp_path / "jpeg.nii.gz"), "--fov-deg", "10", "--tr", "1.5"]) == 0
    )
    assert "lossily compressed (JPEG)" in capsys.readouterr().out
    odd = tmp_path / "odd"
    odd.mkdir()
    for i, picture in enumerate(pictures):
        picture.resize((2885, 1623), Image.NEAREST).save(odd / f"frame_{i:02d}.png", compress_level=1)
    out = tmp_path / "odd.nii.gz"
    assert main([str(odd), "--output", str(out), "--fov-deg", "10", "--tr", "1.5"]) == 0
    assert "(2885×1623 pixels)" in capsys.readouterr().out
    assert json.loads(out.with_name("odd.json").read_text())["ScreenSizePx"] == [2885, 1623]


def test_events_name_the_new_aperture(bids_copy: Path, small_shots: Path, capsys) -> None:
    func = bids_copy / "sub-01" / "func"
    existing, new = func / "sub-01_task-prf_run-1_events.tsv", func / "sub-01_task-prf_run-3_events.tsv"
    before = pd.read_csv(existing, sep="\t")
    out = bids_copy / "stimuli" / "recorded" / "rings.nii.gz"
    code = main(
        [
            str(small_shots),
            "--output",
            str(out),
            *GEOMETRY,
            "--tr",
            "1.5",
            "--events",
            str(existing),
            str(new),
        ]
    )
    assert code == 0
    after = pd.read_csv(existing, sep="\t")
    assert list(after.columns) == list(before.columns)
    assert after.drop(columns="stim_file").equals(before.drop(columns="stim_file"))
    assert (after["stim_file"] == "recorded/rings.nii.gz").all()
    created = pd.read_csv(new, sep="\t")
    assert created.to_dict("records") == [
        {"onset": 0, "duration": 12, "trial_type": "stimulus", "stim_file": "recorded/rings.nii.gz"}
    ]
    stdout = capsys.readouterr().out
    assert "sub-01_task-prf_run-1_bold.nii.gz has 148 volumes, the aperture 8" in stdout
    runs = {r.run: r for r in find_inputs(bids_copy)}
    assert runs[1].stim_file == out and runs[2].stim_file == bids_copy / "stimuli" / "bars.nii.gz"


def test_events_need_the_output_under_stimuli(
    bids_copy: Path, small_shots: Path, tmp_path: Path, capsys
) -> None:
    events = bids_copy / "sub-01" / "func" / "sub-01_task-prf_run-1_events.tsv"
    before = events.read_text()
    out = tmp_path / "elsewhere" / "rings.nii.gz"
    assert main([str(small_shots), "--output", str(out), *GEOMETRY, "--events", str(events)]) == 64
    assert "stimuli" in one_error(capsys)
    assert events.read_text() == before and not out.parent.exists()


def one_error(capsys) -> str:
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("prfmap-stimulus: error: ")
    return lines[0]


def _inputs(tmp: Path, case: str) -> list[str]:
    """The INPUT arguments of a hostile case (small 160 × 90 frames)."""
    rng = np.random.default_rng(0)
    grey = np.full((90, 160, 3), 128, dtype=np.uint8)
    bar = grey.copy()
    bar[20:70, 60:80] = 255
    if case == "empty folder":
        (tmp / "empty").mkdir()
        return [str(tmp / "empty")]
    if case == "pattern":
        return [str(tmp / "nothing*.png")]
    if case == "sizes":
        Image.fromarray(grey).save(tmp / "a.png")
        Image.fromarray(np.zeros((100, 160, 3), np.uint8)).save(tmp / "b.png")
        return [str(tmp / "a.png"), str(tmp / "b.png")]
    if case == "video":
        (tmp / "broken.mp4").write_bytes(rng.integers(0, 256, 4096, dtype=np.uint8).tobytes())
        return [str(tmp / "broken.mp4")]
    if case == "corrupt":
        Image.fromarray(grey).save(tmp / "a.png")
        (tmp / "b.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 64)
        return [str(tmp / "a.png"), str(tmp / "b.png")]
    if case == "noise":
        for i in range(8):
            Image.fromarray(rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)).save(tmp / f"n{i}.png")
        return [str(tmp / "n*.png")]
    if case == "one frame":
        Image.fromarray(bar).save(tmp / "one.png")
        return [str(tmp / "one.png")]
    if case == "recording":
        write_mp4(tmp / "ok.mp4", [grey / 255.0, bar / 255.0] * 5, 10)
        return [str(tmp / "ok.mp4")]
    for i, picture in enumerate([grey, bar, grey, bar]):
        Image.fromarray(picture).save(tmp / f"f{i}.png")
    return [str(tmp / "f*.png")]


@pytest.mark.parametrize(
    ("case", "options", "code", "message"),
    [
        ("empty folder", GEOMETRY, 66, "no frames: folder"),
        ("pattern", GEOMETRY, 66, "no frames: pattern"),
        ("sizes", GEOMETRY, 65, "frames of different sizes: a.png is 160×90 pixels, b.png is 160×100"),
        ("video", [*GEOMETRY, "--tr", "1.5"], 65, "cannot decode video"),
        ("corrupt", GEOMETRY, 65, "cannot read image"),
        ("noise", GEOMETRY, 65, "no background"),
        ("one frame", GEOMETRY, 65, "at least 2 are needed"),
        ("frames", ["--screen-size-cm", "40", "30", "--screen-distance-cm", "57"], 64, "wrong geometry"),
        ("frames", ["--screen-size-cm", "520", "292.5", "--screen-distance-cm", "57"], 64, "in centimetres"),
        ("frames", [], 64, "give the geometry"),
        ("frames", [*GEOMETRY, "--fov-deg", "20"], 64, "give the geometry"),
        ("frames", [*GEOMETRY, "--size", "0"], 64, "must be a positive integer"),
        ("frames", [*GEOMETRY, "--size", "500"], 64, "exceeds the stimulated region's width"),
        ("recording", GEOMETRY, 64, "give the TR with --tr"),
        ("frames", [*GEOMETRY, "--images", "stim"], 64, "apply to a .mat INPUT only"),
    ],
)
def test_bad_inputs_end_with_one_line_and_write_nothing(
    tmp_path: Path, capsys, case: str, options: list[str], code: int, message: str
) -> None:
    inputs = _inputs(tmp_path, case)
    out = tmp_path / "out" / "stim.nii.gz"
    assert main([*inputs, "--output", str(out), *options]) == code
    assert message in one_error(capsys)
    assert not out.parent.exists()


def test_an_existing_output_is_kept_without_overwrite(tmp_path: Path, capsys) -> None:
    inputs = _inputs(tmp_path, "frames")
    out = tmp_path / "stim.nii.gz"
    out.write_bytes(b"keep")
    assert main([*inputs, "--output", str(out), *GEOMETRY]) == 64
    assert "exists" in one_error(capsys) and out.read_bytes() == b"keep"
    assert main([*inputs, "--output", str(tmp_path / "stim.npy"), *GEOMETRY]) == 64
    assert ".nii.gz" in one_error(capsys)
    assert main([*inputs, "--output", str(out), *GEOMETRY, "--overwrite", "--no-qc"]) == 0
    assert load_aperture(out, tr=1.5).design.shape[0] == 4
