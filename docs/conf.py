"""Sphinx configuration of prfmap's documentation (``make docs``; offline, warnings are errors).

Sphinx, because the command-line reference comes from prfmap's own parser (sphinx-argparse, as
fMRIPrep's does) and the API reference from the numpydoc docstrings (autodoc with napoleon, as
nilearn's does), so neither can drift from the code; MyST lets the pages stay Markdown, readable on
a code host as they are.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS.parent / "app"))  # the checkout's prfmap, installed or not
os.environ.setdefault("KERAS_BACKEND", "jax")

from prfmap import __version__  # noqa: E402

project = "prfmap"
author = "The prfmap developers"
copyright = "the prfmap developers; Apache License 2.0"
version = release = __version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinxarg.ext",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings: list[str] = []
smartquotes = False  # option names in help texts keep their "--"

html_theme = "furo"
html_title = f"prfmap {release}"
html_show_sourcelink = False

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_class_signature = "separated"
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False

# The participant and group levels, by module path: when a module moves, change its path here.
API_LEVELS: list[tuple[str, str, list[str]]] = [
    (
        "Participant level",
        "prfmap.participant",
        [
            "level.run_participant_level",
            "level.run_participant",
            "plan.plan_fits",
            "plan.FitPlan",
            "load.load_fit",
            "load.LoadedFit",
            "fit.fit_loaded",
            "fit.FitOutcome",
            "outputs.write_outcome",
        ],
    ),
    ("Group level", "prfmap.group", ["run_group", "find_participant_maps", "combine"]),
    ("Synthetic datasets", "prfmap.synth", ["SynthConfig", "make_synthetic_dataset", "load_truth"]),
]
"""Per section of the API page: its title, its package, and its entries (dotted below the package)."""
LEVELS_MARKER = "<!-- api-levels -->"


def _levels_markdown() -> str:
    """The autodoc entries of :data:`API_LEVELS`, as MyST sections."""
    parts = []
    for title, package, names in API_LEVELS:
        entries = "\n".join(
            f".. autofunction:: {package}.{n}"
            if n.rsplit(".", 1)[-1][0].islower()
            else f".. autoclass:: {package}.{n}\n   :members:"
            for n in names
        )
        parts.append(f"## {title}\n\nPackage `{package}`.\n\n```{{eval-rst}}\n{entries}\n```\n")
    return "\n".join(parts)


def _insert_levels(app, docname: str, source: list[str]) -> None:
    if LEVELS_MARKER in source[0]:
        source[0] = source[0].replace(LEVELS_MARKER, _levels_markdown())


def setup(app):
    app.connect("source-read", _insert_levels)
