"""Small helpers writing self-contained HTML pages: escaped text, tables, figures."""

from __future__ import annotations

import html
from collections.abc import Iterable, Mapping
from importlib import resources
from typing import Any


def esc(value: Any) -> str:
    """HTML-escape ``str(value)``.

    Parameters
    ----------
    value : object
        Anything printable.

    Returns
    -------
    str
        The escaped text.
    """
    return html.escape(str(value), quote=True)


def table(rows: Iterable[tuple[Any, Any]], header: tuple[str, str] | None = None) -> str:
    """A two-column table of escaped keys and values.

    Parameters
    ----------
    rows : iterable of (key, value)
        The rows.
    header : tuple of str, optional
        Column titles.

    Returns
    -------
    str
        The ``<table>`` element.
    """
    head = f"<tr><th>{esc(header[0])}</th><th>{esc(header[1])}</th></tr>" if header else ""
    body = "".join(f"<tr><th>{esc(k)}</th><td>{esc(v)}</td></tr>" for k, v in rows)
    return f"<table>{head}{body}</table>"


def dict_rows(values: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Flatten a (nested) settings dict into ``(dotted.key, value)`` rows.

    Parameters
    ----------
    values : mapping
        Settings, possibly nested.

    Returns
    -------
    list of tuple
        Rows for :func:`table`.
    """
    rows: list[tuple[str, str]] = []
    for key, value in values.items():
        if isinstance(value, Mapping):
            rows.extend((f"{key}.{k}", v) for k, v in dict_rows(value))
        else:
            rows.append((str(key), str(value)))
    return rows


def figure(src: str, alt: str, caption: str) -> str:
    """An ``<figure>`` with an image at a relative ``src`` and an escaped caption.

    Parameters
    ----------
    src : str
        Path relative to the page, with forward slashes.
    alt, caption : str
        Alternative text and caption.

    Returns
    -------
    str
        The element.
    """
    return f'<figure><img src="{esc(src)}" alt="{esc(alt)}"><figcaption>{esc(caption)}</figcaption></figure>'


def page(title: str, nav: list[tuple[str, str]], body: str) -> str:
    """A complete HTML5 document with the report style sheet inlined.

    Parameters
    ----------
    title : str
        Page title and heading.
    nav : list of (anchor, text)
        Links to sections of the page.
    body : str
        The HTML of the sections.

    Returns
    -------
    str
        The document.
    """
    css = resources.files("prfmap.report").joinpath("templates/report.css").read_text("utf-8")
    links = "".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in nav)
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>\n{css}</style>\n</head>\n<body>\n"
        f"<header><h1>{esc(title)}</h1></header>\n<nav>{links}</nav>\n<main>\n{body}\n</main>\n"
        "</body>\n</html>\n"
    )
