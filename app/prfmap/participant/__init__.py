"""The participant level, in stages: plan, load and preprocess, fit and cross-validate, write.

Importing this package imports nothing: its stages import Keras (through the engine), which must
not load before :func:`prfmap.engine.select_backend` has run.
"""
