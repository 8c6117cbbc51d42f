"""What a fit is asked to do (:class:`FitOptions`): the options of :func:`prfmap.engine.fit_prf`."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from prfmap.engine.hrf import HRF
from prfmap.engine.noise import BaseNoiseModel


@dataclass(frozen=True, eq=False)
class FitOptions:
    """The options of one fit; frozen, so every stage reads the same values.

    Attributes
    ----------
    model : str
        A model of :data:`prfmap.engine.catalog.MODELS`: ``gauss``, ``css``, ``dog``, ``dn``...
    refine : str
        A refiner of :data:`prfmap.engine.catalog.REFINERS`: ``lm`` (Levenberg–Marquardt), ``sgd``
        (Adam) or ``none`` (the grid and linear fit alone).
    hrf : {"canonical", "vertex"} or HRF
        SPM's response; SPM's plus per-unit derivative weights (``fit_hrf=True`` too); or the given
        HRF, held fixed (a participant's, from :func:`prfmap.engine.estimate_hrf`).
    fit_hrf : bool
        The same as ``hrf="vertex"``.
    grid : mapping, optional
        Grid of ``x``, ``y``, ``sigma`` points (default :func:`prfmap.engine.fit.grid.polar_grid`),
        searched with the Gaussian; a model with extras then seeds them per unit from a small grid
        of its own around the unit's Gaussian start (``PRFModel.seed_grid``). A grid that also names
        extras (``n``...) is searched with the model itself, without the seeding.
    mem_gb : float, optional
        Memory budget for tiles and batches (default 2 GB; at most 60 % of a GPU's free memory).
    dtype : {"float32", "float64"}
        Precision of the computation.
    seed : int
        Seed of the random generator (recorded; kept for reproducible stochastic stages).
    fixed : mapping, optional
        Internal parameters held at a value, e.g. ``{"n": 0.5}``, added to the catalogue's.
    max_iter : int, optional
        Refinement iterations (default: the refiner's entry: LM 30, SGD 400).
    tol : float, optional
        Relative cost change under which a unit stops (default: the refiner's: LM 1e-4, SGD
        1e-5); 0 means zero (only the budget stops a unit).
    refine_options : mapping
        Constructor options of the refiner's solver, over its entry's defaults (``sgd``:
        ``learning_rate``); an option the entry does not declare is a ``ValueError``.
    refine_r2_min : float
        Refine only units whose grid fit explains at least this fraction of variance; 0 refines all.
    slice_time_ref : float
        Where in each TR the volume is sampled (fMRIPrep's default 0.5).
    return_predictions : bool
        Keep the fitted time courses in ``FitResult.predictions``.
    noise : {"ols"} or BaseNoiseModel
        The noise model the refinement whitens data and predictions with (generalised least squares)
        and the standard errors use; ``ols``: white noise. Any other entry of
        ``catalog.NOISE_MODELS`` (an autoregressive model) is estimated before the fit
        (:func:`prfmap.engine.estimate_noise`) and handed to it.
    uncertainty : bool
        Compute every fitted unit's standard errors (``FitResult.uncertainty``) and the
        ``uncertain`` status bit.
    gauss_start : mapping, optional
        ``x``, ``y``, ``sigma`` ((units,) each, degrees) and optionally ``r2`` of a Gaussian fit of
        the same data: a model seeded from its Gaussian fit (CSS, DoG, DN) seeds from these instead of
        its own Gaussian grid search and refinement (what a comparison of several models shares);
        with ``r2``, only the units it explains well enough to be refined are seeded.
    """

    model: str = "gauss"
    refine: str = "lm"
    hrf: str | HRF = "canonical"
    fit_hrf: bool = False
    grid: Mapping[str, np.ndarray] | None = None
    mem_gb: float | None = None
    dtype: str = "float32"
    seed: int = 0
    fixed: Mapping[str, float] | None = None
    max_iter: int | None = None
    tol: float | None = None
    refine_options: Mapping[str, Any] = field(default_factory=dict)
    refine_r2_min: float = 0.0
    slice_time_ref: float = 0.5
    return_predictions: bool = False
    noise: str | BaseNoiseModel = "ols"
    uncertainty: bool = True
    gauss_start: Mapping[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "refine_options", MappingProxyType(dict(self.refine_options)))

    @classmethod
    def from_keywords(cls, base: FitOptions | None = None, **keywords: Any) -> FitOptions:
        """Options from ``fit_prf``'s keywords, over ``base`` (or the defaults).

        Parameters
        ----------
        base : FitOptions, optional
            The options the keywords change.
        **keywords
            Fields of :class:`FitOptions`.

        Returns
        -------
        FitOptions
        """
        unknown = set(keywords) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise TypeError(f"fit_prf() got unexpected keyword arguments {sorted(unknown)}")
        return dataclasses.replace(base or cls(), **keywords)
