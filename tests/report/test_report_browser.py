"""The reports render in headless Chromium (Debian's ``chromium``) without console errors, and the
first screenful shows maps.

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

FIRST_SCREEN = (
    "Array.from(document.querySelectorAll('figure.map img')).filter(i => i.complete && i.naturalWidth > 0"
    " && i.getBoundingClientRect().top < window.innerHeight - 150).map(i => i.getAttribute('alt'))"
)
WINDOW = {"width": 1280, "height": 800}


def first_screen_maps(page: Path) -> tuple[list[str], str, list[str]]:
    """Errors, text and the alt texts of map figures visible in the first 1280 × 800 screenful."""
    return render(page, probe=FIRST_SCREEN, **WINDOW)


@pytest.fixture(scope="module", autouse=True)
def chromium() -> str:
    binary = find_chromium()
    assert binary, "chromium is not installed: apt-get install chromium (make test does it)"
    return binary


def test_participant_report_opens_on_maps(report: Path) -> None:
    errors, text, visible = first_screen_maps(report)
    assert errors == []
    assert visible and visible[0].startswith("polar angle on the flattened occipital cortex")
    for heading in ("Occipital views", "Visual field", "Model fit", "Data quality", "Methods", "About"):
        assert heading in text, heading
    assert "Inputs, settings and files" in text and "Fitting settings" not in text  # collapsed


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
