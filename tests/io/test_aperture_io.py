"""load_aperture: file layouts, field of view, per-TR averaging, and bad apertures."""

from __future__ import annotations

import json

import hdf5storage
import nibabel as nib
import numpy as np
import pytest
from scipy.io import savemat
from scipy.io.matlab import matfile_version

from prfmap.errors import BadDataError, ExitCode, MissingInputError, UsageError
from prfmap.io.aperture import load_aperture


@pytest.fixture
def frames() -> np.ndarray:
    """(frames, rows, cols) with a marker: frame t lights row t % 5 and the left column."""
    out = np.zeros((6, 5, 4), np.float32)
    for t in range(6):
        out[t, t % 5, :] = 1
        out[t, :, 0] = 0.5
    return out


def test_nifti_layout_rows_cols_singleton_frames(tmp_path, frames):
    path = tmp_path / "bars.nii.gz"
    on_disk = np.moveaxis(frames, 0, -1)[:, :, None, :]  # rows, cols, 1, frames
    nib.save(nib.Nifti1Image(on_disk, np.eye(4)), path)
    (tmp_path / "bars.json").write_text(json.dumps({"FieldOfViewDeg": 20}))
    ap = load_aperture(path, tr=1.5)
    assert ap.design.dtype == np.float32 and ap.design.shape == (6, 5, 4)
    np.testing.assert_array_equal(ap.design, frames)
    assert ap.fov_deg == 20.0
    nib.save(nib.Nifti1Image(on_disk[:, :, 0, :], np.eye(4)), tmp_path / "three.nii")
    three = load_aperture(tmp_path / "three.nii", tr=1, fov_deg=8)
    np.testing.assert_array_equal(three.design, frames)


def test_npy_and_mat(tmp_path, frames):
    np.save(tmp_path / "a.npy", frames)
    design = load_aperture(tmp_path / "a.npy", tr=2, fov_deg=10).design
    np.testing.assert_array_equal(design, frames)
    savemat(tmp_path / "b.mat", {"stim": np.moveaxis(frames, 0, -1), "other": np.ones(3)})
    design = load_aperture(tmp_path / "b.mat", tr=2, fov_deg=10).design
    np.testing.assert_array_equal(design, frames)
    savemat(tmp_path / "c.mat", {"whatever": np.moveaxis(frames, 0, -1).astype(np.uint8)})
    design = load_aperture(tmp_path / "c.mat", tr=2, fov_deg=10).design
    np.testing.assert_array_equal(design, frames.astype(np.uint8))
    savemat(tmp_path / "d.mat", {"p": np.ones((2, 2, 2)), "q": np.ones((2, 2, 2))})
    with pytest.raises(BadDataError, match="one 3-D array"):
        load_aperture(tmp_path / "d.mat", tr=2, fov_deg=10)


def test_fov_argument_overrides_sidecar_and_is_required(tmp_path, frames):
    np.save(tmp_path / "a.npy", frames)
    with pytest.raises(UsageError, match="--stimulus-fov-deg") as info:
        load_aperture(tmp_path / "a.npy", tr=1.5)
    assert info.value.exit_code == ExitCode.USAGE
    (tmp_path / "a.json").write_text(json.dumps({"FieldOfViewDeg": 12.5}))
    assert load_aperture(tmp_path / "a.npy", tr=1.5).fov_deg == 12.5
    assert load_aperture(tmp_path / "a.npy", tr=1.5, fov_deg=7).fov_deg == 7.0


@pytest.mark.parametrize("key", ["RepetitionTime", "SamplingFrequency"])
def test_faster_apertures_are_averaged_per_tr(tmp_path, frames, key):
    np.save(tmp_path / "fast.npy", frames)
    value = 0.5 if key == "RepetitionTime" else 2.0
    (tmp_path / "fast.json").write_text(json.dumps({"FieldOfViewDeg": 10, key: value}))
    design = load_aperture(tmp_path / "fast.npy", tr=1.5).design
    assert design.shape == (2, 5, 4)
    np.testing.assert_allclose(design, frames.reshape(2, 3, 5, 4).mean(axis=1))
    with pytest.raises(BadDataError, match="does not divide the TR"):
        load_aperture(tmp_path / "fast.npy", tr=1.25)
    with pytest.raises(BadDataError, match="not a whole number of TRs"):
        load_aperture(tmp_path / "fast.npy", tr=2.0)


