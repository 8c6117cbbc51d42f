"""Fixtures of the container tests: the project version, the Boutiques descriptor, the Dockerfile, a
Docker daemon and the image built from the checkout."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import docker
import pytest
from docker.errors import DockerException

from helpers import REPO, project_version


@pytest.fixture(scope="session")
def version() -> str:
    return project_version()


@pytest.fixture(scope="session")
def descriptor() -> dict:
    return json.loads((REPO / "boutiques.json").read_text())


@pytest.fixture(scope="session")
def docker_recipe() -> dict:
    from spython.main.parse.parsers import DockerParser

    return DockerParser(str(REPO / "Dockerfile")).recipe


@pytest.fixture(scope="session")
def runtime_env(docker_recipe) -> dict[str, str]:
    """The runtime stage's ENV as a dict."""
    return dict(item.split("=", 1) for item in docker_recipe["runtime"].environ)


@pytest.fixture(scope="session")
def client():
    """A docker-py client of a daemon that answers; skips, saying why, when none does."""
    try:
        client = docker.from_env()
        client.ping()
    except DockerException as err:
        pytest.skip(
            f"no Docker daemon answers ({' '.join(str(err).split())[:160]}); "
            "building and running the image needs one"
        )
    return client


def buildkit_cli() -> str:
    """A docker CLI on PATH that builds with BuildKit: one with the buildx plugin, or a client older
    than 23.0 (BuildKit built in). Clients from 23.0 on refuse ``DOCKER_BUILDKIT=1`` without buildx."""
    seen = []
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        cli = shutil.which("docker", path=directory)
        if cli is None or os.path.realpath(cli) in seen:
            continue
        seen.append(os.path.realpath(cli))
        if subprocess.run([cli, "buildx", "version"], capture_output=True).returncode == 0:
            return cli
        version = subprocess.run(
            [cli, "version", "--format", "{{.Client.Version}}"], capture_output=True, text=True
        ).stdout.strip()
        if version.split(".")[0].isdigit() and int(version.split(".")[0]) < 23:
            return cli
    pytest.fail(f"a Docker daemon answers but no docker CLI on PATH builds with BuildKit ({seen})")


@pytest.fixture(scope="session")
def image(client) -> str:
    """The JAX image: ``$PRFMAP_TEST_IMAGE`` when set, else built here from the checkout."""
    given = os.environ.get("PRFMAP_TEST_IMAGE")
    if given:
        client.images.get(given)
        return given
    cli = buildkit_cli()
    tag = f"prfmap:{project_version()}-jax"
    result = subprocess.run(
        [
            cli,
            "build",
            "--build-arg",
            "BACKEND=jax",
            "--build-arg",
            f"PRFMAP_VERSION={project_version()}",
            "-t",
            tag,
            str(REPO),
        ],
        capture_output=True,
        text=True,
        env=dict(os.environ, DOCKER_BUILDKIT="1"),
        timeout=3 * 3600,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return tag
