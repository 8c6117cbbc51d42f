"""Build the JAX image and run it, through docker-py and prfmap-docker, where a daemon answers.

Skipped, saying why, on machines without a Docker daemon (the ``client`` and ``image`` fixtures
of conftest.py: ``PRFMAP_TEST_IMAGE=<name>`` runs the tests on an image built beforehand).
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import image_script, project_version
from prfmap_docker.cli import main as launcher

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.xdist_group("serial")]


def run(client, image, command, **kwargs) -> tuple[int, str]:
    container = client.containers.run(image, command, detach=True, **kwargs)
    try:
        status = container.wait(timeout=600)
        return status["StatusCode"], container.logs().decode()
    finally:
        container.remove(force=True)


def test_image_metadata(client, image):
    attrs = client.images.get(image).attrs["Config"]
    assert attrs["Entrypoint"] == ["prfmap"]
    assert attrs["User"] and not attrs["User"].startswith(("0", "root"))
    labels = attrs["Labels"]
    assert labels["org.opencontainers.image.version"] == project_version()
    assert labels["io.github.prfmap.backend"] == "jax"
    env = dict(item.split("=", 1) for item in attrs["Env"])
    assert env["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


def test_version_read_only_offline_any_uid(client, image):
    code, out = run(
        client,
        image,
        ["--version"],
        read_only=True,
        tmpfs={"/tmp": "rw,exec,nosuid,nodev"},
        network_disabled=True,
        user="4321:4321",
    )
    assert code == 0 and out.strip() == f"prfmap {project_version()}"
    code, out = run(client, image, [], entrypoint=["cat", "/version"])
    assert out.strip() == project_version()


def test_templateflow_surfaces_are_in_the_image(client, image):
    fetch_templateflow = image_script("fetch_templateflow")
    script = (
        "import sys; from templateflow import api\n"
        f"queries = {fetch_templateflow.queries()!r}\n"
        "for q in queries:\n"
        "    p = api.get(**q)\n"
        "    assert p.stat().st_size > 0, q\n"
        "print(len(queries))\n"
    )
    code, out = run(
        client,
        image,
        ["-c", script],
        entrypoint=["python"],
        read_only=True,
        tmpfs={"/tmp": "rw,exec"},
        network_disabled=True,
    )
    assert code == 0, out
    assert out.strip().endswith(str(len(fetch_templateflow.queries())))


def test_participant_level_through_the_launcher(client, image, tmp_path):
    synth = Path(sys.executable).parent / "prfmap-synth"
    if not synth.exists():
        pytest.skip("prfmap-synth is not installed, so there is no dataset to run on")
    subprocess.run(
        [str(synth), str(tmp_path / "bids"), "--subjects", "1", "--runs", "1", "--space", "fsaverage5"],
        check=True,
        capture_output=True,
        timeout=600,
    )
    log = io.BytesIO()
    code = launcher(
        [
            "--image",
            image,
            "--read-only",
            str(tmp_path / "bids"),
            str(tmp_path / "out"),
            "participant",
            "--participant-label",
            "01",
            "-w",
            str(tmp_path / "work"),
            "--backend",
            "jax",
            "--refine",
            "none",
        ],
        client_factory=lambda: client,
        log=log,
    )
    assert code == 0, log.getvalue().decode()[-4000:]
    maps = sorted((tmp_path / "out" / "sub-01").rglob("*_boldmap.func.gii"))
    assert maps, "no maps written"
    assert all(m.stat().st_uid == os.getuid() for m in maps), "outputs should be the caller's"
