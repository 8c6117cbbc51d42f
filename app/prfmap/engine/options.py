"""What a fit is asked to do (:class:`FitOptions`): the options of :func:`prfmap.engine.fit_prf`."""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

from prfmap.engine import catalog
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
        SPM's response; SPM's plus per-unit derivative weights; or the given HRF, held fixed (a
        participant's, from :func:`prfmap.engine.estimate_hrf`).
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
    covariance : str
        How: a key of :data:`prfmap.engine.catalog.COVARIANCES` (``laplace`` or ``sandwich``).
    sigma_prior : {"none", "eccentricity"}, SigmaPrior or SigmaPilot
        ``eccentricity``: σ is each refined unit's posterior mode under an empirical-Bayes prior on
        log σ given eccentricity, estimated from the fit's refined units
        (:mod:`prfmap.engine.fit.sigma_prior`); or under the prior given (a participant's, estimated
        once for all chunks); or under the prior estimated from a participant's pilot sample, that
        chunk's own pilot units and the others' brought along (``SigmaPilot``); ``none``: the
        maximum-likelihood σ.
    delay_prior : {"none", "spread"}
        ``spread``: each refined unit also tries the HRF with its delay moved by ± 1.3 between-unit
        SDs and takes the delay and σ of their joint posterior mode under the delay's prior
        N(0, SD²) (:mod:`prfmap.engine.fit.delay_prior`), under ``sigma_prior`` where there is one;
        a fit with per-unit derivative weights (``hrf="vertex"``) has none.
    gauss_start : mapping, optional
        ``x``, ``y``, ``sigma`` ((units,) each, degrees) and optionally ``r2`` of a Gaussian fit of
        the same data: a model seeded from its Gaussian fit (CSS, DoG, DN) seeds from these instead of
        its own Gaussian grid search and refinement (what a comparison of several models shares);
        with ``r2``, only the units it explains well enough to be refined are seeded.
    """

    model: str = "gauss"
    refine: str = "lm"
    hrf: str | HRF = "canonical"
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
    covariance: str = "laplace"
    sigma_prior: Any = "none"
    delay_prior: str = "none"
    gauss_start: Mapping[str, np.ndarray] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sigma_prior, str) and self.sigma_prior not in catalog.SIGMA_PRIORS:
            raise ValueError(f"sigma_prior must be one of {catalog.SIGMA_PRIORS}, got {self.sigma_prior!r}")
        if self.delay_prior not in catalog.DELAY_PRIORS:
            raise ValueError(f"delay_prior must be one of {catalog.DELAY_PRIORS}, got {self.delay_prior!r}")
        if self.covariance not in catalog.COVARIANCES:
            raise ValueError(
                f"covariance must be one of {sorted(catalog.COVARIANCES)}, got {self.covariance!r}"
            )
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

    def identity(self) -> dict[str, Any]:
        """What tells fits with these options apart, as JSON-able values (a checkpoint's key).

        Every option but the memory budget (``mem_gb`` changes the tiles, not the arithmetic of a
        unit); arrays (a grid, ``gauss_start``) by their digests, a given HRF or noise model by its
        class and fields.

        Returns
        -------
        dict
        """
        return {
            f.name: jsonable(getattr(self, f.name)) for f in dataclasses.fields(self) if f.name != "mem_gb"
        }


def array_digest(*arrays: np.ndarray | None) -> str:
    """A BLAKE2 digest of the shapes, dtypes and bytes of ``arrays`` (None counts as empty).

    Parameters
    ----------
    *arrays : ndarray or None
        Arrays.

    Returns
    -------
    str
        32 hex digits.
    """
    h = hashlib.blake2b(digest_size=16)
    for a in arrays:
        if a is None:
            h.update(b"none")
            continue
        a = np.ascontiguousarray(a)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        if a.size:  # a view of no bytes cannot be cast (an empty nuisance basis: no high-pass, short runs)
            h.update(memoryview(a).cast("B"))
    return h.hexdigest()


def jsonable(value: Any) -> Any:
    """``value`` as JSON-able data that tells values apart: arrays by digest, dataclasses by class and fields.

    Parameters
    ----------
    value : Any
        An option's value: None, a number, a string, an array, a mapping, a sequence or a dataclass of
        these.

    Returns
    -------
    Any

    Raises
    ------
    TypeError
        For any other value (whose text could hide a difference, or show one that is not there).
    """
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return {"array": array_digest(value)}
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        kind = type(value)
        fields = {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
        return {"class": f"{kind.__module__}.{kind.__qualname__}", **fields}
    raise TypeError(f"no identity for a {type(value).__name__}: {value!r}")
