"""The reports render in headless Chromium (Debian's ``chromium``) without console errors.

Chromium is installed by the Makefile's test environment; set ``PRFMAP_SKIP_BROWSER=1`` to
skip these tests on a machine without it.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from headless_chromium import find_chromium, render

pytestmark = pytest.mark.skipif(os.environ.get("PRFMAP_SKIP_BROWSER") == "1", reason="PRFMAP_SKIP_BROWSER=1")


@pytest.fixture(scope="module", autouse=True)
def chromium() -> str:
    binary = find_chromium()
    assert binary, "chromium is not installed: apt-get install chromium (make test does it)"
    return binary


def test_participant_report_renders_without_errors(report: Path) -> None:
    errors, text = render(report)
    assert errors == []
    for heading in (
        "Summary",
        "Stimulus",
        "Surface maps",
        "Visual field",
        "Example time courses",
        "Time per stage",
        "Warnings",
        "About",
    ):
        assert heading in text, heading


def test_broken_report_is_caught(report: Path, tmp_path: Path) -> None:
    copy = tmp_path / "out"
    shutil.copytree(report.parent, copy)
    victim = next((copy / "sub-01" / "figures").glob("*coverage.png"))
    victim.unlink()
    page = copy / report.name
    page.write_text(page.read_text().replace("</main>", "<script>noSuchFunction()</script></main>"))
    errors, _ = render(page)
    assert any("ERR_FILE_NOT_FOUND" in e and victim.name in e for e in errors), errors
    assert f"image not rendered: sub-01/figures/{victim.name}" in errors
    assert any("noSuchFunction" in e for e in errors), errors
