"""Malformed inputs at the loaders: a PrfmapError with its exit code and one line, never a traceback."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import struct
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from helpers import run_input, run_prfmap
from prfmap.errors import ExitCode, PrfmapError
from prfmap.io.aperture import load_aperture
from prfmap.io.bids import find_inputs
from prfmap.io.bold import load_bold

NO_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate]
# CI replays a fixed set of examples (a failure there must be reproducible); local runs explore anew
DERANDOMIZE = bool(os.environ.get("CI"))
FAST = settings(
    max_examples=25,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=list(HealthCheck),
    derandomize=DERANDOMIZE,
)
LOADER_CODES = {ExitCode.BAD_DATA, ExitCode.MISSING_INPUT, ExitCode.USAGE, ExitCode.NO_FILES_SELECTED}


def assert_clean_error(err: PrfmapError) -> None:
    """A user-facing error: one of the documented codes and a one-line message."""
    assert err.exit_code in LOADER_CODES, (type(err), err)
    message = str(err)
    assert message and "\n" not in message and "Traceback" not in message


def load_or_error(fn, *args, **kwargs):
    """Call a loader; a PrfmapError must be clean, anything else fails the test."""
    try:
        return fn(*args, **kwargs)
    except PrfmapError as err:
        assert_clean_error(err)
        return None


@st.composite
def damaged(draw: st.DrawFn, original: bytes) -> bytes:
    """``original`` truncated, with bytes overwritten, or replaced by junk."""
    kind = draw(st.sampled_from(["truncate", "flip", "junk", "empty"]))
    if kind == "truncate":
        return original[: draw(st.integers(0, len(original) - 1))]
    if kind == "junk":
        return draw(st.binary(min_size=1, max_size=600))
    if kind == "empty":
        return b""
    data = bytearray(original)
    for _ in range(draw(st.integers(1, 8))):
        data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def _gifti_bytes(n: int = 30, frames: int = 6) -> bytes:
    rng = np.random.default_rng(0)
    img = nib.GiftiImage(
        darrays=[
            nib.gifti.GiftiDataArray(rng.normal(size=n).astype(np.float32), intent="NIFTI_INTENT_TIME_SERIES")
            for _ in range(frames)
        ]
    )
    return img.to_bytes()


def _nifti_bytes(shape=(3, 4, 2, 6)) -> bytes:
    img = nib.Nifti1Image(np.random.default_rng(0).normal(size=shape).astype(np.float32), np.eye(4))
    return img.to_bytes()


def _cifti_bytes(n: int = 20, frames: int = 5) -> bytes:
    axis = nib.cifti2.BrainModelAxis.from_mask(np.ones(n, bool), name="CortexLeft")
    series = nib.cifti2.SeriesAxis(0, 1.5, frames)
    data = np.random.default_rng(0).normal(size=(frames, n)).astype(np.float32)
    return nib.Cifti2Image(data, header=(series, axis)).to_bytes()


GIFTI, NIFTI, CIFTI = _gifti_bytes(), _nifti_bytes(), _cifti_bytes()


@FAST
@given(st.data())
def test_damaged_gifti(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    folder = tmp_path_factory.mktemp("gii")
    paths = {h: folder / f"sub-01_hemi-{h} ü_bold.func.gii" for h in "LR"}
    paths["L"].write_bytes(data.draw(damaged(GIFTI)))
    paths["R"].write_bytes(GIFTI)
    out = load_or_error(load_bold, run_input("gifti", paths))
    if out is not None:
        assert out[0].ndim == 2 and out[0].dtype == np.float32


def test_gifti_naming_an_unknown_encoding_is_bad_data(tmp_path: Path) -> None:
    """A draw of test_damaged_gifti: an XML declaration with an unknown encoding (a LookupError)."""
    paths = {h: tmp_path / f"sub-01_hemi-{h}_bold.func.gii" for h in "LR"}
    paths["L"].write_bytes(GIFTI.replace(b'encoding="UTF-8"', b'encoding="UTF-z"', 1))
    paths["R"].write_bytes(GIFTI)
    with pytest.raises(PrfmapError) as info:
        load_bold(run_input("gifti", paths))
    assert info.value.exit_code == ExitCode.BAD_DATA and "hemi-L" in str(info.value)


@FAST
@given(st.data())
def test_damaged_cifti(tmp_path_factory: pytest.TempPathFactory, data: st.DataObject) -> None:
    path = tmp_path_factory.mktemp("cifti") / "sub-01 bold.dtseries.nii"
    path.write_bytes(data.draw(damaged(CIFTI)))
    out = load_or_error(load_bold, run_input("cifti", path))
    if out is not None:
        assert out[0].ndim == 2


@FAST
@given(st.data(), st.booleans())
def test_damaged_nifti_or_mask(
    tmp_path_factory: pytest.TempPathFactory, data: st.DataObject, gzipped: bool
) -> None:
    folder = tmp_path_factory.mktemp("nii")
    ext = ".nii.gz" if gzipped else ".nii"
    bold, mask = folder / f"bold{ext}", folder / f"mask{ext}"
    raw = NIFTI
    if gzipped:
        import gzip

        raw = gzip.compress(raw)
    bold.write_bytes(data.draw(damaged(raw)))
    nib.save(nib.Nifti1Image(np.ones((3, 4, 2), np.uint8), np.eye(4)), mask)
    out = load_or_error(load_bold, run_input("volume", bold, mask))
    if out is not None:
        assert out[0].shape[0] == 24


aperture_arrays = st.one_of(
    hnp.arrays(
        dtype=st.sampled_from([np.float32, np.float64, np.int16, np.uint8, np.bool_, np.complex64]),
        shape=hnp.array_shapes(min_dims=0, max_dims=5, min_side=0, max_side=5),
    ),
    hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=3, max_dims=3, min_side=1, max_side=4),
        elements=st.sampled_from([0.0, 1.0, 0.5, np.nan, np.inf, -1.0, 2.0]),
    ),
)


@FAST
@given(
    aperture_arrays,
    st.sampled_from([".npy", ".nii.gz"]),
    st.sampled_from(
        [
            None,
            "{}",
            "[1]",
            "not json",
            '{"RepetitionTime": -1}',
            '{"SamplingFrequency": "fast"}',
            '{"FieldOfViewDeg": 0}',
        ]
    ),
)
def test_hostile_apertures(
    tmp_path_factory: pytest.TempPathFactory, array: np.ndarray, ext: str, sidecar: str | None
) -> None:
    folder = tmp_path_factory.mktemp("ap")
    path = folder / f"stïm file{ext}"
    if ext == ".npy":
        np.save(path, array)
    else:
        try:
            nib.save(nib.Nifti1Image(array, np.eye(4)), path)
        except Exception:  # noqa: BLE001 - nibabel refuses to write some arrays: nothing to load
            return
    if sidecar is not None:
        (folder / "stïm file.json").write_text(sidecar)
    out = load_or_error(load_aperture, path, tr=1.5, fov_deg=None if sidecar else 20.0)
    if out is not None:
        design = out.design
        assert design.ndim == 3 and np.isfinite(design).all() and design.any()
        assert 0 <= design.min() and design.max() <= 1


def test_all_zero_aperture_is_bad_data(tmp_path: Path) -> None:
    path = tmp_path / "zeros.npy"
    np.save(path, np.zeros((10, 8, 8), np.float32))
    with pytest.raises(PrfmapError) as info:
        load_aperture(path, tr=1.5, fov_deg=20.0)
    assert info.value.exit_code == ExitCode.BAD_DATA and "all zeros" in str(info.value)


@pytest.fixture(scope="module")
def small_bids(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from prfmap.synth import SynthConfig, make_synthetic_dataset

    return make_synthetic_dataset(
        tmp_path_factory.mktemp("ds") / "bids dïr", SynthConfig(space="T1w", small=True, runs=1)
    )


EVENTS = st.one_of(
    st.text(max_size=200),
    st.lists(
        st.lists(
            st.sampled_from(
                ["0", "1.5", "-3", "nan", "bars", "bars.nii.gz", "missing.nii.gz", "", "n/a", "x\ty"]
            ),
            min_size=1,
            max_size=5,
        ),
        min_size=0,
        max_size=5,
    ).map(lambda rows: "onset\tduration\ttrial_type\tstim_file\n" + "\n".join("\t".join(r) for r in rows)),
)
SIDECARS = st.one_of(
    st.text(max_size=80),
    st.dictionaries(
        st.sampled_from(["RepetitionTime", "TaskName", "SliceTiming"]),
        st.one_of(st.none(), st.floats(allow_nan=True), st.text(max_size=5), st.integers()),
        max_size=3,
    ).map(json.dumps),
)


@settings(
    max_examples=20,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=list(HealthCheck),
    derandomize=DERANDOMIZE,
)
@given(events=st.one_of(st.none(), EVENTS), sidecar=st.one_of(st.none(), SIDECARS))
@example(events="onset\tduration\ttrial_type\tstim_file\n", sidecar="4")  # CI found it: pybids' TypeError
@example(events=None, sidecar="[1, 2]")
def test_hostile_events_and_sidecars(
    tmp_path_factory: pytest.TempPathFactory, small_bids: Path, events: str | None, sidecar: str | None
) -> None:
    root = tmp_path_factory.mktemp("copy") / "bids"
    shutil.copytree(small_bids, root)
    func = root / "sub-01" / "func"
    if events is not None:
        next(func.glob("*_events.tsv")).write_text(events)
    if sidecar is not None:
        next(func.glob("*_bold.json")).write_text(sidecar)
    runs = load_or_error(find_inputs, root, root / "derivatives" / "prfmap")
    if runs is not None:
        assert runs and all(r.tr > 0 for r in runs)


def _truncate_bold(root: Path) -> None:
    bold = next((root / "derivatives" / "fmriprep").rglob("*_desc-preproc_bold.nii.gz"))
    bold.write_bytes(bold.read_bytes()[:5000])


def _nan_aperture(root: Path) -> None:
    path = root / "stimuli" / "bars.nii.gz"
    img = nib.load(path)
    data = np.asanyarray(img.dataobj).astype(np.float32)
    data[0, 0, ...] = np.nan
    nib.save(nib.Nifti1Image(data, img.affine), path)


def _bad_sidecar(root: Path) -> None:
    for path in root.rglob("*_bold.json"):
        path.write_text('{"RepetitionTime": -1.5}')


def _invalid_json_sidecar(root: Path) -> None:
    """Issue 24, case 16: 66 "pybids cannot index" before; 65 naming the file after."""
    next((root / "derivatives" / "fmriprep").rglob("*_desc-preproc_bold.json")).write_text('{"a": 1,')


def _no_stim_column(root: Path) -> None:
    next((root / "sub-01" / "func").glob("*_events.tsv")).write_text("onset\tduration\n0\t10\n")


@pytest.mark.parametrize(
    ("damage", "code"),
    [
        (_truncate_bold, 65),
        (_nan_aperture, 65),
        (_bad_sidecar, 65),
        (_no_stim_column, 66),
        (_invalid_json_sidecar, 65),
    ],
)
def test_cli_hostile_input_one_line_no_outputs(
    small_bids: Path, tmp_path: Path, capsys: pytest.CaptureFixture, damage, code: int
) -> None:
    from prfmap.cli.run import main

    root = tmp_path / "bïds copy"
    shutil.copytree(small_bids, root)
    damage(root)
    out = tmp_path / "out put"
    # prfmap's own checks: the BIDS validator (tests/cli/test_fmriprep_flags.py), which rejects
    # some of these damages first with exit 16, is skipped here.
    command = [
        str(root),
        str(out),
        "participant",
        "--no-report",
        "--refine",
        "none",
        "--skip-bids-validation",
    ]
    assert main(command) == code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("prfmap: error: ") and "Traceback" not in err
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert all(p.startswith("logs/") for p in left), left


@pytest.fixture(scope="module")
def escape_bids(small_bids: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the dataset with a secret beside it, and symlinks in stimuli/ to it and to bars."""
    root = tmp_path_factory.mktemp("escape") / "bids"
    shutil.copytree(small_bids, root)
    shutil.copy(root / "stimuli" / "bars.nii.gz", root.parent / "secret.nii.gz")
    (root / "stimuli" / "link-out.nii.gz").symlink_to(root.parent / "secret.nii.gz")
    (root / "stimuli" / "link-in.nii.gz").symlink_to("bars.nii.gz")
    (root / "stimuli" / "dir-out").symlink_to(root.parent, target_is_directory=True)
    return root


