"""Test–retest consistency of a participant's standard errors, from the two folds of a two-run fit.

With two runs, each cross-validation fold fits one run alone, so the folds are two independent
estimates of every unit. If the standard errors are right, ``|θ₁ − θ₂| ≤ 1.96 √(se₁² + se₂²)`` holds
for about 95 % of the units with signal in both: a check of the intervals that needs no ground
truth (docs/validation.md, "Test–retest consistency"). It sees the noise's part of the error only:
a bias both runs share (each unit's own HRF) is the same in both fits, so the errors it takes leave
out the HRF's between-unit variability (``Uncertainty.noise_se``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from prfmap.engine import FitResult, catalog
from prfmap.engine.catalog.result import Uncertainty

__all__ = ["RETEST_PARAMETERS", "RETEST_R2_MIN", "FoldEstimate", "retest_consistency"]

RETEST_PARAMETERS = ("x", "y", "sigma")
"""The parameters compared."""
RETEST_R2_MIN = 0.1
"""The r² a unit needs in both fits to be compared (the report's default threshold)."""


@dataclass(frozen=True)
class FoldEstimate:
    """One fold's estimates of :data:`RETEST_PARAMETERS`, their standard errors, r² and doubt.

    Where a prior moved an estimate (σ under ``--sigma-prior``), its maximum-likelihood estimate and
    standard error (``Uncertainty.likelihood``): two runs' posterior estimates shrink toward lines
    estimated from the same participant, so they differ less than their errors say whatever those
    errors are worth (0.995–1.000 of the units on prfmap-synth); the data's estimates test the data's
    intervals. The standard errors are those without the HRF's between-unit variability
    (``Uncertainty.noise_se``, where the fit gives them): a unit's own HRF is the same in both runs,
    so what it moves the estimates by cancels in their difference, and the errors that hold it
    over-cover the check by design (docs/validation.md, "σ's interval from its likelihood along its
    profile path").

    Attributes
    ----------
    values, se : dict
        Parameter → (units,) estimates and standard errors (NaN where not refined).
    r2 : ndarray, shape (units,)
        The fit's r².
    doubtful : ndarray of bool, shape (units,)
        Flagged doubtful (:func:`prfmap.engine.catalog.doubtful`).
    """

    values: dict[str, np.ndarray]
    se: dict[str, np.ndarray]
    r2: np.ndarray
    doubtful: np.ndarray

    @classmethod
    def of(cls, result: FitResult) -> FoldEstimate | None:
        """The estimate of a fold's fit.

        Parameters
        ----------
        result : FitResult
            A fold's fit.

        Returns
        -------
        FoldEstimate or None
            None where the fit has no standard errors of :data:`RETEST_PARAMETERS`.
        """
        unc = result.uncertainty
        if unc is None or any(k not in unc.se for k in RETEST_PARAMETERS):
            return None
        return cls(
            {
                k: np.asarray(unc.likelihood.get(k, result.params[k]), dtype=np.float64)
                for k in RETEST_PARAMETERS
            },
            {k: np.asarray(_noise_se(unc, k), dtype=np.float64) for k in RETEST_PARAMETERS},
            np.asarray(result.r2, dtype=np.float64),
            catalog.doubtful(result.status),
        )


def _noise_se(unc: Uncertainty, key: str) -> np.ndarray:
    """``key``'s maximum-likelihood standard error without the HRF's variability, where computed."""
    return unc.noise_se.get(key, unc.likelihood_se.get(key, unc.se[key]))


def retest_consistency(
    first: FoldEstimate, second: FoldEstimate, r2_min: float = RETEST_R2_MIN
) -> dict[str, Any] | None:
    """The share of units whose two estimates differ by at most 1.96 √(se₁² + se₂²), per parameter.

    Parameters
    ----------
    first, second : FoldEstimate
        Two independent fits of the same units (the two folds of a two-run fit).
    r2_min : float
        The r² a unit needs in both.

    Returns
    -------
    dict or None
        ``Units`` compared, ``Consistent`` (parameter → share, 3 decimals) and ``Description``;
        None when no unit qualifies.
    """
    both = (
        (np.nan_to_num(first.r2, nan=-1.0) >= r2_min)
        & (np.nan_to_num(second.r2, nan=-1.0) >= r2_min)
        & ~first.doubtful
        & ~second.doubtful
    )
    for key in RETEST_PARAMETERS:
        both &= np.isfinite(first.se[key]) & np.isfinite(second.se[key])
    if not both.any():
        return None
    shares = {}
    for key in RETEST_PARAMETERS:
        spread = catalog.Z95 * np.hypot(first.se[key][both], second.se[key][both])
        shares[key] = round(
            float(np.mean(np.abs(first.values[key][both] - second.values[key][both]) <= spread)), 3
        )
    return {
        "Units": int(both.sum()),
        "Consistent": shares,
        "Description": (
            "each run fitted alone (the two cross-validation folds); over the units with r2 >= "
            f"{r2_min:g} and not flagged doubtful in both fits, the share whose two estimates differ "
            "by at most 1.96 sqrt(se1^2 + se2^2): about 0.95 where the standard errors are right; "
            "the standard errors without the HRF's between-unit variability (each unit's HRF is the "
            "same in both runs and cancels in their difference); an estimate a prior moved (sigma under "
            "--sigma-prior) is compared at its maximum-likelihood value"
        ),
    }
