"""Visual areas in the outputs (prfmap.derivatives.areas): the label maps as GIFTI and CIFTI label
files, the per-area summary and its σ-against-eccentricity line (checked against statsmodels)."""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import statsmodels.api as sm

from prfmap.derivatives import OutputKey
from prfmap.derivatives.areas import (
    SUMMARY_COLUMNS,
    UnitAreas,
    area_summary,
    weighted_line,
    write_area_files,
    write_area_summary,
)
from prfmap.engine import catalog
from prfmap.errors import UsageError
from prfmap.io.area_labels import AreaLabels
from prfmap.io.atlases import ATLASES
from prfmap.io.geometry import CiftiGeometry, GiftiGeometry, VolumeGeometry
from prfmap.participant.areas import fit_areas

KEY = OutputKey("01", None, "prf", "fsaverage5", None, None, "gauss")


def test_the_line_and_its_robust_errors_match_statsmodels():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 10, 300)
    w = rng.uniform(0.1, 1.0, 300)
    y = 0.4 + 0.12 * x + rng.normal(scale=0.05 + 0.03 * x)
    line = weighted_line(x, y, w)
    fit = sm.WLS(y, sm.add_constant(x), weights=w).fit(cov_type="HC1")
    np.testing.assert_allclose([line["intercept"], line["slope"]], fit.params, rtol=1e-10)
    np.testing.assert_allclose([line["intercept_se"], line["slope_se"]], fit.bse, rtol=1e-10)
    assert np.isnan(weighted_line(x[:4], y[:4], w[:4])["slope"])
    assert np.isnan(weighted_line(np.ones(10), y[:10], w[:10])["slope"])


def _maps(rng, codes, lines):
    n = codes.size
    ecc = rng.uniform(0.2, 9.5, n)
    sigma = np.full(n, np.nan)
    for code, (slope, intercept) in lines.items():
        here = codes == code
        sigma[here] = intercept + slope * ecc[here] + rng.normal(scale=0.02, size=here.sum())
    angle = rng.uniform(-np.pi, np.pi, n)
    r2 = rng.uniform(0.3, 0.9, n)
    return {
        "x": ecc * np.cos(angle),
        "y": ecc * np.sin(angle),
        "eccentricity": ecc,
        "sigma": sigma,
        "r2": r2,
        "cvr2": r2 - 0.1,
        "status": np.zeros(n),
    }


def test_the_summary_recovers_each_areas_line_and_counts_the_units_it_shows():
    rng = np.random.default_rng(1)
    codes = rng.choice([0, 1, 2, 3, 4, 5, 6, 7], size=4000)  # wang15: V1v V1d V2v V2d V3v V3d hV4
    lines = {1: (0.1, 0.5), 2: (0.1, 0.5), 3: (0.15, 0.6), 4: (0.15, 0.6), 5: (0.2, 0.7), 6: (0.2, 0.7)}
    lines[7] = (0.3, 0.8)
    maps = _maps(rng, codes, lines)
    maps["r2"][:50] = 0.05  # below the threshold
    maps["status"][50:100] = catalog.STATUS_BITS["at_bound"]  # doubtful
    maps["r2"][100:150] = np.nan  # no signal
    rows = {r["area"]: r for r in area_summary(maps, codes, "wang15", 0.1, 20.0)}
    assert list(rows) == ["V1", "V2", "V3", "hV4"], "only areas with units, V1–V3 pooled"
    for area, codes_of, (slope, intercept) in (("V1", (1, 2), lines[1]), ("hV4", (7,), lines[7])):
        row = rows[area]
        inside = np.isin(codes, codes_of)
        shown = inside & (maps["r2"] >= 0.1) & (maps["status"] == 0)
        assert (
            row["units"] == inside.sum() and row["units_fitted"] == (inside & np.isfinite(maps["r2"])).sum()
        )
        assert row["units_shown"] == shown.sum()
        assert abs(row["sigma_slope"] - slope) < 3 * row["sigma_slope_se"] + 1e-3
        assert abs(row["sigma_intercept"] - intercept) < 3 * row["sigma_intercept_se"] + 1e-3
        assert row["median_cvr2"] == pytest.approx(
            np.nanmedian(maps["cvr2"][inside & np.isfinite(maps["r2"])])
        )
    narrow = area_summary(maps, codes, "wang15", 0.1, 8.0)[0]
    assert narrow["units_shown"] < rows["V1"]["units_shown"], "eccentricity beyond the radius is left out"


def test_the_summary_is_a_tsv_with_n_a_and_a_sidecar_describing_every_column(tmp_path):
    rows = [
        {c: np.nan for c in SUMMARY_COLUMNS}
        | {"area": "V1", "units": 3, "units_fitted": 0, "units_shown": 0},
    ]
    tsv, sidecar = write_area_summary(
        tmp_path, KEY.stem(param="areas"), rows, SUMMARY_COLUMNS, {"Atlas": "benson14"}
    )
    assert tsv.name == "sub-01_task-prf_space-fsaverage5_model-gauss_desc-areas_summary.tsv"
    header, line = tsv.read_text().splitlines()
    assert header.split("\t") == list(SUMMARY_COLUMNS)
    assert line.split("\t")[:5] == ["V1", "3", "0", "0", "n/a"]
    described = json.loads(sidecar.read_text())
    assert set(SUMMARY_COLUMNS) <= set(described) and described["Atlas"] == "benson14"


