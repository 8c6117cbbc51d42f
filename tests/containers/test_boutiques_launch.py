"""``bosh exec launch`` of the participant and the group level in the image, as CBRAIN-like
platforms run boutiques.json (both levels, the output folder named under the launch folder) and
boutiques-group.json (the group level on a File). Skipped, saying why, where no Docker daemon
answers (the ``client`` fixture); ``PRFMAP_TEST_IMAGE=<name>`` runs them on an image built
beforehand."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.xdist_group("serial")]
BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def workspace(image, tmp_path_factory) -> tuple[Path, Path]:
    """A launch folder with a two-participant synthetic dataset and the descriptor on ``image``."""
    root = tmp_path_factory.mktemp("bosh-launch")
    subprocess.run(
        [
            str(BIN / "prfmap-synth"),
            str(root / "bids"),
            "--subjects",
            "2",
            "--runs",
            "1",
            "--space",
            "fsaverage5",
            "--small",
        ],
        check=True,
        capture_output=True,
        timeout=600,
    )
    for name in ("boutiques.json", "boutiques-group.json"):
        descriptor = json.loads((REPO / name).read_text())
        descriptor["container-image"]["image"] = image
        (root / name).write_text(json.dumps(descriptor))
    return root, root / "boutiques.json"


def launch(
    workspace: tuple[Path, Path], invocation: dict, name: str = "boutiques.json"
) -> subprocess.CompletedProcess:
    """``bosh exec launch`` in the launch folder, as the calling user, with the local image."""
    root, _ = workspace
    descriptor = root / name
    path = root / f"invocation-{invocation.get('analysis_level', 'group')}.json"
    path.write_text(json.dumps(invocation))
    return subprocess.run(
        [
            str(BIN / "bosh"),
            "exec",
            "launch",
            "--no-pull",
            "-u",
            "--skip-data-collection",
            str(descriptor),
            str(path),
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=root,
    )


def test_participant_then_group_level(workspace):
    root, _ = workspace
    participant = launch(
        workspace,
        {
            "bids_dir": str(root / "bids"),
            "output_dir": "out",
            "analysis_level": "participant",
            "participant_label": ["01", "02"],
            "refine": "none",
            "no_report": True,
            "verbose_count": "-v",
        },
    )
    assert participant.returncode == 0, participant.stdout[-4000:] + participant.stderr[-2000:]
    for subject in ("01", "02"):
        maps = sorted((root / "out" / f"sub-{subject}" / "func").glob("*_boldmap.func.gii"))
        assert maps, f"no maps of sub-{subject}"
    assert re.search(r"prfmap\S* INFO: prfmap .* --no-report -v$", participant.stdout, re.M), (
        "prfmap should log the command it was given, -v included"
    )

    # the group level through the BIDS-App descriptor (the folder by name, under the launch folder),
    # then through boutiques-group.json (the folder as a File, mounted where it lies)
    for name, invocation in (
        ("boutiques.json", {"output_dir": "out", "analysis_level": "group"}),
        ("boutiques-group.json", {"participant_outputs_dir": str(root / "out")}),
    ):
        shutil.rmtree(root / "out" / "group", ignore_errors=True)
        (root / "out" / "group.html").unlink(missing_ok=True)
        group = launch(workspace, {"bids_dir": str(root / "bids"), "r2_threshold": 0.05, **invocation}, name)
        assert group.returncode == 0, name + group.stdout[-4000:] + group.stderr[-2000:]
        assert sorted((root / "out" / "group").glob("*_stat-count_desc-count_boldmap.func.gii")), name
        assert (root / "out" / "group.html").is_file(), name


def test_prfmaps_exit_code_is_the_launch_exit_code(workspace):
    """A participant that is not there: prfmap exits 18, and so does bosh."""
    root, _ = workspace
    result = launch(
        workspace,
        {
            "bids_dir": str(root / "bids"),
            "output_dir": "bad",
            "analysis_level": "participant",
            "space": "fsaverage5",
            "stimulus_fov_deg": 20,
            "participant_label": ["99"],
        },
    )
    assert result.returncode == 18, result.stdout[-2000:] + result.stderr[-2000:]
    assert "prfmap: error: " in result.stdout + result.stderr