def test_frame_index_selects_frames(tmp_path, frames):
    np.save(tmp_path / "a.npy", frames)
    design = load_aperture(tmp_path / "a.npy", tr=1, fov_deg=10, frame_index=[4, 0, 0]).design
    np.testing.assert_array_equal(design, frames[[4, 0, 0]])  # (frames 5 and 0 are the same image)
    with pytest.raises(BadDataError, match="stim_file_index runs to 6"):
        load_aperture(tmp_path / "a.npy", tr=1, fov_deg=10, frame_index=[6])


@pytest.mark.parametrize(("value", "match"), [(1.5, r"\[0, 1.5\]"), (-0.2, r"\[-0.2, 1\]"), (np.nan, "NaN")])
def test_values_outside_unit_interval(tmp_path, frames, value, match):
    frames[2, 1, 1] = value
    np.save(tmp_path / "a.npy", frames)
    with pytest.raises(BadDataError, match=match) as info:
        load_aperture(tmp_path / "a.npy", tr=1, fov_deg=10)
    assert info.value.exit_code == ExitCode.BAD_DATA
    assert "a.npy" in str(info.value)


def test_unreadable_and_missing(tmp_path):
    (tmp_path / "bad.nii.gz").write_bytes(b"not a nifti")
    with pytest.raises(BadDataError, match="bad.nii.gz"):
        load_aperture(tmp_path / "bad.nii.gz", tr=1, fov_deg=10)
    np.save(tmp_path / "flat.npy", np.zeros((4, 4)))
    with pytest.raises(BadDataError, match="frames × rows × cols"):
        load_aperture(tmp_path / "flat.npy", tr=1, fov_deg=10)
    with pytest.raises(MissingInputError, match="does not exist"):
        load_aperture(tmp_path / "nope.npy", tr=1, fov_deg=10)
    (tmp_path / "x.png").write_bytes(b"")
    with pytest.raises(UsageError, match="unknown format"):
        load_aperture(tmp_path / "x.png", tr=1, fov_deg=10)


@pytest.mark.parametrize("dtype", [np.float64, np.uint8, bool])
def test_mat73_reads_like_the_same_data_saved_as_v7(tmp_path, frames, dtype):
    """MATLAB v7.3 (HDF5, written by hdf5storage as MATLAB writes it) and v7 give the same design."""
    data = np.moveaxis(frames > 0.7 if dtype is bool else frames, 0, -1).astype(dtype)
    savemat(tmp_path / "v7.mat", {"images": data, "other": np.ones((2, 2, 2))})
    hdf5storage.savemat(
        str(tmp_path / "v73.mat"),
        {"images": data, "other": np.ones((2, 2, 2))},
        format="7.3",
        matlab_compatible=True,
    )
    assert matfile_version(tmp_path / "v73.mat")[0] == 2  # HDF5, which scipy refuses
    v7 = load_aperture(tmp_path / "v7.mat", tr=2, fov_deg=10).design
    v73 = load_aperture(tmp_path / "v73.mat", tr=2, fov_deg=10).design
    assert v73.shape == (6, 5, 4)
    np.testing.assert_array_equal(v73, v7)
    np.testing.assert_array_equal(v73, np.moveaxis(data, -1, 0).astype(np.float32))


def test_mat73_singleton_axis_only_variable_and_errors(tmp_path, frames):
    on_disk = np.moveaxis(frames, 0, -1)[:, :, None, :]  # rows × cols × 1 × frames
    hdf5storage.savemat(str(tmp_path / "a.mat"), {"whatever": on_disk}, format="7.3", matlab_compatible=True)
    np.testing.assert_array_equal(load_aperture(tmp_path / "a.mat", tr=1, fov_deg=10).design, frames)
    hdf5storage.savemat(
        str(tmp_path / "two.mat"),
        {"p": np.ones((2, 2, 2)), "q": np.ones((2, 2, 2))},
        format="7.3",
        matlab_compatible=True,
    )
    with pytest.raises(BadDataError, match="one 3-D array"):
        load_aperture(tmp_path / "two.mat", tr=1, fov_deg=10)