STIM_PATHS = st.builds(
    lambda absolute, parts, name: ("/" if absolute else "") + "/".join([*parts, name]),
    st.booleans(),
    st.lists(st.sampled_from(["..", ".", "stimuli", "sub-01", "dir-out", "etc"]), max_size=7),
    st.sampled_from(["bars.nii.gz", "secret.nii.gz", "link-out.nii.gz", "link-in.nii.gz", "passwd"]),
)


@settings(
    max_examples=15,
    deadline=None,
    phases=NO_SHRINK,
    suppress_health_check=list(HealthCheck),
    derandomize=DERANDOMIZE,
)
@example(stim="../../secret.nii.gz")
@example(stim="ABS_SECRET")
@example(stim="link-out.nii.gz")
@example(stim="dir-out/secret.nii.gz")
@example(stim="link-in.nii.gz")
@given(
    stim=st.one_of(
        STIM_PATHS,
        st.sampled_from(["ABS_SECRET", "ABS_BARS", "/etc/passwd", "../../../../../../../../etc/passwd"]),
    )
)
def test_stim_file_paths_stay_inside_the_dataset(escape_bids: Path, stim: str) -> None:
    """Issue 12, point 3: `..`, absolute paths and symlinks in stim_file never reach outside bids_dir."""
    stim = stim.replace("ABS_SECRET", str(escape_bids.parent / "secret.nii.gz"))
    stim = stim.replace("ABS_BARS", str(escape_bids / "stimuli" / "bars.nii.gz"))
    events = next((escape_bids / "sub-01" / "func").glob("*_events.tsv"))
    events.write_text(f"onset\tduration\tstim_file\n0\t10\t{stim}\n")
    root = escape_bids.resolve()
    outside = not (escape_bids / "stimuli" / stim).resolve().is_relative_to(root)
    try:
        runs = find_inputs(escape_bids, escape_bids / "derivatives" / "prfmap")
    except PrfmapError as err:
        assert_clean_error(err)
        if outside:
            assert err.exit_code == ExitCode.BAD_DATA and "outside the dataset" in str(err), err
            assert repr(stim) in str(err)
        return
    assert not outside, f"{stim} was accepted"
    assert all(r.stim_file.resolve().is_relative_to(root) for r in runs)


