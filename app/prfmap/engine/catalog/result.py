"""What a fit returns (:class:`FitResult`, with its :class:`Uncertainty`): plain frozen data, no Keras.

The participant level, the derivatives writers, the checkpoints and the report read and rebuild
results without the engine's compiled code, so that nothing loads a backend before a fit needs it;
:func:`prfmap.engine.fit_prf` makes them (:mod:`~prfmap.engine.fit.result`,
:mod:`~prfmap.engine.fit.uncertainty`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields

import numpy as np

from prfmap.engine import catalog
from prfmap.engine.catalog.settings import FitSettings

__all__ = ["PER_KEY_UNCERTAINTY", "FitResult", "Uncertainty"]


@dataclass(frozen=True)
class Uncertainty:
    """Standard errors and 95 % intervals of a fit's reported parameters.

    Attributes
    ----------
    se : dict
        Reported key (``x``, ``sigma``, ``amplitude``, ``eccentricity``, ``polar_angle``...) →
        (units,) standard errors; NaN where a unit was not fitted or not refined (grid-only: below
        ``refine_r2_min``), inf where its information matrix is singular (the data do not determine
        every parameter).
    lower, upper : dict
        The 95 % interval of the parameters held in a range by a transform.
    dof : ndarray, shape (units,)
        Residual degrees of freedom of the variance estimate.
    seconds : float
        Time it took.
    likelihood, likelihood_se : dict
        Where a prior moved a parameter's estimate (σ under ``sigma_prior``): its maximum-likelihood
        estimate and that estimate's standard error, what the data alone say (the test–retest check
        compares the estimates, with ``noise_se``); empty without a prior.
    noise_se : dict
        The maximum-likelihood estimates' standard errors without the HRF's between-unit variability
        (the ``hrf_alternatives`` of :class:`~prfmap.engine.fit.uncertainty.CovarianceRecipe`):
        what two fits of the same unit, its HRF the same in both, differ by through the noise alone.
        The test–retest check compares with these (a bias both runs share cancels in their
        difference); empty where not computed.
    """

    se: dict[str, np.ndarray] = field(default_factory=dict)
    lower: dict[str, np.ndarray] = field(default_factory=dict)
    upper: dict[str, np.ndarray] = field(default_factory=dict)
    dof: np.ndarray | None = None
    seconds: float = 0.0
    likelihood: dict[str, np.ndarray] = field(default_factory=dict)
    likelihood_se: dict[str, np.ndarray] = field(default_factory=dict)
    noise_se: dict[str, np.ndarray] = field(default_factory=dict)


PER_KEY_UNCERTAINTY = tuple(f.name for f in fields(Uncertainty) if f.default_factory is dict)
"""The fields of :class:`Uncertainty` that map each reported key to per-unit values (what a chunk's
checkpoint saves and what merging results by unit takes)."""


@dataclass(frozen=True)
class FitResult:
    """Per-unit pRF parameters, goodness of fit, timings and settings of one fit.

    ``flags`` holds per-unit booleans (False where a unit was not fitted): ``surround_vanished`` for
    ``dog`` and ``dn``, where the surround or normalisation pool is too weak to act
    (:data:`prfmap.engine.catalog.SURROUND_VANISHED`), so the fit is a Gaussian and its surround
    parameters mean nothing; ``took_gaussian`` for a model seeded from a Gaussian fit of the same data
    (a comparison of models), where a unit keeps that fit (:data:`prfmap.engine.catalog.TOOK_GAUSSIAN`).

    ``uncertainty`` holds the standard errors and 95 % intervals of the reported parameters
    (:mod:`~prfmap.engine.fit.uncertainty`), when the fit computed them.
    """

    model: str
    params: dict[str, np.ndarray]
    r2: np.ndarray
    loss: np.ndarray
    timings: dict[str, float] = field(default_factory=dict)
    settings: FitSettings | None = None
    predictions: np.ndarray | None = None
    status: np.ndarray | None = None
    flags: dict[str, np.ndarray] = field(default_factory=dict)
    uncertainty: Uncertainty | None = None

    def maps(self) -> dict[str, np.ndarray]:
        """Every parameter map under its BIDS file label.

        With ``r2``, ``polarangle``, ``eccentricity`` and the fit ``status``
        (:data:`prfmap.engine.catalog.STATUS_FLAGS`).

        Returns
        -------
        dict
            File label → (units,) values.
        """
        polar, eccentricity = catalog.visual_field_polar(self.params["x"], self.params["y"])
        derived = {"r2": self.r2, "polar_angle": polar, "eccentricity": eccentricity}
        if self.status is not None:
            derived["status"] = self.status
        return {catalog.PARAMETERS[k].label: v for k, v in {**self.params, **derived}.items()}

    def stat_maps(self) -> dict[tuple[str, str], np.ndarray]:
        """The uncertainty maps under their ``stat`` and parameter labels.

        ``("se", label)`` for every parameter with a standard error, ``("ci95lower", label)`` and
        ``("ci95upper", label)`` where the interval is not symmetric (σ and the model's bounded
        extras). Empty when the fit computed none.

        Returns
        -------
        dict
            ``(stat, label)`` → (units,) values.
        """
        if self.uncertainty is None:
            return {}
        unc = self.uncertainty
        out = {("se", catalog.PARAMETERS[k].label): v for k, v in unc.se.items()}
        for stat, values in (("ci95lower", unc.lower), ("ci95upper", unc.upper)):
            out |= {(stat, catalog.PARAMETERS[k].label): v for k, v in values.items()}
        return out
