"""The participant report's account of a fit's uncertainty.

The centre's standard-error map, the share of units flagged ``uncertain`` and the methods' sentences
on how the standard errors were computed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import numpy as np

from prfmap.engine import catalog
from prfmap.engine.catalog.settings import FitSettings

CENTRE_SE = "centrese"
"""The label of the centre's standard-error map in figure names (``flat-centrese.png``)."""
UNCERTAIN_BIT = catalog.STATUS_BITS["uncertain"]


def centre_standard_error(stat_maps: Mapping[tuple[str, str], np.ndarray]) -> np.ndarray | None:
    """The standard error of each unit's pRF centre: the larger of x's and y's.

    The larger of the two, not their mean, is the quantity the ``uncertain`` status bit tests
    against a fifth of the stimulated radius, so the map and the flag speak of the same number.

    Parameters
    ----------
    stat_maps : mapping
        ``(stat, label)`` → (units,) values (``ReportContext.stat_maps``).

    Returns
    -------
    ndarray or None
        (units,) ``max(se_x, se_y)`` in degrees (NaN where a unit was not fitted, inf where its
        information matrix is singular); None without both standard errors.
    """
    se_x, se_y = stat_maps.get(("se", "x")), stat_maps.get(("se", "y"))
    if se_x is None or se_y is None:
        return None
    se_x, se_y = np.asarray(se_x, dtype=np.float64), np.asarray(se_y, dtype=np.float64)
    return np.fmax(se_x, se_y) if se_x.shape == se_y.shape else None


def uncertain_units(status: np.ndarray | None, fitted: np.ndarray) -> int | None:
    """How many fitted units carry the ``uncertain`` status bit.

    Parameters
    ----------
    status : ndarray or None
        The status map.
    fitted : ndarray of bool
        The units fitted (finite r²).

    Returns
    -------
    int or None
        The count; None without a status map.
    """
    if status is None:
        return None
    codes = catalog.status_codes(np.asarray(status, dtype=np.float64))
    return int(np.sum(fitted & ((codes & UNCERTAIN_BIT) != 0)))


def noise_model_text(settings: FitSettings | None) -> str:
    """The noise model a fit used, in words (its record's description and AR coefficients).

    Parameters
    ----------
    settings : FitSettings or None
        ``FitResult.settings``; its ``noise_model`` record (``option``, ``description``, for AR
        models ``coefficients`` and ``units``).

    Returns
    -------
    str
        Empty when the settings record none.
    """
    record: Mapping[str, Any] = getattr(settings, "noise_model", None) or {}
    if not record:
        return ""
    option = str(record.get("option", ""))
    known = catalog.NOISE_MODELS.get(option)
    text = str(record.get("description") or (known.description if known else option))
    coefficients = record.get("coefficients")
    if coefficients:
        text += f" (coefficients {', '.join(f'{float(c):.3f}' for c in coefficients)})"
    return text


def sigma_prior_text(settings: FitSettings | None) -> str:
    """The methods' sentence on ``--sigma-prior eccentricity``, empty without a prior.

    Parameters
    ----------
    settings : FitSettings or None
        ``FitResult.settings`` (its ``sigma_prior``).

    Returns
    -------
    str
    """
    record = getattr(settings, "sigma_prior", None)
    if not record:
        return ""
    return (
        "Sigma is each refined unit's posterior mode under an empirical-Bayes prior on log sigma given "
        f"eccentricity (log sigma ~ N({record['log_sigma_intercept']:.3f} + "
        f"{record['log_sigma_slope_per_deg']:.3f} × eccentricity, {record['log_sigma_spread']:.3f}²), "
        f"estimated by the marginal likelihood of the profile likelihoods of {record['units']} refined "
        "units of a pilot fit; --sigma-prior eccentricity), the centre held at its estimate; its standard "
        "error and interval include the prior's precision, and the interval holds at least the "
        "maximum-likelihood interval. "
    )


def delay_prior_text(settings: FitSettings | None) -> str:
    """The methods' sentence on ``--delay-prior spread``, empty without it.

    Parameters
    ----------
    settings : FitSettings or None
        ``FitResult.settings`` (its ``delay_prior``).

    Returns
    -------
    str
    """
    record = getattr(settings, "delay_prior", None)
    if not record:
        return ""
    offsets = ", ".join(f"{o:+.2f}" for o in record["offsets_s"])
    counts = ", ".join(str(c) for c in record["units_per_offset"])
    return (
        "Each refined unit's HRF peak delay was chosen jointly with sigma at their posterior mode among "
        f"the fit's HRF with its delay moved by {offsets} s (prior N(0, {record['delay_sd_s']:.2f} s²), "
        f"the between-vertex spread; units per delay {counts}; --delay-prior spread); the unit's final "
        "fit and standard errors are under its delay's HRF, and the standard errors include the delay's "
        f"remaining spread ({record['residual_delay_sd_s']:.2f} s). "
    )


def uncertainty_methods(settings: FitSettings | None) -> str:
    """The methods' account of the standard errors and of the ``uncertain`` status bit.

    Parameters
    ----------
    settings : FitSettings or None
        ``FitResult.settings`` (its ``noise_model`` and ``covariance``).

    Returns
    -------
    str
        Sentences, each ending with a full stop and a space.
    """
    noise = noise_model_text(settings) or catalog.NOISE_MODELS["ols"].description
    meaning = re.sub(r"\s*\(prfmap\.[\w.]+\)$", "", catalog.STATUS_FLAGS[UNCERTAIN_BIT][1])
    sandwich = getattr(settings, "covariance", None) == "sandwich"
    robust = (
        " plus the sandwich (Huber–White) term: the inverse information around the excess of the "
        "per-frame scores' covariance (Newey–West, Bartlett weights within each run) over what the "
        "model implies (--covariance sandwich)"
        if sandwich
        else ""
    )
    return (
        sigma_prior_text(settings)
        + delay_prior_text(settings)
        + "Standard errors are Laplace (Gauss–Newton) approximations at each unit's final estimate: the "
        "inverse of the information matrix of all parameters (the linear weights included) from the "
        "Jacobian of the prewhitened residual, times the residual variance (RSS over frames minus "
        f"nuisance regressors minus fitted parameters){robust}; the centre's (x, y) widened where the "
        "residual sum of squares along its profile path rises more slowly than that curvature says "
        "(to where it has risen by 1.96 squared residual variances); derived parameters by the delta "
        "method; "
        f"sigma's 95 % interval from the interval of log sigma. Noise model: {noise}. A unit is "
        f"flagged uncertain (status bit {UNCERTAIN_BIT}) when {meaning}; such estimates count as "
        "doubtful and are left out of the parameter maps. "
    )
