"""The group level's inverse-variance-weighted means (``stat-ivwmean``) from participants' ``stat-se``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from bids import BIDSLayout

from page_checks import check_page
from prfmap.derivatives import OutputKey
from prfmap.engine import catalog
from prfmap.group import find_participant_maps, run_group, statistic_metadata
from prfmap.group.combine import ivw_mean
from prfmap.group.maps import stat_map_name
from prfmap.io.geometry import GiftiGeometry

N = 10242
SE_SCALES = (0.15, 0.3, 0.6, 1.2, 2.0, 3.0)
"""Each participant's typical standard error of x and y (deg): some participants are far noisier."""
UNCERTAIN = slice(0, 50)
"""Vertices where the most precise participant's estimate is wild and flagged ``uncertain`` (512)."""
STEM = "task-bar_hemi-{h}_space-fsaverage5_model-gauss"


def parameter_sidecar(folder: Path, hemi: str, label: str) -> dict:
    """The one sidecar of a parameter's group maps (every statistic) in a hemisphere."""
    return json.loads((folder / f"{STEM.format(h=hemi)}_desc-{label}_boldmap.json").read_text())


def write_fit(
    output_dir: Path,
    subject: str,
    maps: dict[str, np.ndarray],
    se: dict[str, np.ndarray] | None = None,
    session: str | None = None,
) -> None:
    """Write one participant's maps, and its ``stat-se`` maps, as the participant level names them."""
    key = OutputKey(subject, session, "bar", "fsaverage5", None, None, "gauss")
    geometry = GiftiGeometry(hemis={"L": N, "R": N})
    func = key.func_dir(output_dir)
    for label, values in maps.items():
        geometry.write_maps(
            {label: values}, lambda h, lab=label: func / f"{key.stem(hemi=h, param=lab)}_boldmap.func.gii"
        )
    for label, values in (se or {}).items():
        geometry.write_maps(
            {label: values},
            lambda h, lab=label: func / stat_map_name(key, "se", ".func.gii", h, lab),
            {"Statistic": "se", "Parameter": label},
        )


