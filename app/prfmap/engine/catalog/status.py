"""The fit status of a unit: bits of the ``status`` map, what each means, and how to decode a map."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np

CENTRE_SE_LIMIT = 0.2
"""A centre whose standard error (the larger of x's and y's) exceeds this fraction of the stimulated
radius is not pinned down by the data (status bit ``uncertain``)."""
SIGMA_WIDTH_LIMIT = 1.0
"""A σ whose 95 % interval is wider than this fraction of the stimulated radius is not pinned down
(an absolute width: a small σ's interval spans a large factor and is still informative)."""
_ORDINALS = {2: "half", 3: "third", 4: "quarter", 5: "fifth", 10: "tenth"}


def share_of(fraction: float) -> str:
    """A fraction of something in words, ready to precede it: 0.2 ``"a fifth of "``, 1 ``""``.

    Parameters
    ----------
    fraction : float
        The share.

    Returns
    -------
    str
    """
    exact = Fraction(fraction).limit_denominator(100)
    if exact == 1:
        return ""
    if exact.numerator == 1 and exact.denominator in _ORDINALS:
        return f"a {_ORDINALS[exact.denominator]} of "
    return f"{fraction:g} of "


STATUS_FLAGS: dict[int, tuple[str, str]] = {
    1: (
        "no_signal",
        "no usable data (non-finite or constant after the nuisance projection) or no "
        "positive response anywhere on the grid: every parameter and r2 are NaN",
    ),
    2: (
        "grid_only",
        "not refined (the grid's r2 is below refine_r2_min): the grid point and its linear fit are written",
    ),
    4: (
        "at_bound",
        "the refinement stopped on a bound of a parameter other than sigma's floor, the "
        "centre on the largest eccentricity, a parameter held in a range at the range's end (CSS's "
        "n at 1, a surround at its largest size), or the final fit held the amplitude at its largest "
        "value (FitSettings.bounds): the estimate is written but the best fit may lie beyond the bound; "
        "its 95 % interval is one-sided",
    ),
    8: ("not_converged", "the refinement used all its iterations without converging"),
    16: (
        "refinement_rejected",
        "the refinement ended outside the model's valid range (amplitude not "
        "positive or above its bound, or a non-finite cost): the start (grid point or seed) and "
        "its linear fit are written instead",
    ),
    32: (
        "surround_vanished",
        "the surround or normalisation pool of a DoG or DN fit vanished: the "
        "fit is that of a Gaussian and its extra parameters are not estimates",
    ),
    64: (
        "not_reproducible",
        "the held-out runs' correlation with the fold predictions is not "
        "significant (z of the cross-validation, autocorrelation-corrected, below the one-sided "
        "Bonferroni limit over the fitted units for a family-wise error of 0.05): the fit does not "
        "predict the held-out runs",
    ),
    128: (
        "size_at_floor",
        "sigma stopped at the resolution floor (one aperture pixel): the pRF is "
        "smaller than the stimulus resolves, sigma is an upper limit; the position is an estimate",
    ),
    256: (
        "not_cross_validated",
        "reproducibility was not tested: the fit was not cross-validated (--no-cvr2, or a single "
        "run), so not_reproducible cannot be set and r2 on the fitted data alone does not tell a "
        "pRF from noise",
    ),
    512: (
        "uncertain",
        "the data do not pin the estimate down: a standard error of x, y or sigma is not finite, the "
        f"centre's standard error exceeds {share_of(CENTRE_SE_LIMIT)}the stimulated radius, the centre's "
        "95 % interval of eccentricity leaves the stimulated field, or sigma's 95 % interval is wider "
        f"than {share_of(SIGMA_WIDTH_LIMIT)}the stimulated radius (prfmap.engine.fit.uncertainty)",
    ),
}
"""Bits of the ``status`` map; a unit's status is the sum of the bits that apply to it."""

STATUS_BITS: dict[str, int] = {name: bit for bit, (name, _) in STATUS_FLAGS.items()}
"""Each status flag's bit, by name."""

DOUBTFUL = ("at_bound", "not_converged", "refinement_rejected", "not_reproducible", "uncertain")
"""Flags that mark an estimate as doubtful: the report and the group level leave such units out."""

DOUBTFUL_BITS = sum(STATUS_BITS[name] for name in DOUBTFUL)
"""The bits of :data:`DOUBTFUL` together (a unit is doubtful when ``status & DOUBTFUL_BITS``)."""


def status_codes(status: Any) -> np.ndarray:
    """A status map (float, as written; NaN read as 0) as integer bit codes.

    Parameters
    ----------
    status : array-like
        A status map.

    Returns
    -------
    ndarray of int64
    """
    return np.nan_to_num(np.asarray(status, dtype=np.float64), nan=0.0).astype(np.int64)


def doubtful(status: Any) -> np.ndarray:
    """Per unit: the status map has a bit of :data:`DOUBTFUL`.

    Parameters
    ----------
    status : array-like
        A status map.

    Returns
    -------
    ndarray of bool
    """
    return (status_codes(status) & DOUBTFUL_BITS) != 0


Z95 = 1.959963984540054
"""The two-sided 95 % quantile of the standard normal (the intervals, the test–retest check)."""
Z95_ONE_SIDED = 1.6448536269514722
"""The one-sided 95 % quantile: the interval of an estimate on the end of its range."""
