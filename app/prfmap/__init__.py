"""prfmap: population receptive field mapping as a BIDS App."""

from __future__ import annotations

__all__ = ["__version__"]


def __getattr__(name: str) -> str:
    """``__version__``, read from the installed metadata when first asked for.

    Not at import: ``importlib.metadata`` takes a tenth of a second, and the console script installs its
    stop-signal handlers only after importing this package (:mod:`prfmap.cli.console`).
    """
    if name != "__version__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    # Imported here: importing importlib.metadata takes a tenth of a second (see above).
    from importlib.metadata import PackageNotFoundError, version

    try:
        found = version("prfmap")
    except PackageNotFoundError:  # running from a source tree that is not installed
        found = "0.1.0"
    globals()["__version__"] = found
    return found
