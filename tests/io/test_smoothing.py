"""--smooth-fwhm: the volume smoothing equals NiftiMasker's, the surface smoothing nilearn's on the mesh."""

from __future__ import annotations

from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from nilearn.image import smooth_img
from nilearn.image.image import _mris_fwhm_to_niters
from nilearn.maskers import NiftiMasker
from nilearn.surface import InMemoryMesh, PolyMesh, SurfaceImage

from helpers import run_input
from prfmap.errors import UsageError
from prfmap.io.bold import load_bold
from prfmap.io.meshes import find_midthickness
from prfmap.io.smoothing import (
    Smoothing,
    mean_vertex_area,
    smallest_surface_fwhm,
    smooth_cifti,
    smooth_gifti,
    smoothing_for,
    surface_iterations,
)


@pytest.fixture(scope="module")
def fsaverage5() -> Smoothing:
    return smoothing_for(run_input("gifti", {}, space="fsaverage5"), 6.0, None)


@pytest.fixture(scope="module")
def fslr() -> Smoothing:
    return smoothing_for(run_input("cifti", Path("x"), space="fsLR", den="91k"), 4.0, None)


def test_a_volume_is_smoothed_as_nifti_masker_smooths_it(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    shape = (14, 12, 9)
    affine = np.diag([2.0, 2.5, 3.0, 1.0])
    affine[:3, 3] = [-10, 4, 7]
    data = rng.normal(100, 10, (*shape, 7)).astype(np.float32)
    data[0, 0, 0, 3] = np.nan  # outside the mask: NiftiMasker counts it as 0
    mask = np.zeros(shape, bool)
    mask[2:12, 3:10, 1:8] = True
    nib.save(nib.Nifti1Image(data, affine), tmp_path / "bold.nii.gz")
    nib.save(nib.Nifti1Image(mask.astype(np.uint8), affine), tmp_path / "mask.nii.gz")
    run = run_input("volume", tmp_path / "bold.nii.gz", tmp_path / "mask.nii.gz")

    smoothed, _ = load_bold(run, Smoothing(5.0))
    masker = NiftiMasker(mask_img=str(tmp_path / "mask.nii.gz"), smoothing_fwhm=5.0, standardize=None)
    expected = masker.fit_transform(str(tmp_path / "bold.nii.gz")).T

    np.testing.assert_allclose(smoothed, expected, rtol=1e-6, atol=1e-4)
    raw, _ = load_bold(run)
    assert np.abs(raw - smoothed).max() > 1.0  # the smoothing did something


def test_volumes_smoothed_a_block_at_a_time_equal_all_at_once(tmp_path: Path, monkeypatch) -> None:
    from prfmap.io import smoothing

    rng = np.random.default_rng(1)
    data = rng.normal(size=(6, 7, 5, 9)).astype(np.float32)
    whole = smoothing.smooth_volume(data.copy(), np.eye(4), 3.0)
    monkeypatch.setattr(smoothing, "BLOCK_BYTES", data[..., :2].nbytes)
    np.testing.assert_array_equal(smoothing.smooth_volume(data.copy(), np.eye(4), 3.0), whole)


def test_a_surface_is_smoothed_as_nilearn_smooths_it_on_the_midthickness(fsaverage5: Smoothing) -> None:
    rng = np.random.default_rng(2)
    n = {h: len(fsaverage5.meshes[h][0]) for h in ("L", "R")}
    series = rng.normal(100, 5, (n["L"] + n["R"], 4)).astype(np.float32)

    smoothed = smooth_gifti(series, n, fsaverage5)

    mesh = PolyMesh(left=InMemoryMesh(*fsaverage5.meshes["L"]), right=InMemoryMesh(*fsaverage5.meshes["R"]))
    image = SurfaceImage(mesh=mesh, data={"left": series[: n["L"]], "right": series[n["L"] :]})
    expected = smooth_img(image, 6.0).data.parts
    np.testing.assert_allclose(smoothed[: n["L"]], expected["left"], rtol=1e-5)
    np.testing.assert_allclose(smoothed[n["L"] :], expected["right"], rtol=1e-5)
    assert np.std(smoothed) < 0.6 * np.std(series)


def test_unusable_vertices_pull_no_neighbour_towards_zero(fsaverage5: Smoothing) -> None:
    n = {h: len(fsaverage5.meshes[h][0]) for h in ("L", "R")}
    series = np.full((n["L"] + n["R"], 3), 100.0, np.float32)
    series[:, 1] = 101.0
    series[:500] = 0.0  # a medial wall of zeros
    series[600:650, 2] = np.nan  # series with a missing volume
    smoothed = smooth_gifti(series, n, fsaverage5)

    kept = np.ones(len(series), bool)
    kept[:500] = kept[600:650] = False
    np.testing.assert_allclose(smoothed[kept], series[kept], rtol=1e-6)
    np.testing.assert_array_equal(smoothed[~kept], series[~kept])
    # nilearn alone spreads the zeros into the cortex beside them
    plain = smooth_img(
        SurfaceImage(
            mesh=PolyMesh(left=InMemoryMesh(*fsaverage5.meshes["L"])), data={"left": series[: n["L"]]}
        ),
        6.0,
    )
    assert np.nanmin(plain.data.parts["left"][500:]) < 90


def test_cifti_cortex_is_smoothed_on_its_mesh_vertices_and_voxels_in_their_volume(fslr: Smoothing) -> None:
    rng = np.random.default_rng(3)
    n_mesh = len(fslr.meshes["L"][0])
    left = np.sort(rng.choice(n_mesh, n_mesh - 3000, replace=False))  # a medial wall left out
    right = np.arange(100, n_mesh)
    mask = np.zeros((6, 6, 5), bool)
    mask[1:5, 1:5, 1:4] = True
    models = (
        nib.cifti2.BrainModelAxis.from_surface(left, n_mesh, "CortexLeft")
        + nib.cifti2.BrainModelAxis.from_surface(right, n_mesh, "CortexRight")
        + nib.cifti2.BrainModelAxis.from_mask(mask, name="thalamus_left", affine=np.diag([2.0, 2, 2, 1]))
    )
    series = rng.normal(50, 4, (len(models), 3)).astype(np.float32)

    smoothed = smooth_cifti(series, models, fslr)

    # the left cortex: nilearn's smoothing of the grayordinates placed on the whole mesh, normalised by
    # the smoothed weight of the vertices present
    full = np.zeros((n_mesh, 4))
    full[left, :3] = series[: len(left)]
    full[left, 3] = 1.0
    surface = SurfaceImage(mesh=PolyMesh(left=InMemoryMesh(*fslr.meshes["L"])), data={"left": full})
    spread = np.asarray(smooth_img(surface, 4.0).data.parts["left"])
    np.testing.assert_allclose(smoothed[: len(left)], spread[left, :3] / spread[left, 3:], rtol=1e-5)
    # the voxels: a constant stays constant up to the edges of the grayordinates
    voxels = np.flatnonzero(models.volume_mask)
    constant = series.copy()
    constant[voxels] = 7.0
    np.testing.assert_allclose(smooth_cifti(constant, models, fslr)[voxels], 7.0, rtol=1e-5)
    assert np.std(smoothed[voxels]) < 0.8 * np.std(series[voxels])


@pytest.mark.parametrize("fwhm", [2.0, 3.1, 4.0, 6.0, 10.0])
def test_iterations_are_freesurfers_as_nilearn_counts_them(fsaverage5: Smoothing, fwhm: float) -> None:
    coords, faces = fsaverage5.meshes["L"]
    image = SurfaceImage(
        mesh=PolyMesh(left=InMemoryMesh(coords, faces)), data={"left": np.zeros(len(coords))}
    )
    assert surface_iterations(fwhm, mean_vertex_area(coords, faces)) == _mris_fwhm_to_niters(fwhm, image)[0]


def test_a_kernel_smaller_than_the_mesh_is_refused() -> None:
    with pytest.raises(UsageError, match=r"smooths nothing on fsaverage5's mesh .* use at least 3\.1 mm"):
        smoothing_for(run_input("gifti", {}, space="fsaverage5"), 3.0, None)
    coords, faces = find_midthickness("01", "fsaverage5", None, None)[0]["L"]
    area = mean_vertex_area(coords, faces)
    assert surface_iterations(smallest_surface_fwhm(area), area) == 1
    assert surface_iterations(smallest_surface_fwhm(area) - 0.1, area) == 0


def test_fsnative_is_smoothed_on_fmripreps_midthickness_or_between_pial_and_white(tmp_path: Path) -> None:
    coords, faces = find_midthickness("01", "fsaverage5", None, None)[0]["L"]
    anat = tmp_path / "sub-01" / "anat"
    anat.mkdir(parents=True)

    def surface(name: str, points: np.ndarray) -> None:
        arrays = [
            nib.gifti.GiftiDataArray(points.astype(np.float32), intent="NIFTI_INTENT_POINTSET"),
            nib.gifti.GiftiDataArray(faces.astype(np.int32), intent="NIFTI_INTENT_TRIANGLE"),
        ]
        nib.save(nib.gifti.GiftiImage(darrays=arrays), anat / name)

    for hemi in "LR":
        surface(f"sub-01_hemi-{hemi}_pial.surf.gii", coords * 1.1)
        surface(f"sub-01_hemi-{hemi}_white.surf.gii", coords * 0.9)
    meshes, source = find_midthickness("01", "fsnative", None, tmp_path)
    np.testing.assert_allclose(meshes["R"][0], coords, rtol=1e-5)
    assert "average of sub-01_hemi-L_pial and _white" in source
    surface("sub-01_hemi-L_midthickness.surf.gii", coords * 2)
    meshes, source = find_midthickness("01", "fsnative", None, tmp_path)
    np.testing.assert_allclose(meshes["L"][0], coords * 2, rtol=1e-5)
    assert "sub-01_hemi-L_midthickness.surf.gii" in source
    meshes, source = find_midthickness("02", "fsnative", None, tmp_path)
    assert meshes == {}
    assert "no sub-02_hemi-L_midthickness.surf.gii (nor _pial and _white)" in source


def test_no_surface_on_disk_is_a_missing_input(tmp_path: Path) -> None:
    from prfmap.errors import MissingInputError

    with pytest.raises(MissingInputError, match="no sub-01_hemi-L_midthickness.surf.gii"):
        smoothing_for(run_input("gifti", {}, space="fsnative"), 4.0, tmp_path)
    assert smoothing_for(run_input("gifti", {}, space="fsnative"), 0.0, tmp_path) is None
    with pytest.raises(UsageError, match=r"--smooth-fwhm 25 is not in \(0, 20\] mm"):
        smoothing_for(run_input("volume", Path("x"), Path("m")), 25.0, tmp_path)
