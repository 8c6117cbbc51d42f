"""Checks of written report pages: well-formed HTML, relative images that exist."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

VOID = {
    "area",
    "base",
    "br",
    "col",
    "embed",
    "hr",
    "img",
    "input",
    "link",
    "meta",
    "source",
    "track",
    "wbr",
}


class _Checker(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.problems: list[str] = []
        self.images: list[str] = []
        self.links: list[str] = []
        self.ids: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "img":
            self.images.append(values.get("src") or "")
            if not values.get("alt"):
                self.problems.append(f"img without alt: {values.get('src')}")
        for name in ("href", "src"):
            if values.get(name):
                self.links.append(values[name])
        if values.get("id"):
            self.ids.append(values["id"])
        if tag not in VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
            return
        self.stack.pop()


def check_page(page: Path) -> list[Path]:
    """Assert that ``page`` is valid and self-contained; return its images.

    The page parses without a single HTML5 parse error (html5lib, strict), every tag is closed
    in order, every image has alt text and a relative ``src`` to an existing non-empty PNG,
    every ``#anchor`` link has its target, nothing points to the network.
    """
    import html5lib

    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    html5lib.HTMLParser(strict=True).parse(text)
    checker = _Checker()
    checker.feed(text)
    checker.close()
    assert not checker.problems, checker.problems
    assert not checker.stack, f"unclosed tags: {checker.stack}"
    assert len(set(checker.ids)) == len(checker.ids), "duplicate ids"
    for link in checker.links:
        assert "://" not in link and not link.startswith("//"), link
        if link.startswith("#"):
            assert link[1:] in checker.ids, link
    images = []
    for src in checker.images:
        assert src and not src.startswith("/") and not src.startswith("data:"), src
        path = page.parent / src
        assert path.is_file(), f"missing image {src}"
        assert path.stat().st_size > 0, f"empty image {src}"
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", f"not a PNG: {src}"
        images.append(path)
    return images