def test_gifti_label_maps_hold_the_codes_and_name_the_areas(tmp_path):
    atlas = ATLASES["benson14"]
    codes = {"L": np.arange(20) % 13, "R": (np.arange(20) + 5) % 13}
    labels = AreaLabels(atlas, codes, "at the same vertices")
    geometry = GiftiGeometry(hemis={"L": 20, "R": 20})
    written = write_area_files(tmp_path / "anat", KEY, geometry, labels)
    names = sorted(p.name for p in written)
    assert names == [
        "sub-01_hemi-L_space-fsaverage5_atlas-benson14_desc-area_dseg.json",
        "sub-01_hemi-L_space-fsaverage5_atlas-benson14_desc-area_dseg.label.gii",
        "sub-01_hemi-R_space-fsaverage5_atlas-benson14_desc-area_dseg.json",
        "sub-01_hemi-R_space-fsaverage5_atlas-benson14_desc-area_dseg.label.gii",
    ]
    image = nib.load(str(tmp_path / "anat" / names[3]))
    np.testing.assert_array_equal(image.agg_data(), codes["R"])
    assert image.labeltable.get_labels_as_dict() == {0: "none", **dict(enumerate(atlas.areas, start=1))}
    assert image.meta["AnatomicalStructurePrimary"] == "CortexRight"
    sidecar = json.loads((tmp_path / "anat" / names[2]).read_text())
    assert sidecar["Levels"]["1"] == "V1" and sidecar["Atlas"] == "benson14"


def test_a_cifti_label_map_covers_the_cortex_and_leaves_the_subcortex_unlabelled(tmp_path):
    atlas = ATLASES["hcpmmp"]
    left = nib.cifti2.BrainModelAxis.from_mask(np.ones(10, bool), name="CortexLeft")
    right = nib.cifti2.BrainModelAxis.from_mask(np.ones(10, bool), name="CortexRight")
    voxels = nib.cifti2.BrainModelAxis.from_mask(
        np.ones((2, 2, 1), bool), name="thalamus_left", affine=np.eye(4)
    )
    geometry = CiftiGeometry(brain_models=left + right + voxels)
    labels = AreaLabels(atlas, {"L": np.arange(10), "R": np.arange(10)[::-1]}, "on its own fs_LR 32k mesh")
    key = OutputKey("01", "a", "prf", "fsLR", "91k", None, "gauss")
    data, sidecar = write_area_files(tmp_path, key, geometry, labels)
    assert data.name == "sub-01_ses-a_space-fsLR_atlas-hcpmmp_den-91k_desc-area_dseg.dlabel.nii"
    image = nib.load(str(data))
    values = np.asarray(image.get_fdata())[0]
    np.testing.assert_array_equal(values, [*range(10), *range(9, -1, -1), 0, 0, 0, 0])
    (table,) = image.header.get_axis(0).label
    assert table[1][0] == "V1" and table[0][0] == "none"
    assert json.loads(sidecar.read_text())["Levels"]["2"] == "V2"


def test_volumes_have_no_areas_and_an_atlas_asked_for_there_is_refused():
    geometry = VolumeGeometry(mask=np.ones((2, 2, 2), bool))
    areas, note = fit_areas("auto", "T1w", None, geometry, "01", None)
    assert areas is None and "space T1w is a volume" in note
    with pytest.raises(UsageError, match="--atlas benson14: visual areas are on cortical surfaces"):
        fit_areas("benson14", "T1w", None, geometry, "01", None)
    assert fit_areas("none", "fsaverage5", None, GiftiGeometry(hemis={"L": 4}), "01", None)[0] is None


def test_each_unit_gets_its_vertex_area():
    geometry = GiftiGeometry(hemis={"L": 10242, "R": 10242})
    areas, note = fit_areas("auto", "fsaverage5", None, geometry, "01", None)
    assert isinstance(areas, UnitAreas) and "--atlas benson14" in note
    np.testing.assert_array_equal(
        areas.codes, np.concatenate([areas.labels.hemis["L"], areas.labels.hemis["R"]])
    )


def test_gather_is_the_inverse_of_split():
    from prfmap.io.geometry import SurfaceLayout

    layout = SurfaceLayout(
        hemis={"L": 3, "R": 2},
        vertices={"L": np.array([0, 2, 4]), "R": np.array([1, 3])},
        n_vertices={"L": 5, "R": 4},
    )
    units = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    np.testing.assert_array_equal(layout.gather(layout.split(units)), units)
    np.testing.assert_array_equal(layout.gather(layout.split(units), 7), [*units, 0, 0])
    plain = SurfaceLayout(hemis={"L": 2, "R": 2})
    np.testing.assert_array_equal(
        plain.gather({"L": np.array([7, 8]), "R": np.array([9, 10])}), [7, 8, 9, 10]
    )
