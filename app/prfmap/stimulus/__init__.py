"""Stimulus apertures from what labs have: screenshots, screen recordings, ``.mat`` image stacks.

``prfmap-stimulus`` (:mod:`prfmap.cli.stimulus`) is the command line; in Python::

    from prfmap.stimulus import Options, Screen, make_aperture, open_source
    source = open_source(["shots/"])                      # or a video, or a .mat file
    result = make_aperture(source, Options(Screen((52.0, 29.25), 57.0), tr=1.5))
    result.design, result.fov_deg                          # (volumes, rows, cols) in [0, 1], degrees

This package imports only :mod:`prfmap.io` and :mod:`prfmap.errors` from prfmap.
"""

from prfmap.stimulus.geometry import Screen
from prfmap.stimulus.pipeline import Options, StimulusResult, make_aperture, open_source
from prfmap.stimulus.sources import ArrayFrames

__all__ = ["ArrayFrames", "Options", "Screen", "StimulusResult", "make_aperture", "open_source"]
