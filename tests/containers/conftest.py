"""Fixtures of the container tests: the project version, the Boutiques descriptor, the Dockerfile."""

from __future__ import annotations

import json

import pytest

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
