"""The record of how a fit was made (:class:`FitSettings`): what its sidecars, checkpoints and report say.

Plain frozen data (no Keras), so the derivatives writers and the report read it by attribute and
:mod:`prfmap.participant.checkpoint` saves and restores it. :meth:`FitSettings.to_dict` is the JSON
object written as a sidecar's ``FitSettings`` and into every checkpoint chunk.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SUMMED = ("units", "units_fitted", "units_refined", "unit_iterations")
"""Counts that add up over the chunks of a chunked fit (``iterations`` takes their maximum)."""


@dataclass(frozen=True)
class FitSettings:
    """How one fit was made: model, refiner, HRF, sizes, software and device.

    Attributes
    ----------
    model, refine : str
        The model and refiner (catalogue names).
    hrf : str
        A sentence on the HRF, for sidecars and the methods text.
    hrf_model : mapping
        The HRF as ``HRF.describe()`` records it (``option``, ``delay_s``, ``dispersion``, ``peak_s``,
        ``units``); ``HRF.from_record`` reads it back.
    hrf_bases : tuple of str
        The HRF bases fitted (the response, and its derivatives with ``hrf="vertex"``).
    slice_time_ref : float
        Where in each TR the volumes sample the signal (fraction).
    grid_points, seed_candidates : int
        Points of the grid search; candidates per unit of the seed search (0: not seeded).
    refine_r2_min : float
        Grid r² a unit needed to be refined.
    units_refined, iterations, unit_iterations : int
        Units refined; the most steps any unit took; the unit-steps computed.
    pixels : int
        Stimulated aperture pixels.
    max_iter : int
        The refiner's iteration budget.
    fixed : mapping
        Internal parameters held at a value.
    dtype : str
        ``float32`` or ``float64``.
    units, units_fitted : int
        Units given; units with usable data.
    backend, backend_version, keras_version, device : str
        Where it ran.
    compiled : bool
        Whether the engine's functions were compiled.
    seed : int
        Seed of the random generator.
    bounds : mapping
        The natural-unit bounds each fitted parameter was held in.
    noise_model : mapping
        The noise model the refinement and the standard errors used
        (:meth:`prfmap.engine.noise.NoiseModel.describe`).
    covariance : str, optional
        How the standard errors were computed (:data:`prfmap.engine.catalog.COVARIANCES`); None
        without them.
    sigma_prior : mapping, optional
        The prior on log σ the fit's σ is the posterior mode under
        (:meth:`prfmap.engine.fit.sigma_prior.SigmaPrior.describe`); None without one.
    delay_prior : mapping, optional
        The prior on each unit's HRF delay and the delays the units took
        (:meth:`prfmap.engine.fit.delay_prior.DelayPrior.describe`); None without one.
    chunks, chunk_units : int, optional
        For a chunked fit (:mod:`prfmap.participant.checkpoint`): the chunks and units per chunk.
    """

    model: str
    refine: str
    hrf: str
    hrf_model: Mapping[str, Any]
    hrf_bases: tuple[str, ...]
    slice_time_ref: float
    grid_points: int
    seed_candidates: int
    refine_r2_min: float
    units_refined: int
    iterations: int
    unit_iterations: int
    pixels: int
    max_iter: int
    fixed: Mapping[str, float]
    dtype: str
    units: int
    units_fitted: int
    backend: str
    backend_version: str
    keras_version: str
    device: str
    compiled: bool
    seed: int
    bounds: Mapping[str, Any]
    noise_model: Mapping[str, Any] = dataclasses.field(default_factory=lambda: {"option": "ols"})
    covariance: str | None = "laplace"
    sigma_prior: Mapping[str, Any] | None = None
    delay_prior: Mapping[str, Any] | None = None
    chunks: int | None = None
    chunk_units: int | None = None

    def to_dict(self) -> dict[str, Any]:
        """The JSON-able record (a sidecar's ``FitSettings``), keys in field order.

        Returns
        -------
        dict
            ``chunks`` and ``chunk_units`` only for a chunked fit.
        """
        record: dict[str, Any] = {}
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if value is None and item.name in ("chunks", "chunk_units"):
                continue
            record[item.name] = _plain(value)
        return record

    @classmethod
    def from_dict(cls, record: Mapping[str, Any]) -> FitSettings:
        """The settings a :meth:`to_dict` record (a sidecar's or a checkpoint's) describes.

        Parameters
        ----------
        record : mapping
            Every field's key; unknown keys are refused.

        Returns
        -------
        FitSettings
        """
        names = {item.name for item in dataclasses.fields(cls)}
        unknown = set(record) - names
        if unknown:
            raise ValueError(f"unknown fit settings {sorted(unknown)}")
        values = dict(record)
        values["hrf_bases"] = tuple(values.get("hrf_bases", ()))
        return cls(**values)

    def merged(self, others: list[FitSettings], chunk_units: int) -> FitSettings:
        """The settings of a fit made of chunks: this (the first chunk's) and the ``others``.

        Parameters
        ----------
        others : list of FitSettings
            The other chunks' settings.
        chunk_units : int
            Units per chunk.

        Returns
        -------
        FitSettings
            Counts summed (:data:`SUMMED`), ``iterations`` their maximum, ``chunks`` and ``chunk_units`` set.
        """
        every = [self, *others]
        summed = {name: int(sum(getattr(s, name) for s in every)) for name in SUMMED}
        return dataclasses.replace(
            self,
            **summed,
            iterations=int(max(s.iterations for s in every)),
            chunks=len(every),
            chunk_units=int(chunk_units),
        )


def _plain(value: Any) -> Any:
    """``value`` as JSON writes it: mappings as dicts, tuples as lists."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, tuple | list):
        return [_plain(v) for v in value]
    return value