# -- issue 24: apertures --------------------------------------------------------------------------


def _bars(frames: int = 12, size: int = 8) -> np.ndarray:
    """(frames, rows, cols) float32: a bar stepping across the columns."""
    out = np.zeros((frames, size, size), np.float32)
    for t in range(frames):
        out[t, :, t % size] = 1.0
    return out


@pytest.mark.parametrize("ext", [".npy", ".nii", ".nii.gz"])
def test_float64_apertures_load_like_float32(tmp_path: Path, ext: str) -> None:
    """Case 10: np.save's default dtype (float64, memory-mapped read-only) and float64 NIfTI load."""
    design = _bars()
    for dtype in (np.float32, np.float64):
        path = tmp_path / f"{np.dtype(dtype).name}{ext}"
        if ext == ".npy":
            np.save(path, design.astype(dtype))
        else:
            on_disk = np.moveaxis(design, 0, -1)[:, :, None, :]  # rows, cols, 1, frames
            nib.save(nib.Nifti1Image(on_disk.astype(dtype), np.eye(4)), path)
    single = load_aperture(tmp_path / f"float32{ext}", tr=1.5, fov_deg=20.0).design
    double = load_aperture(tmp_path / f"float64{ext}", tr=1.5, fov_deg=20.0).design
    assert double.dtype == np.float32
    np.testing.assert_array_equal(double, single)
    np.testing.assert_array_equal(double, design)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda d: np.ones_like(d), "uniform across the screen"),
        (lambda d: np.broadcast_to(d.mean(axis=(1, 2), keepdims=True) + 0.1, d.shape), "uniform"),
        (lambda d: np.broadcast_to(d[:1], d.shape), "never changes"),
    ],
    ids=["all ones", "full-field flicker", "static image"],
)
def test_apertures_without_spatial_information_are_refused(tmp_path: Path, make, says: str) -> None:
    """Case 5: an aperture that no pRF position can explain better than another is bad data."""
    path = tmp_path / "flat.npy"
    np.save(path, np.ascontiguousarray(make(_bars()), dtype=np.float32))
    with pytest.raises(PrfmapError) as info:
        load_aperture(path, tr=1.5, fov_deg=20.0)
    assert_clean_error(info.value)
    assert info.value.exit_code == ExitCode.BAD_DATA and "flat.npy" in str(info.value)
    assert says in str(info.value)


