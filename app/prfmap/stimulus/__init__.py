"""Stimulus apertures from what labs have: screenshots, screen recordings, ``.mat`` image stacks.

``prfmap-stimulus`` (:mod:`prfmap.cli.stimulus`) is the command line; in Python::

    from prfmap.stimulus import Options, Screen, make_aperture, open_source
    source = open_source(["shots/"])                      # or a video, or a .mat file
    result = make_aperture(source, Options(Screen((52.0, 29.25), 57.0), tr=1.5))
    result.design, result.fov_deg                          # (volumes, rows, cols) in [0, 1], degrees

This package imports only :mod:`prfmap.io` and :mod:`prfmap.errors` from prfmap.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from prfmap.stimulus.geometry import Screen
    from prfmap.stimulus.pipeline import Options, StimulusResult, make_aperture, open_source
    from prfmap.stimulus.sources import ArrayFrames

_MODULE_OF = {
    "ArrayFrames": "sources",
    "Options": "pipeline",
    "Screen": "geometry",
    "StimulusResult": "pipeline",
    "make_aperture": "pipeline",
    "open_source": "pipeline",
}
__all__ = ["ArrayFrames", "Options", "Screen", "StimulusResult", "make_aperture", "open_source"]


def __getattr__(name: str) -> Any:
    """The package's names, each imported from its module on first use.

    ``prfmap-stimulus --help`` imports this package for its choices, not its readers and writers.
    """
    if name not in _MODULE_OF:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    globals()[name] = value
    return value
