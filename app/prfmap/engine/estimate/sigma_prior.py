"""``estimate_sigma_prior``: a participant's prior on log σ, estimated once before its fits.

A pilot sample of units (every k-th, at most :data:`PILOT_UNITS`) goes through a fit's starts and
refinement with the fit's options; the prior is the one whose marginal likelihood of the refined
units' profile likelihoods of log σ is largest (:mod:`prfmap.engine.fit.sigma_prior`). The pilot
stops there: its final linear fit and standard errors would serve nothing. Every chunk of the fit
then uses that prior, so it depends neither on the chunking nor on which units had the best SNR; like
the participant HRF and the noise model, one estimate per fit and per cross-validation fold. The
participant level gets the same prior without a fit of its own: its first chunk takes the other
chunks' pilot units along (:class:`~prfmap.engine.fit.sigma_prior.SigmaPilot`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from prfmap.engine.batching import ProgressFn
from prfmap.engine.fit import check_data, refine_units
from prfmap.engine.fit.sigma_prior import SigmaPrior
from prfmap.engine.options import FitOptions
from prfmap.engine.problem import FitCache
from prfmap.engine.stimulus import Stimulus

__all__ = ["PILOT_UNITS", "estimate_sigma_prior", "pilot_rows", "pilot_units"]

PILOT_UNITS = 4000
"""At most this many units, every k-th, are fitted to estimate a participant's prior
(:func:`pilot_units`): a sample that does not depend on how the fit is chunked or on any unit's SNR."""


def pilot_units(n_units: int) -> np.ndarray:
    """Every k-th of ``n_units`` units, at most :data:`PILOT_UNITS` of them (the pilot fit's).

    Parameters
    ----------
    n_units : int
        The units of the fit.

    Returns
    -------
    ndarray of int
    """
    return np.arange(0, n_units, max(1, -(-n_units // PILOT_UNITS)))


def pilot_rows(data: np.ndarray) -> np.ndarray:
    """The pilot units of a fit of ``data``: :func:`pilot_units` less those with a non-finite value.

    Units outside a region (or refused) are no pilot units, so the pilot is the same share of a
    region's units as of a whole fit's.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        The fit's time courses.

    Returns
    -------
    ndarray of int
    """
    rows = pilot_units(len(data))
    return rows[np.isfinite(data[rows]).all(axis=1)]


def estimate_sigma_prior(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    *,
    options: FitOptions,
    nuisance: np.ndarray | None = None,
    progress: ProgressFn | None = None,
    cache: FitCache | None = None,
) -> SigmaPrior | None:
    """The prior of ``sigma_prior="eccentricity"`` for a fit of ``data`` with ``options``.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        The fit's time courses; units with a non-finite value (outside a region, refused) are no
        pilot units, so the pilot is the same share of a region's units as of a whole fit's.
    stim, tr, nuisance, progress, cache
        As :func:`prfmap.engine.fit_prf`'s.
    options : FitOptions
        The fit's options, its HRF and noise model already estimated (``sigma_prior`` is set to
        ``"eccentricity"``).

    Returns
    -------
    SigmaPrior or None
        None where the pilot's refined units were too few (or the model has no σ, or no refinement).
    """
    sample = np.asarray(data[pilot_rows(data)], dtype=np.float64)
    if sample.shape[0] == 0:
        return None
    pilot = refine_units(
        check_data(sample, stim),
        stim,
        tr,
        replace(options, sigma_prior="eccentricity", uncertainty=False, return_predictions=False),
        nuisance=nuisance,
        progress=progress,
        cache=FitCache() if cache is None else cache,
    )
    return pilot.sigma_prior