@pytest.mark.parametrize("fov", [1e6, 181.0, 0.01, "20", True])
def test_implausible_field_of_view_in_the_sidecar_is_refused(tmp_path: Path, fov) -> None:
    """Case 5 (and 19: a string is named as a string): FieldOfViewDeg outside 0.1-180 degrees."""
    path = tmp_path / "bars.npy"
    np.save(path, _bars())
    (tmp_path / "bars.json").write_text(json.dumps({"FieldOfViewDeg": fov}))
    with pytest.raises(PrfmapError) as info:
        load_aperture(path, tr=1.5)
    assert_clean_error(info.value)
    message = str(info.value)
    assert info.value.exit_code == ExitCode.BAD_DATA
    assert "FieldOfViewDeg" in message and "bars.json" in message
    if isinstance(fov, str | bool):
        assert "not a number" in message and "must be positive" not in message
    else:
        assert "0.1" in message and "180" in message
    assert load_aperture(path, tr=1.5, fov_deg=180.0).fov_deg == 180.0


# -- issue 24: sidecars and headers -----------------------------------------------------------------


def _copy(small_bids: Path, tmp_path: Path) -> tuple[Path, Path, Path]:
    """A private copy: its root, the preprocessed BOLD and its fMRIPrep sidecar."""
    root = tmp_path / "bids"
    shutil.copytree(small_bids, root)
    bold = next((root / "derivatives" / "fmriprep").rglob("*_desc-preproc_bold.nii.gz"))
    return root, bold, bold.with_name(bold.name.replace(".nii.gz", ".json"))


