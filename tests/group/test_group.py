"""The group level: participants' template-space maps combined, with sidecars and group.html."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from headless_chromium import render
from page_checks import check_page
from prfmap.derivatives import OutputKey
from prfmap.errors import BadDataError, ExitCode, MissingInputError
from prfmap.group import combine, find_participant_maps, run_group, statistic_metadata
from prfmap.io.geometry import GiftiGeometry

N = 10242


def write_maps(
    output_dir: Path,
    subject: str,
    space: str,
    maps: dict[str, np.ndarray],
    session: str | None = None,
    model: str = "gauss",
) -> None:
    """Write one participant's maps as the participant level names them, one file per param."""
    key = OutputKey(subject, session, "bar", space, None, None, model)
    geometry = GiftiGeometry(hemis={"L": N, "R": N})
    func = key.func_dir(output_dir)
    for label, values in maps.items():
        geometry.write_maps(
            {label: values},
            lambda hemi, lab=label: func / f"{key.stem(hemi=hemi, param=lab)}_boldmap.func.gii",
        )


def participant(rng: np.random.Generator, angle: float, r2: float) -> dict[str, np.ndarray]:
    units = 2 * N
    x = rng.uniform(-8, 8, units)
    y = rng.uniform(-8, 8, units)
    out = {
        "x": x,
        "y": y,
        "sigma": rng.uniform(0.5, 3, units),
        "r2": np.full(units, r2),
        "polarangle": np.degrees(np.arctan2(y, x)),
        "eccentricity": np.hypot(x, y),
    }
    out["polarangle"][:10] = angle
    return out


def test_combine_statistics() -> None:
    stacks = {
        "polarangle": np.array([[170.0, 10.0, 40.0], [-170.0, 30.0, 50.0], [175.0, 20.0, np.nan]]),
        "eccentricity": np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0], [8.0, 6.0, 1.0]]),
        "sigma": np.array([[0.5, 1.0, 1.0], [1.5, 2.0, 2.0], [2.5, 9.0, 3.0]]),
        "r2": np.array([[0.5, 0.5, 0.05], [0.4, 0.6, 0.05], [0.3, 0.05, 0.5]]),
    }
    out = combine(stacks, r2_threshold=0.1)
    np.testing.assert_allclose(out["count"], [3, 2, 0])
    assert abs(abs(out["polarangle"][0]) - 178.33) < 0.05  # across the ±180° seam, not 58°
    np.testing.assert_allclose(out["polarangle"][1], 20.0, atol=1e-9)
    assert np.isnan(out["polarangle"][2]) and np.isnan(out["eccentricity"][2])
    np.testing.assert_allclose(out["eccentricity"][:2], [3.0, 3.0])
    np.testing.assert_allclose(out["sigma"][:2], [1.5, 1.5])
    np.testing.assert_allclose(out["r2"], [0.4, 0.3833333333, 0.2])


