"""prfmap.io.references: SpatialReference of outputs in each kind of space."""

from __future__ import annotations

import pytest
from templateflow import api

from prfmap.io.references import spatial_reference


@pytest.mark.parametrize(
    ("space", "den", "template", "density"),
    [
        ("fsaverage5", None, "fsaverage", "10k"),
        ("fsaverage6", None, "fsaverage", "41k"),
        ("fsaverage", None, "fsaverage", "164k"),
        ("fsLR", "32k", "fsLR", "32k"),
    ],
)
def test_template_surfaces_refer_to_templateflows_sphere(space, den, template, density):
    uri = spatial_reference(space, hemi="R", den=den)
    name = uri.rsplit("/", 1)[1]
    assert uri.startswith("https://") and name == (f"tpl-{template}_hemi-R_den-{density}_sphere.surf.gii")
    listed = api.ls(template, hemi="R", density=density, suffix="sphere", extension=".surf.gii")
    assert name in {p.name for p in listed}, "TemplateFlow has that file"


def test_native_spaces_refer_to_the_participants_fmriprep_files(tmp_path):
    anat = tmp_path / "sub-01" / "ses-a" / "anat"
    anat.mkdir(parents=True)
    (anat / "sub-01_ses-a_hemi-L_midthickness.surf.gii").touch()
    (anat / "sub-01_ses-a_desc-preproc_T1w.nii.gz").touch()
    (anat / "sub-01_ses-a_space-MNI152NLin2009cAsym_desc-preproc_T1w.nii.gz").touch()
    kwargs = {"subject": "01", "session": "a", "fmriprep_dir": tmp_path}
    assert spatial_reference("fsnative", hemi="L", **kwargs) == (
        "bids:fmriprep:sub-01/ses-a/anat/sub-01_ses-a_hemi-L_midthickness.surf.gii"
    )
    assert spatial_reference("T1w", **kwargs) == (
        "bids:fmriprep:sub-01/ses-a/anat/sub-01_ses-a_desc-preproc_T1w.nii.gz"
    )
    assert spatial_reference("T1w", subject="02", fmriprep_dir=tmp_path, fmriprep_name="fp") == (
        "bids:fp:sub-02/anat/sub-02_desc-preproc_T1w.nii.gz"
    ), "fMRIPrep's name when absent"


def test_standard_spaces_need_no_reference():
    assert spatial_reference("MNI152NLin2009cAsym", subject="01") is None
    assert spatial_reference("fsLR", den="91k") is None