def test_a_header_tr_contradicting_the_sidecar_is_warned(small_bids: Path, tmp_path: Path, caplog) -> None:
    """Case 21: the sidecar's RepetitionTime is used (BIDS metadata), and the log names both values."""
    root, bold, _ = _copy(small_bids, tmp_path)
    img = nib.load(bold)
    img.header.set_zooms((*img.header.get_zooms()[:3], 2.0))
    nib.save(img, bold)
    with caplog.at_level("WARNING", logger="prfmap"):
        (run,) = find_inputs(root)
    assert run.tr == 1.5
    (warning,) = [r.getMessage() for r in caplog.records if "header" in r.getMessage()]
    assert bold.name in warning and "2 s" in warning and "1.5 s" in warning and "RepetitionTime" in warning


@pytest.mark.parametrize(("value", "fraction"), [("yes", None), ("TRUE", None), ("no", 0.45), (1, None)])
def test_slice_timing_corrected_written_as_a_string(
    small_bids: Path, tmp_path: Path, caplog, value, fraction
) -> None:
    """Case 21: "yes" is not read as false: a warning names the value and how it is read."""
    root, _, sidecar = _copy(small_bids, tmp_path)
    meta = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**meta, "SliceTimingCorrected": value}))
    with caplog.at_level("WARNING", logger="prfmap"):
        (run,) = find_inputs(root)
    truth = str(value).lower() in ("yes", "true", "1")
    assert run.slice_time.rule == ("corrected_middle" if truth else "slice_timing_mean")
    if fraction is not None:
        assert run.slice_time.fraction == pytest.approx(fraction)
    (warning,) = [r.getMessage() for r in caplog.records if "SliceTimingCorrected" in r.getMessage()]
    assert repr(value) in warning and f"read as {str(truth).lower()}" in warning