def truth(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Every vertex's true pRF, the same in every participant."""
    units = 2 * N
    return {
        "x": rng.uniform(-6, 6, units),
        "y": rng.uniform(-6, 6, units),
        "sigma": rng.uniform(0.5, 3.0, units),
    }


def noisy_participant(
    rng: np.random.Generator, true: dict[str, np.ndarray], scale: float
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Estimates with Gaussian errors of known, vertex-varying standard error, and those errors."""
    units = true["x"].size
    se = {
        "x": scale * rng.uniform(0.5, 1.5, units),
        "y": scale * rng.uniform(0.5, 1.5, units),
        "sigma": 0.3 * scale * rng.uniform(0.5, 1.5, units),
    }
    est = {k: true[k] + rng.normal(0.0, se[k]) for k in se}
    maps = {
        **est,
        "r2": np.full(units, 0.5),
        "polarangle": np.degrees(np.arctan2(est["y"], est["x"])),
        "eccentricity": np.hypot(est["x"], est["y"]),
        "status": np.zeros(units),
    }
    se["polarangle"] = np.full(units, 5.0)  # derived from the weighted centre, not averaged
    se["eccentricity"] = np.hypot(se["x"], se["y"])
    return maps, se


@pytest.fixture(scope="module")
def group(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """Six participants of one fit with standard errors; the most precise is wild where flagged uncertain."""
    out = tmp_path_factory.mktemp("ivw")
    rng = np.random.default_rng(11)
    true = truth(rng)
    estimates = []
    for i, scale in enumerate(SE_SCALES):
        maps, se = noisy_participant(rng, true, scale)
        if i == 0:
            maps["x"][UNCERTAIN] = 40.0  # a wild estimate the data do not pin down: bit 512
            maps["status"][UNCERTAIN] = catalog.STATUS_BITS["uncertain"]
        write_fit(out, f"{i + 1:02d}", maps, se)
        estimates.append(maps)
    (result,) = run_group(out, r2_threshold=0.1)
    return {"out": out, "truth": true, "estimates": estimates, "result": result}


def test_stat_se_maps_are_named_as_the_design_says() -> None:
    key = OutputKey("01", None, "bar", "fsaverage5", None, None, "gauss")
    assert (
        stat_map_name(key, "se", ".func.gii", "L", "x")
        == "sub-01_task-bar_hemi-L_space-fsaverage5_model-gauss_stat-se_desc-x_boldmap.func.gii"
    )
    cifti = OutputKey("01", "2", "bar", "fsLR", "91k", None, "gauss")
    assert stat_map_name(cifti, "se", ".dscalar.nii") == (
        "sub-01_ses-2_task-bar_space-fsLR_den-91k_model-gauss_stat-se_boldmap.dscalar.nii"
    )


def test_participants_stat_se_maps_are_read(group: dict) -> None:
    sets = find_participant_maps(group["out"], ["01"])
    assert len(sets) == 1
    assert set(sets[0].stat_maps) == {("se", k) for k in ("x", "y", "sigma", "polarangle", "eccentricity")}
    assert set(sets[0].maps) == {"x", "y", "sigma", "r2", "polarangle", "eccentricity", "status"}
    assert sets[0].stat_maps[("se", "x")]["L"].shape == (N,)
    assert len(sets[0].stat_files) == 10


def test_ivw_mean_is_closer_to_the_truth_than_the_median(group: dict) -> None:
    result, true = group["result"], group["truth"]
    ivw = {k: np.concatenate([result.ivw[h][k] for h in ("L", "R")]) for k in ("x", "y", "sigma")}
    medians = {"sigma": np.concatenate([result.maps[h]["sigma"] for h in ("L", "R")])}
    for label in ("x", "y"):  # no group median of x, y is written: the participants' median, same units
        rows = np.stack([e[label] for e in group["estimates"]])
        bad = np.stack([catalog.doubtful(e["status"]) for e in group["estimates"]])
        medians[label] = np.nanmedian(np.where(bad, np.nan, rows), axis=0)
    for label in ("x", "y", "sigma"):
        error_ivw = np.median(np.abs(ivw[label] - true[label]))
        error_median = np.median(np.abs(medians[label] - true[label]))
        # measured: 0.08 (σ: 0.024) against 0.17 (σ: 0.05) for the median
        assert error_ivw < 0.7 * error_median, (label, error_ivw, error_median)
    # The expected error of the weighted mean: the weights were the true inverse variances
    se_mean = 1 / np.sqrt(sum(1 / s**2 for s in SE_SCALES))
    assert np.median(np.abs(ivw["x"] - true["x"])) < 2 * se_mean


def test_doubtful_units_are_left_out_of_the_ivw_mean(group: dict) -> None:
    result, true = group["result"], group["truth"]
    count = result.ivw_count["L"]["x"]
    np.testing.assert_array_equal(count[UNCERTAIN], len(SE_SCALES) - 1)
    np.testing.assert_array_equal(count[UNCERTAIN.stop :], len(SE_SCALES))
    assert np.abs(result.ivw["L"]["x"][UNCERTAIN] - true["x"][UNCERTAIN]).max() < 1.5  # not near 40
    np.testing.assert_array_equal(result.maps["L"]["count"][UNCERTAIN], len(SE_SCALES) - 1)


def test_ivw_files_sidecars_and_report(group: dict) -> None:
    out, result = group["out"], group["result"]
    folder = out / "group"
    for hemi in ("L", "R"):
        stem = STEM.format(h=hemi)
        for label in ("x", "y", "sigma"):
            for stat in ("ivwmean", "ivwcount"):
                path = folder / f"{stem}_stat-{stat}_desc-{label}_boldmap.func.gii"
                assert path.is_file(), path
                sidecar = statistic_metadata(parameter_sidecar(folder, hemi, label), stat)
                assert sidecar["Statistic"] == stat and sidecar["Parameter"] == label
                assert sidecar["Participants"] == [f"sub-{i + 1:02d}" for i in range(len(SE_SCALES))]
                assert any("_stat-se_desc-x_" in s for s in sidecar["Sources"])
                assert "uncertain" in sidecar["Description"] and sidecar["Files"] == [path.name]
        polar = parameter_sidecar(folder, hemi, "polarangle")
        assert list(polar["Statistics"]) == ["circmean", "ivwmean"] and polar["Units"] == "deg"
        assert "atan2(y, x) of the stat-ivwmean x and y" in polar["Statistics"]["ivwmean"]["Description"]
        assert not any("_stat-se_" in s for s in polar["Statistics"]["circmean"]["Sources"])
        assert not (folder / f"{stem}_stat-ivwcount_desc-polarangle_boldmap.func.gii").exists()
        ecc = statistic_metadata(parameter_sidecar(folder, hemi, "eccentricity"), "ivwmean")
        assert "hypot(x, y) of the stat-ivwmean x" in ecc["Description"]
    assert not list(folder.glob("*_stat-*.json"))  # one sidecar per parameter, none per statistic
    sigma = parameter_sidecar(folder, "L", "sigma")
    assert sigma["Parameter"] == "sigma" and "Units" not in sigma  # the count's differ: per statistic
    assert sigma["Description"] == catalog.parameter_by_label("sigma").description
    assert list(sigma["Statistics"]) == ["median", "ivwmean", "ivwcount"]
    assert {s: e["Units"] for s, e in sigma["Statistics"].items()} == {
        "median": "deg",
        "ivwmean": "deg",
        "ivwcount": "1",
    }
    assert "w = 1 / se^2" in sigma["Statistics"]["ivwmean"]["Description"]
    values = nib.load(folder / f"{STEM.format(h='L')}_stat-ivwmean_desc-x_boldmap.func.gii").agg_data()
    np.testing.assert_allclose(values, result.ivw["L"]["x"], rtol=1e-6, atol=1e-6)
    angle = result.ivw["R"]["polarangle"]
    expected = np.degrees(np.arctan2(result.ivw["R"]["y"], result.ivw["R"]["x"]))
    np.testing.assert_allclose(angle, expected, atol=1e-9)
    kinds = {p.stem.rsplit("_", 1)[-1] for p in check_page(out / "group.html")}
    for label in ("polarangle", "eccentricity", "sigma"):
        assert {f"flat-{label}", f"flat-ivwmean-{label}", f"views-ivwmean-{label}"} <= kinds
    assert not any("ivwmean-x" in k or "ivwmean-r2" in k for k in kinds)
    html = (out / "group.html").read_text()
    assert "inverse-variance-weighted mean pRF size σ (deg)" in html and "1/se²" in html
    assert "polar angle of the weighted mean centre (deg)" in html
    # its caption names each condition once ("not doubtful, not doubtful and with ..." before)
    assert "not doubtful and a finite standard error" in html and "not doubtful, not doubtful" not in html
    src = html.index("flat-sigma.png")
    assert src < html.index("flat-ivwmean-sigma.png") < html.index("flat-r2.png")  # beside the median


def test_plain_pybids_gives_each_group_map_its_parameters_sidecar(group: dict) -> None:
    """Plain pybids does not know ``stat``: each map gets its parameter's sidecar, describing it."""
    out = group["out"]
    description = {
        "Name": "prfmap group maps",
        "BIDSVersion": "1.10.0",
        "DatasetType": "derivative",
        "GeneratedBy": [{"Name": "prfmap"}],
    }
    (out / "dataset_description.json").write_text(json.dumps(description))
    layout = BIDSLayout(out, validate=False, is_derivative=True)
    maps = [Path(f.path) for f in layout.get(suffix="boldmap", extension=".func.gii") if "group" in f.path]
    assert sorted(maps) == sorted((out / "group").glob("*_stat-*_boldmap.func.gii"))
    for path in maps:
        hemi, stat, label = re.search(r"_hemi-(\w)_.*_stat-(\w+)_desc-(\w+)_", path.name).groups()
        metadata = layout.get_metadata(str(path))
        shared = parameter_sidecar(out / "group", hemi, label)
        assert metadata == {k: v for k, v in shared.items() if v is not None}, path.name  # pybids drops nulls
        assert path.name in metadata["Statistics"][stat]["Files"]


def test_without_stat_se_maps_no_ivw_is_written(tmp_path: Path, caplog) -> None:
    rng = np.random.default_rng(2)
    true = truth(rng)
    for i, scale in enumerate(SE_SCALES[:3]):
        maps, _ = noisy_participant(rng, true, scale)
        write_fit(tmp_path / "old", f"{i + 1:02d}", maps)
    (result,) = run_group(tmp_path / "old", report=False)
    assert result.ivw == {} and result.ivw_count == {}
    names = sorted(p.name for p in (tmp_path / "old" / "group").glob("*_boldmap.func.gii"))
    assert len(names) == 10 and not any("ivw" in n for n in names)
    # Some participants with standard errors, one without: no ivw map, and a log line says why
    for i, scale in enumerate(SE_SCALES[:2]):
        maps, se = noisy_participant(rng, true, scale)
        write_fit(tmp_path / "mixed", f"{i + 1:02d}", maps, se)
    maps, _ = noisy_participant(rng, true, 1.0)
    write_fit(tmp_path / "mixed", "03", maps)
    with caplog.at_level("WARNING", logger="prfmap.group"):
        (result,) = run_group(tmp_path / "mixed", report=False)
    assert result.ivw == {}
    assert not list((tmp_path / "mixed" / "group").glob("*ivw*"))
    assert "no stat-ivwmean map of x, y, sigma: sub-03 lack their stat-se maps" in caplog.text


def test_standard_errors_of_different_noise_models_are_not_weighed_together(tmp_path: Path, caplog) -> None:
    """Issue 36: ols's standard errors are too small under autocorrelated noise; participants fitted
    with ar1 and ols get no inverse-variance-weighted mean, and a log line names who used which."""
    rng = np.random.default_rng(6)
    true = truth(rng)
    for i, (scale, noise) in enumerate(((0.5, "ar1"), (0.5, "ar1"), (1.0, "ols"))):
        maps, se = noisy_participant(rng, true, scale)
        write_fit(tmp_path / "mixed", f"{i + 1:02d}", maps, se)
        key = OutputKey(f"{i + 1:02d}", None, "bar", "fsaverage5", None, None, "gauss")
        sidecar = key.func_dir(tmp_path / "mixed") / f"{key.stem(hemi='L', param='x')}_boldmap.json"
        sidecar.write_text(json.dumps({"FitSettings": {"noise_model": {"option": noise}}}))
    with caplog.at_level("WARNING", logger="prfmap.group"):
        (result,) = run_group(tmp_path / "mixed", report=False)
    assert result.ivw == {} and not list((tmp_path / "mixed" / "group").glob("*ivw*"))
    assert "different noise models (ar1: sub-01, sub-02; ols: sub-03)" in caplog.text
    assert list((tmp_path / "mixed" / "group").glob("*_stat-median_desc-sigma_boldmap.func.gii"))  # as before


def test_impossible_standard_errors_are_left_out_with_a_warning(tmp_path: Path, caplog) -> None:
    rng = np.random.default_rng(8)
    true = truth(rng)
    for i, scale in enumerate(SE_SCALES[:3]):
        maps, se = noisy_participant(rng, true, scale)
        if i == 1:
            se["x"][:5] = 0.0
            se["x"][5:7] = -1.0
        write_fit(tmp_path, f"{i + 1:02d}", maps, se)
    with caplog.at_level("WARNING", logger="prfmap.group"):
        (result,) = run_group(tmp_path, report=False)
    assert "standard errors of 0 or below left out (sub-02: 7 vertices)" in caplog.text
    np.testing.assert_array_equal(result.ivw_count["L"]["x"][:7], 2)  # sub-02 left out there only
    np.testing.assert_array_equal(result.ivw_count["L"]["x"][7:100], 3)


def test_a_missing_hemisphere_of_standard_errors_names_its_participant(tmp_path: Path, caplog) -> None:
    rng = np.random.default_rng(7)
    true = truth(rng)
    for i, scale in enumerate(SE_SCALES[:2]):
        maps, se = noisy_participant(rng, true, scale)
        write_fit(tmp_path, f"{i + 1:02d}", maps, se)
    key = OutputKey("02", None, "bar", "fsaverage5", None, None, "gauss")
    (key.func_dir(tmp_path) / stat_map_name(key, "se", ".func.gii", "R", "x")).unlink()
    with caplog.at_level("WARNING", logger="prfmap.group"):
        run_group(tmp_path, report=False)
    assert "no stat-ivwmean map of x: sub-02 lack their stat-se maps" in caplog.text


def test_sessions_enter_as_estimates_and_the_participant_counts_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    true = truth(rng)
    for subject, session, scale in (("01", None, 0.5), ("02", "1", 0.5), ("02", "2", 0.5)):
        maps, se = noisy_participant(rng, true, scale)
        write_fit(tmp_path, subject, maps, se, session=session)
    (result,) = run_group(tmp_path, report=False)
    np.testing.assert_array_equal(result.ivw_count["L"]["x"], 2)
    np.testing.assert_array_equal(result.maps["L"]["count"], 2)


def test_ivw_mean_weights_by_inverse_variance() -> None:
    estimates = np.array([[1.0, 1.0, 5.0, np.nan], [3.0, 2.0, 7.0, 1.0], [9.0, 4.0, 1.0, 2.0]])
    se = np.array([[1.0, 1.0, 0.0, 1.0], [1.0, 2.0, np.inf, 1.0], [2.0, 1.0, 1.0, 1.0]])
    ok = np.ones_like(estimates, dtype=bool)
    ok[2, 3] = False  # doubtful
    mean, count = ivw_mean(estimates, se, ok, ["a", "b", "c"])
    np.testing.assert_allclose(mean, [(1 + 3 + 9 / 4) / 2.25, (1 + 2 / 4 + 4) / 2.25, 1.0, 1.0])
    np.testing.assert_array_equal(count, [3, 3, 1, 1])
    mean, count = ivw_mean(estimates, se, ok, ["a", "a", "c"])  # two sessions of one participant
    np.testing.assert_array_equal(count, [2, 2, 1, 1])
    mean, count = ivw_mean(estimates, se, np.zeros_like(ok), ["a", "b", "c"])
    assert np.isnan(mean).all() and not count.any()


def test_cifti_stat_se_maps_are_read(tmp_path: Path) -> None:
    from prfmap.io.geometry import CiftiGeometry

    cortex = {"L": np.arange(0, 32492, 2), "R": np.arange(1, 32492, 2)}
    axis = nib.cifti2.BrainModelAxis.from_surface(
        cortex["L"], 32492, "CortexLeft"
    ) + nib.cifti2.BrainModelAxis.from_surface(cortex["R"], 32492, "CortexRight")
    geometry = CiftiGeometry(brain_models=axis)
    units = len(axis)
    for subject, x, se in (("01", 1.0, 0.5), ("02", 4.0, 1.0)):
        key = OutputKey(subject, None, "bar", "fsLR", "91k", None, "gauss")
        maps = {
            "x": np.full(units, x),
            "y": np.full(units, 0.0),
            "polarangle": np.full(units, 0.0),
            "eccentricity": np.full(units, x),
            "sigma": np.full(units, 1.0),
            "r2": np.full(units, 0.5),
        }
        folder = key.func_dir(tmp_path)
        main = folder / f"{key.stem()}_boldmap.dscalar.nii"
        geometry.write_maps(maps, lambda hemi, p=main: p)
        errors = {"x": np.full(units, se), "y": np.full(units, se), "sigma": np.full(units, 0.1)}
        path = folder / stat_map_name(key, "se", ".dscalar.nii")
        geometry.write_maps(errors, lambda hemi, p=path: p)
    (result,) = run_group(tmp_path, report=False)
    x = result.ivw["L"]["x"]
    np.testing.assert_allclose(x[cortex["L"]], (1.0 / 0.25 + 4.0 / 1.0) / (1 / 0.25 + 1.0))
    assert np.isnan(x[1]) and result.ivw_count["L"]["x"][1] == 0
    name = "task-bar_hemi-R_space-fsLR_den-32k_model-gauss_stat-ivwmean_desc-sigma_boldmap.func.gii"
    assert (tmp_path / "group" / name).is_file()
