"""prfmap-synth data through ``prfmap participant`` and ``prfmap group``: reports and group maps."""

from __future__ import annotations

import json
import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
from page_checks import check_page

from prfmap.cli.run import main
from prfmap.synth import SynthConfig, make_synthetic_dataset

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("e2e")
    bids = make_synthetic_dataset(root / "bids", SynthConfig(subjects=2, runs=1, small=True))
    out = root / "out"
    argv = [
        str(bids),
        str(out),
        "participant",
        "--backend",
        "jax",
        "--refine",
        "none",
        "--work-dir",
        str(root / "work"),
    ]
    assert main(argv) == 0
    return out


@pytest.mark.parametrize("subject", ["01", "02"])
def test_participant_level_writes_the_report(fitted: Path, subject: str) -> None:
    page = fitted / f"sub-{subject}.html"
    images = check_page(page)
    kinds = {p.stem.rsplit("_", 1)[-1] for p in images}
    assert kinds == {
        "stimulus",
        "surf-polarangle",
        "surf-eccentricity",
        "surf-sigma",
        "surf-r2",
        "coverage",
        "ecc-sigma",
        "r2-hist",
        "timecourses",
    }
    text = page.read_text()
    assert "nilearn&#x27;s bundled fsaverage5" in text and "<th>backend</th><td>jax" in text
    assert f"sub-{subject}/func/sub-{subject}_task-prf_hemi-L_space-fsaverage5" in text


@pytest.mark.skipif(os.environ.get("PRFMAP_SKIP_BROWSER") == "1", reason="PRFMAP_SKIP_BROWSER=1")
def test_participant_report_renders_in_chromium(fitted: Path) -> None:
    from headless_chromium import render

    errors, text = render(fitted / "sub-01.html")
    assert errors == [] and "Example time courses" in text


def test_group_level_on_the_fitted_participants(fitted: Path) -> None:
    bids = fitted.parent / "bids"
    assert main([str(bids), str(fitted), "group"]) == 0
    group = fitted / "group"
    stem = "task-prf_hemi-{h}_space-fsaverage5_model-gauss"
    count = np.concatenate(
        [nib.load(group / f"{stem.format(h=h)}_stat-count_desc-count_boldmap.func.gii").agg_data()
         for h in ("L", "R")]
    )
    assert count.shape == (20484,) and count.max() == 2 and (count == 2).sum() > 100
    polar = nib.load(group / f"{stem.format(h='L')}_stat-circmean_desc-polarangle_boldmap.func.gii")
    assert np.nanmax(np.abs(polar.agg_data())) <= 180
    sidecar = json.loads(next(group.glob("*hemi-L*desc-eccentricity*.json")).read_text())
    assert sidecar["StimulusFieldOfViewDeg"] == 20.0 and sidecar["Statistic"] == "median"
    assert len(check_page(fitted / "group.html")) == 6