def test_slice_timing_corrected_that_is_no_boolean_is_bad_data(small_bids: Path, tmp_path: Path) -> None:
    root, _, sidecar = _copy(small_bids, tmp_path)
    sidecar.write_text(json.dumps({**json.loads(sidecar.read_text()), "SliceTimingCorrected": "maybe"}))
    with pytest.raises(PrfmapError) as info:
        find_inputs(root)
    assert_clean_error(info.value)
    assert info.value.exit_code == ExitCode.BAD_DATA and "'maybe'" in str(info.value)
    assert "SliceTimingCorrected" in str(info.value)


@pytest.mark.parametrize("where", ["raw", "fmriprep"])
@pytest.mark.parametrize("text", ['{"RepetitionTime": 1.5,', "[1, 2]"])
def test_a_sidecar_that_is_not_a_json_object_is_named(
    small_bids: Path, tmp_path: Path, where: str, text: str
) -> None:
    """Case 16: 65 (bad data, not 66), naming the file and what is wrong with it."""
    root, _, derived = _copy(small_bids, tmp_path)
    sidecar = derived if where == "fmriprep" else next((root / "sub-01" / "func").glob("*_bold.json"))
    sidecar.write_text(text)
    with pytest.raises(PrfmapError) as info:
        find_inputs(root)
    assert_clean_error(info.value)
    message = str(info.value)
    assert info.value.exit_code == ExitCode.BAD_DATA and str(sidecar) in message, message
    assert ("line 1 column" in message) if text.startswith("{") else ("not a JSON object" in message)


def test_library_messages_stay_off_stderr(small_bids: Path, tmp_path: Path) -> None:
    """Case 17: nibabel's "pixdim[1,2,3] should be non-zero" (a header it repairs) goes to the log;
    stderr holds the one error line of the run (here a NaN aperture, 65)."""
    root, bold, _ = _copy(small_bids, tmp_path)
    raw = bytearray(gzip.decompress(bold.read_bytes()))  # nibabel would repair the header on saving
    raw[80:92] = struct.pack("<3f", 0.0, 0.0, 0.0)  # pixdim[1:4] of the NIfTI-1 header; sform kept
    bold.write_bytes(gzip.compress(bytes(raw)))
    _nan_aperture(root)
    out = tmp_path / "out"
    done = run_prfmap(root, out, "participant", "--skip-bids-validation", "--no-report")
    assert done.returncode == 65
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("prfmap: error: "), done.stderr
    assert "pixdim[1,2,3] should be non-zero" in next((out / "logs").glob("prfmap_*.log")).read_text()
