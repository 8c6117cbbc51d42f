"""The test environment is the pinned one: every version in requirements/test.txt is the installed one."""

from __future__ import annotations

import re
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

PINS = Path(__file__).resolve().parents[3] / "requirements" / "test.txt"
FRAMEWORKS = {"jax": ("jax", "jaxlib"), "torch": ("torch",), "tensorflow": ("tensorflow-cpu",)}


def _pins() -> dict[str, Version]:
    pins = {}
    for line in PINS.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{line}: pins must be exact"
            pins[re.sub(r"[-_.]+", "-", req.name).lower()] = Version(spec.version)
    return pins


def _installed(name: str) -> Version:
    # a local label (torch's "+cpu" wheel) is the same release as its pin
    return Version(Version(metadata.version(name)).public)


def test_every_pin_is_installed_at_its_version():
    wrong = {
        name: f"pinned {pin}, installed {_installed(name)}"
        for name, pin in _pins().items()
        if _installed(name) != pin
    }
    assert not wrong, f"the environment differs from {PINS.name} (make clean test reinstalls it): {wrong}"


@pytest.mark.backend
def test_backend_framework_and_keras_are_pinned(backend):
    pins = _pins()
    for name in ("keras", "numpy", *FRAMEWORKS[backend]):
        assert name in pins, f"{name} is not pinned in {PINS.name}"
        assert _installed(name) == pins[name]
    import keras

    assert Version(keras.__version__) == pins["keras"]
    assert keras.backend.backend() == backend


@pytest.mark.parametrize("name", ["jax", "torch", "tensorflow"])
def test_installation_page_names_the_pinned_versions(name):
    page = (PINS.parents[1] / "docs" / "installation.md").read_text()
    package = FRAMEWORKS[name][-1]
    assert f"{package} {_pins()[package]}" in page, f"docs/installation.md's version table lacks {package}"
