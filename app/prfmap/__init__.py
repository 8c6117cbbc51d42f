"""prfmap: population receptive field mapping as a BIDS App."""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("prfmap")
except PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0.1.0"

__all__ = ["__version__"]
