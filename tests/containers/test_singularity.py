"""Singularity.def runs the same entry point, environment and image as the Dockerfile."""

from __future__ import annotations

import re
import shlex

import pytest
from spython.main.parse.parsers import SingularityParser

from helpers import BACKENDS, REPO


@pytest.fixture(scope="module")
def recipe():
    recipes = SingularityParser(str(REPO / "Singularity.def")).recipe
    assert len(recipes) == 1
    return next(iter(recipes.values()))


def test_bootstraps_from_the_published_image_of_this_version(recipe, version):
    text = (REPO / "Singularity.def").read_text()
    assert re.search(r"^Bootstrap:\s*docker\s*$", text, re.MULTILINE)
    match = re.fullmatch(r"prfmap/prfmap:(.+)-([a-z]+)", recipe.fromHeader.strip())
    assert match and match.group(1) == version and match.group(2) in BACKENDS


def test_runscript_is_the_dockerfile_entrypoint(recipe, docker_recipe):
    words = shlex.split(recipe.cmd)
    assert words[0] == "exec"
    assert words[1:-1] == docker_recipe["runtime"].entrypoint
    assert words[-1] == "$@"


def test_test_section_runs_prfmap_version(recipe):
    assert "prfmap --version" in "\n".join(recipe.install)
    assert recipe.test


def test_environment_matches_the_image(recipe, runtime_env):
    backend = recipe.fromHeader.strip().rsplit("-", 1)[1]
    env = dict(line.split("=", 1) for line in recipe.environ)
    assert env["KERAS_BACKEND"] == backend
    for key, value in env.items():
        if key in runtime_env:
            assert value == runtime_env[key].replace("${BACKEND}", backend), key
    for key in ("TEMPLATEFLOW_HOME", "XLA_PYTHON_CLIENT_PREALLOCATE", "MPLCONFIGDIR"):
        assert key in env


def test_labels_and_help(recipe, version):
    labels = dict(line.split(None, 1) for line in recipe.labels)
    assert labels["org.opencontainers.image.version"] == version
    assert labels["io.github.prfmap.backend"] == recipe.fromHeader.strip().rsplit("-", 1)[1]
    text = (REPO / "Singularity.def").read_text()
    assert "%help" in text and "--nv" in text.split("%help", 1)[1]
