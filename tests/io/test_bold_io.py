"""load_bold and the map writers: exact round trips through nibabel, and corrupt inputs."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from helpers import run_input
from prfmap.errors import BadDataError, ExitCode, MissingInputError
from prfmap.io.bold import load_bold
from prfmap.io.geometry import CiftiGeometry, GiftiGeometry, VolumeGeometry
from prfmap.io.runs import RunInput


def gifti_run(ds, run=1) -> RunInput:
    stem = ds.func() / f"sub-01_task-prf_run-{run}_hemi-"
    return run_input("gifti", {h: Path(f"{stem}{h}_space-fsaverage5_bold.func.gii") for h in "LR"})


def maps_for(n_units: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    maps = {k: rng.normal(size=n_units).astype(np.float32) for k in ("x", "y", "sigma")}
    maps["x"][:3] = np.nan
    return maps


def test_gifti_loads_left_then_right(dataset):
    run = gifti_run(dataset)
    data, geom = load_bold(run)
    left, right = (dataset.arrays[str(run.bold[h])] for h in "LR")
    assert data.dtype == np.float32 and data.shape == (70, 12)
    np.testing.assert_array_equal(data, np.concatenate([left, right]))
    assert isinstance(geom, GiftiGeometry) and geom.hemis == {"L": 40, "R": 30}


def test_gifti_maps_round_trip(dataset, tmp_path):
    _, geom = load_bold(gifti_run(dataset))
    maps = maps_for(geom.n_units)
    paths = geom.write_maps(maps, lambda h: tmp_path / f"hemi-{h}_maps.func.gii", meta={"Model": "gauss"})
    assert [p.name for p in paths] == ["hemi-L_maps.func.gii", "hemi-R_maps.func.gii"]
    for hemi, path, sl in (("L", paths[0], slice(0, 40)), ("R", paths[1], slice(40, 70))):
        img = nib.load(path)
        structure = {"L": "CortexLeft", "R": "CortexRight"}[hemi]
        assert img.meta["AnatomicalStructurePrimary"] == structure
        assert img.meta["Model"] == "gauss"
        assert [d.meta["Name"] for d in img.darrays] == ["x", "y", "sigma"]
        estimate = nib.nifti1.intent_codes["NIFTI_INTENT_ESTIMATE"]
        assert all(d.intent == estimate for d in img.darrays)
        for d, label in zip(img.darrays, maps, strict=True):
            np.testing.assert_array_equal(d.data, maps[label][sl])
    assert not list(tmp_path.glob(".tmp-*"))


def test_gifti_series_round_trip(dataset, tmp_path):
    run = gifti_run(dataset)
    data, geom = load_bold(run)
    paths = geom.write_series(data * 2, lambda h: tmp_path / f"hemi-{h}_bold.func.gii", tr=1.5)
    back = load_bold(run_input("gifti", {"L": paths[0], "R": paths[1]}))[0]
    np.testing.assert_array_equal(back, data * 2)


def test_cifti_loads_all_grayordinates_and_writes_dscalar(dataset, tmp_path):
    path = dataset.func() / "sub-01_task-prf_run-1_space-fsLR_den-91k_bold.dtseries.nii"
    data, geom = load_bold(run_input("cifti", path))
    np.testing.assert_array_equal(data, dataset.arrays[str(path)])
    assert isinstance(geom, CiftiGeometry) and geom.n_units == 20 + 15 + 3
    maps = maps_for(geom.n_units)
    (out,) = geom.write_maps(maps, lambda h: tmp_path / "maps.dscalar.nii", meta={"Model": "g"})
    img = nib.load(out)
    scalar, models = img.header.get_axis(0), img.header.get_axis(1)
    assert list(scalar.name) == ["x", "y", "sigma"] and scalar.meta[0]["Model"] == "g"
    assert models == nib.load(path).header.get_axis(1)
    assert img.nifti_header.get_intent()[0] == "ConnDenseScalar"
    np.testing.assert_array_equal(img.get_fdata(dtype=np.float32), np.stack(list(maps.values())))
    (series,) = geom.write_series(data, lambda h: tmp_path / "p.dtseries.nii", tr=1.5)
    back, _ = load_bold(run_input("cifti", series))
    np.testing.assert_array_equal(back, data)
    assert nib.load(series).header.get_axis(0).step == 1.5


def test_volume_in_mask_and_maps_with_affine(dataset, tmp_path):
    der = dataset.func()
    bold = der / "sub-01_task-prf_run-1_space-T1w_desc-preproc_bold.nii.gz"
    mask = der / "sub-01_task-prf_run-1_space-T1w_desc-brain_mask.nii.gz"
    data, geom = load_bold(run_input("volume", bold, mask))
    m = dataset.arrays[str(mask)].astype(bool)
    assert isinstance(geom, VolumeGeometry) and geom.n_units == m.sum() == 18
    np.testing.assert_array_equal(data, dataset.arrays[str(bold)][m])
    maps = maps_for(geom.n_units)
    (one,) = geom.write_maps({"sigma": maps["sigma"]}, lambda h: tmp_path / "sigma.nii.gz")
    img = nib.load(one)
    assert img.shape == m.shape
    np.testing.assert_array_equal(img.affine, nib.load(bold).affine)
    vol = img.get_fdata(dtype=np.float32)
    np.testing.assert_array_equal(vol[m], maps["sigma"])
    assert np.isnan(vol[~m]).all()
    (all_maps,) = geom.write_maps(maps, lambda h: tmp_path / "all.nii.gz")
    assert nib.load(all_maps).shape == (*m.shape, 3)
    (series,) = geom.write_series(data, lambda h: tmp_path / "bold.nii.gz", tr=1.5)
    back, _ = load_bold(run_input("volume", series, mask))
    np.testing.assert_array_equal(back, data)
    assert nib.load(series).header.get_zooms()[3] == 1.5


def test_volume_mask_mismatch(dataset, tmp_path):
    der = dataset.func()
    bold = der / "sub-01_task-prf_run-1_space-T1w_desc-preproc_bold.nii.gz"
    bad_mask = tmp_path / "mask.nii.gz"
    nib.save(nib.Nifti1Image(np.ones((3, 3, 3), np.uint8), np.eye(4)), bad_mask)
    with pytest.raises(BadDataError, match=r"has \(3, 3, 3\) voxels but .* has \("):
        load_bold(run_input("volume", bold, bad_mask))


def test_a_mask_a_hundredth_of_a_millimetre_off_is_the_same_grid(dataset, tmp_path):
    """Affines written with different rounding (0.01 mm) are one grid; a misregistered mask is refused
    with how far apart the two put the voxels, not with two identical shapes."""
    der = dataset.func()
    bold = der / "sub-01_task-prf_run-1_space-T1w_desc-preproc_bold.nii.gz"
    mask = nib.load(der / "sub-01_task-prf_run-1_space-T1w_desc-brain_mask.nii.gz")
    expected, _ = load_bold(
        run_input("volume", bold, der / "sub-01_task-prf_run-1_space-T1w_desc-brain_mask.nii.gz")
    )
    side = float(np.min(np.linalg.norm(mask.affine[:3, :3], axis=0)))
    for shift, accepted in ((0.01 * side, True), (0.5 * side, False)):
        affine = mask.affine.copy()
        affine[:3, 3] += shift / np.sqrt(3)
        moved = tmp_path / f"mask-{shift:g}.nii.gz"
        nib.save(nib.Nifti1Image(np.asanyarray(mask.dataobj), affine), moved)
        if accepted:
            data, geom = load_bold(run_input("volume", bold, moved))
            np.testing.assert_array_equal(data, expected)
            np.testing.assert_array_equal(geom.affine, nib.load(bold).affine)  # the maps keep the BOLD's
        else:
            with pytest.raises(BadDataError, match=r"up to 0\.5 voxels apart|\(0\.5 voxels\) apart") as info:
                load_bold(run_input("volume", bold, moved))
            assert "\n" not in str(info.value) and f"{shift:.3g} mm" in str(info.value)


def test_corrupt_gifti_is_bad_data(dataset):
    run = gifti_run(dataset)
    path = run.bold["R"]
    path.write_bytes(path.read_bytes()[:300])
    with pytest.raises(BadDataError, match=path.name) as info:
        load_bold(run)
    assert info.value.exit_code == ExitCode.BAD_DATA
    assert "\n" not in str(info.value)


def test_garbage_files_are_bad_data(dataset, tmp_path):
    garbage = tmp_path / "x_bold.dtseries.nii"
    garbage.write_bytes(os.urandom(2000))
    with pytest.raises(BadDataError, match="x_bold.dtseries.nii"):
        load_bold(run_input("cifti", garbage))
    truncated = tmp_path / "x_bold.nii.gz"
    truncated.write_bytes(gzip.compress(b"\0" * 100))
    mask = dataset.func() / "sub-01_task-prf_run-1_space-T1w_desc-brain_mask.nii.gz"
    with pytest.raises(BadDataError, match="x_bold.nii.gz"):
        load_bold(run_input("volume", truncated, mask))


def test_hemispheres_with_different_lengths(dataset):
    run = gifti_run(dataset)
    img = nib.load(run.bold["R"])
    img.remove_gifti_data_array(0)
    nib.save(img, run.bold["R"])
    with pytest.raises(BadDataError, match="has 12 volumes but .* has 11"):
        load_bold(run)


def test_missing_file(tmp_path):
    with pytest.raises(MissingInputError, match="does not exist"):
        load_bold(run_input("cifti", tmp_path / "nope.dtseries.nii"))


def test_failed_write_leaves_nothing(dataset, tmp_path):
    _, geom = load_bold(gifti_run(dataset))
    with pytest.raises(ValueError, match="units"):
        geom.write_maps({"x": np.zeros(5)}, lambda h: tmp_path / f"{h}.func.gii")
    target = tmp_path / "sub" / "x.func.gii"

    def explode(hemi):
        if hemi == "R":
            raise RuntimeError("disk full")
        return target

    with pytest.raises(RuntimeError):
        geom.write_maps({"x": np.zeros(70)}, explode)
    assert [p.name for p in target.parent.iterdir()] == ["x.func.gii"]