@pytest.fixture(scope="module")
def two_participants(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("out")
    rng = np.random.default_rng(3)
    a = participant(rng, 170.0, 0.6)
    b = participant(rng, -170.0, 0.4)
    b["r2"][N : N + 100] = 0.01
    write_maps(out, "01", "fsaverage5", a)
    write_maps(out, "02", "fsaverage5", b)
    write_maps(out, "02", "fsnative", participant(rng, 0.0, 0.5))
    return out


@pytest.fixture(scope="module")
def grouped(two_participants: Path) -> tuple[Path, list]:
    return two_participants, run_group(two_participants, r2_threshold=0.1)


def test_group_maps_sidecars_and_report(grouped: tuple[Path, list]) -> None:
    out, results = grouped
    assert len(results) == 1 and results[0].subjects == ["01", "02"]
    group = out / "group"
    stem = "task-bar_hemi-{h}_space-fsaverage5_model-gauss"
    for hemi in ("L", "R"):
        for param, stat in (
            ("polarangle", "circmean"),
            ("eccentricity", "median"),
            ("sigma", "median"),
            ("r2", "mean"),
        ):
            path = group / f"{stem.format(h=hemi)}_stat-{stat}_desc-{param}_boldmap.func.gii"
            assert path.is_file(), path
            assert not path.with_name(path.name.replace(".func.gii", ".json")).exists()
            shared = json.loads((group / f"{stem.format(h=hemi)}_desc-{param}_boldmap.json").read_text())
            assert list(shared["Statistics"]) == [stat]  # no standard errors: one statistic
            assert shared["Parameter"] == param and shared["Units"] == ("1" if param == "r2" else "deg")
            sidecar = statistic_metadata(shared, stat)
            assert sidecar["Statistic"] == stat and sidecar["Participants"] == ["sub-01", "sub-02"]
            assert sidecar["R2Threshold"] == 0.1 and sidecar["Files"] == [path.name]
            assert sidecar["SpatialReference"].endswith(f"_hemi-{hemi}_den-10k_sphere.surf.gii")
        assert (group / f"{stem.format(h=hemi)}_stat-count_desc-count_boldmap.func.gii").is_file()
        count = json.loads((group / f"{stem.format(h=hemi)}_desc-count_boldmap.json").read_text())
        assert "contributing" in statistic_metadata(count, "count")["Description"]
    assert not list(group.glob("*_stat-*.json"))  # one sidecar per parameter, none per statistic
    polar = nib.load(group / f"{stem.format(h='L')}_stat-circmean_desc-polarangle_boldmap.func.gii")
    values = polar.agg_data()
    assert values.shape == (N,)
    np.testing.assert_allclose(np.abs(values[:10]), 180.0, atol=1e-3)
    count_r = nib.load(group / f"{stem.format(h='R')}_stat-count_desc-count_boldmap.func.gii").agg_data()
    np.testing.assert_array_equal(count_r[:100], 1)
    np.testing.assert_array_equal(count_r[100:], 2)
    r2_l = nib.load(group / f"{stem.format(h='L')}_stat-mean_desc-r2_boldmap.func.gii").agg_data()
    np.testing.assert_allclose(r2_l, 0.5, atol=1e-6)
    html = (out / "group.html").read_text()
    assert "sub-01, sub-02" in html and "nilearn" in html
    drawn = check_page(out / "group.html")
    assert len(drawn) == len(set(drawn)), "a figure is drawn twice"
    kinds = {p.stem.rsplit("_", 1)[-1] for p in drawn}
    labels = ("polarangle", "eccentricity", "sigma", "r2", "count")
    assert kinds == {f"{k}-{label}" for k in ("flat", "views") for label in labels} | {"count-hist"}
    rows = re.findall(r"<tr><td>(sub-0\d)</td><td>—</td><td>(\d+)</td><td>(\d+)</td><td>([0-9.]+)</td>", html)
    assert rows == [("sub-01", "20484", "20484", "0.60"), ("sub-02", "20484", "20384", "0.40")]
    assert 'href="sub-01.html"' not in html  # no participant report was written here


@pytest.mark.skipif(os.environ.get("PRFMAP_SKIP_BROWSER") == "1", reason="PRFMAP_SKIP_BROWSER=1")
def test_group_report_renders_in_chromium(grouped: tuple[Path, list]) -> None:
    errors, text = render(grouped[0] / "group.html")
    assert errors == []
    assert "Group circular mean polar angle (deg)" in text and "sub-01\t—\t20484" in text


def test_no_common_space(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    write_maps(tmp_path, "01", "fsaverage5", participant(rng, 0.0, 0.5))
    write_maps(tmp_path, "02", "fsnative", participant(rng, 0.0, 0.5))
    with pytest.raises(BadDataError) as info:
        run_group(tmp_path)
    assert info.value.exit_code == ExitCode.BAD_DATA == 65
    message = str(info.value)
    assert "sub-01: fsaverage5" in message and "sub-02: fsnative" in message
    assert "\n" not in message
    assert not (tmp_path / "group").exists() and not (tmp_path / "group.html").exists()


def test_no_maps_and_missing_participant(two_participants: Path, tmp_path: Path) -> None:
    with pytest.raises(MissingInputError, match="run the participant level first"):
        run_group(tmp_path)
    with pytest.raises(MissingInputError, match="sub-07"):
        run_group(two_participants, participant_labels=["01", "07"], report=False)


def test_foreign_files_are_ignored(grouped: tuple[Path, list]) -> None:
    two_participants = grouped[0]
    func = two_participants / "sub-01" / "func"
    (func / "sub-01_task-bar_hemi-L_space-fsaverage5_desc-x_boldmap.func.gii").write_bytes(b"")
    sets = find_participant_maps(two_participants, ["01"])
    assert len(sets) == 1 and set(sets[0].maps) == {
        "x",
        "y",
        "sigma",
        "r2",
        "polarangle",
        "eccentricity",
    }


def test_group_level_through_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from prfmap.cli.run import main

    rng = np.random.default_rng(1)
    out = tmp_path / "out"
    write_maps(out, "01", "fsaverage5", participant(rng, 10.0, 0.5))
    write_maps(out, "02", "fsnative", participant(rng, 20.0, 0.5))
    bids = tmp_path / "bids"
    bids.mkdir()
    assert main([str(bids), str(out), "group"]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prfmap: error: no template space")
    assert "sub-01: fsaverage5; sub-02: fsnative" in err[0]
    assert not (out / "group").exists()

    write_maps(out, "02", "fsaverage5", participant(rng, 30.0, 0.5))
    assert main([str(bids), str(out), "group", "--participant-label", "01", "02"]) == 0
    maps = sorted((out / "group").glob("*_boldmap.func.gii"))
    assert len(maps) == 10 and (out / "group.html").is_file()
    angle = nib.load(next(p for p in maps if "hemi-L" in p.name and "polarangle" in p.name))
    np.testing.assert_allclose(angle.agg_data()[:10], 20.0, atol=1e-4)


def test_sessions_of_a_participant_count_once(tmp_path: Path) -> None:
    rng = np.random.default_rng(5)
    write_maps(tmp_path, "01", "fsaverage5", participant(rng, 170.0, 0.6))
    write_maps(tmp_path, "02", "fsaverage5", participant(rng, -170.0, 0.4), session="1")
    write_maps(tmp_path, "02", "fsaverage5", participant(rng, -150.0, 0.4), session="2")
    (result,) = run_group(tmp_path, report=False)
    assert result.subjects == ["01", "02"]
    np.testing.assert_array_equal(result.maps["L"]["count"], 2)
    np.testing.assert_allclose(result.maps["L"]["polarangle"][:10], -175.0, atol=1e-6)
    np.testing.assert_allclose(result.maps["R"]["r2"], 0.5, atol=1e-6)
    assert not (tmp_path / "group.html").exists()


def test_cifti_participants_give_gifti_group_maps_on_fslr(tmp_path: Path) -> None:
    from prfmap.io.geometry import CiftiGeometry

    cortex = {"L": np.arange(0, 32492, 2), "R": np.arange(1, 32492, 2)}
    axis = nib.cifti2.BrainModelAxis.from_surface(
        cortex["L"], 32492, "CortexLeft"
    ) + nib.cifti2.BrainModelAxis.from_surface(cortex["R"], 32492, "CortexRight")
    geometry = CiftiGeometry(brain_models=axis)
    units = len(axis)
    for subject, angle in (("01", 100.0), ("02", 120.0)):
        key = OutputKey(subject, None, "bar", "fsLR", "91k", None, "gauss")
        maps = {
            "polarangle": np.full(units, angle),
            "eccentricity": np.full(units, 3.0),
            "sigma": np.full(units, 1.0),
            "r2": np.full(units, 0.5),
        }
        path = key.func_dir(tmp_path) / f"{key.stem()}_boldmap.dscalar.nii"
        geometry.write_maps(maps, lambda hemi, p=path: p)
    (result,) = run_group(tmp_path, report=True)
    assert str(result.fit) == "task-bar space-fsLR den-91k model-gauss"
    left = (
        tmp_path
        / "group"
        / "task-bar_hemi-L_space-fsLR_den-32k_model-gauss_stat-count_desc-count_boldmap.func.gii"
    )
    count = nib.load(left).agg_data()
    assert count.shape == (32492,)
    np.testing.assert_array_equal(count[cortex["L"]], 2)
    np.testing.assert_array_equal(count[1::2], 0)
    angle = result.maps["R"]["polarangle"]
    np.testing.assert_allclose(angle[cortex["R"]], 110.0, atol=1e-6)
    assert np.isnan(angle[0])
    check_page(tmp_path / "group.html")


def write_volume_maps(output_dir: Path, subject: str, space: str) -> None:
    """One participant's maps in a volume space, as the participant level writes them (4-D NIfTI)."""
    key = OutputKey(subject, None, "bar", space, None, None, "gauss")
    func = key.func_dir(output_dir)
    func.mkdir(parents=True, exist_ok=True)
    img = nib.Nifti1Image(np.ones((4, 4, 4, 2), np.float32), np.eye(4))
    nib.save(img, func / f"{key.stem()}_desc-x_boldmap.nii.gz")


def test_volume_space_maps_are_refused_with_what_to_do(tmp_path: Path, capsys) -> None:
    """Issue 24, case 18: T1w/MNI maps gave 66 "run the participant level first" (undocumented)."""
    from prfmap.cli.run import main

    out = tmp_path / "out"
    write_volume_maps(out, "01", "T1w")
    write_volume_maps(out, "02", "MNI152NLin2009cAsym")
    bids = tmp_path / "bids"
    bids.mkdir()
    assert main([str(bids), str(out), "group"]) == 65
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("prfmap: error: the maps of sub-01, sub-02 under"), err
    assert "volume spaces only (sub-01: T1w; sub-02: MNI152NLin2009cAsym)" in err[0]
    assert "the group level combines surface maps in a template space" in err[0]
    assert not (out / "group").exists() and not (out / "group.html").exists()

    rng = np.random.default_rng(4)
    write_maps(out, "03", "fsaverage5", participant(rng, 0.0, 0.5))
    assert main([str(bids), str(out), "group", "--participant-label", "02", "03"]) == 65
    assert "the maps of sub-02 under" in capsys.readouterr().err


def test_fits_and_participants_left_out_are_logged(tmp_path: Path, caplog) -> None:
    """Issue 24, case 18: fits that not every participant has were skipped without a log line."""
    rng = np.random.default_rng(6)
    write_maps(tmp_path, "01", "fsaverage5", participant(rng, 0.0, 0.5))
    write_maps(tmp_path, "02", "fsaverage5", participant(rng, 0.0, 0.5))
    write_maps(tmp_path, "01", "fsaverage5", participant(rng, 0.0, 0.5), model="css")
    write_volume_maps(tmp_path, "03", "T1w")
    with caplog.at_level("INFO", logger="prfmap.group"):
        (result,) = run_group(tmp_path, report=False)
    assert result.subjects == ["01", "02"] and result.fit.model == "gauss"
    assert (
        "task-bar space-fsaverage5 model-css left out of the group: only 1 of the 2 participants "
        "have it (sub-01; missing: sub-02)"
    ) in caplog.text
    assert "sub-03 left out of the group: its maps are in volume spaces only (T1w)" in caplog.text


def test_participants_never_fitted_and_a_group_of_one_are_named(tmp_path: Path, caplog) -> None:
    rng = np.random.default_rng(7)
    bids = tmp_path / "bids"
    for sub in ("01", "02", "03"):
        (bids / f"sub-{sub}").mkdir(parents=True)
    out = tmp_path / "out"
    write_maps(out, "01", "fsaverage5", participant(rng, 0.0, 0.5))
    with caplog.at_level("WARNING", logger="prfmap.group"):
        run_group(out, report=False, bids_dir=bids)
    assert (
        f"sub-02, sub-03 of bids_dir have no participant maps under {out} and are not in the group"
    ) in caplog.text
    assert "the group has one participant (sub-01): its group maps are that participant's maps" in caplog.text
    caplog.clear()
    write_maps(out, "02", "fsaverage5", participant(rng, 0.0, 0.5))
    write_maps(out, "03", "fsaverage5", participant(rng, 0.0, 0.5))
    with caplog.at_level("WARNING", logger="prfmap.group"):
        run_group(out, report=False, bids_dir=bids)
    assert "of bids_dir" not in caplog.text and "one participant" not in caplog.text
