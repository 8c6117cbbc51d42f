"""prfmap-docker: run the prfmap BIDS App in its per-backend Docker image."""

__version__ = "0.1.0"

__all__ = ["__version__"]
