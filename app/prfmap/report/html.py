"""HTML pages rendered from jinja2 templates (autoescaped), with the figures they show."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from prfmap.io.atomic import write_text_atomic

ENVIRONMENT = Environment(
    loader=PackageLoader("prfmap.report", "templates"),
    autoescape=select_autoescape(enabled_extensions=("html", "j2"), default_for_string=True),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


@dataclass
class Figure:
    """One figure of a page.

    Attributes
    ----------
    src : str
        Path relative to the page, with forward slashes.
    alt : str
        Alternative text: what the figure shows, with the units of its colour scale.
    caption : str
        The caption.
    css : str
        Extra CSS class (``map`` for the retinotopic maps).
    """

    src: str
    alt: str
    caption: str
    css: str = ""


def dict_rows(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Flatten a (nested) settings dict into ``(dotted.key, value)`` rows.

    Parameters
    ----------
    values : mapping
        Settings, possibly nested.

    Returns
    -------
    list of tuple
        Rows of a two-column table.
    """
    rows: list[tuple[str, str]] = []
    for key, value in values.items():
        if isinstance(value, Mapping):
            rows.extend((f"{key}.{k}", v) for k, v in dict_rows(value))
        else:
            rows.append((str(key), str(value)))
    return rows


def render_page(template: str, path: Path, **context: Any) -> Path:
    """Render ``template`` with the report style sheet and write it to ``path`` atomically.

    Parameters
    ----------
    template : str
        A template of ``prfmap/report/templates``.
    path : Path
        The HTML file.
    **context
        The template's variables.

    Returns
    -------
    Path
        ``path``.
    """
    css = resources.files("prfmap.report").joinpath("templates/report.css").read_text("utf-8")
    html = ENVIRONMENT.get_template(template).render(css=css, **context)
    return write_text_atomic(path, html)
