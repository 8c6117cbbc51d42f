"""A prior on each unit's HRF delay: the participant's HRF moved by a few steps of its between-unit spread.

A fit holds one HRF for every unit; the units' own responses peak earlier or later (prfmap-synth draws
each pRF vertex's delay 6 ± 1 s). σ answers a later response one-sidedly: the pRF widens to smear the
prediction in time, and the quarter of the vertices with the latest responses had their σ 0.2° too
large and outside its interval for a third of them (docs/validation.md, "Where σ's coverage at noise
0.25 is lost"). Each refined unit's profile of log σ is therefore also computed under the fit's HRF
with its delay moved by ± :data:`DELAY_STEP` between-unit SDs; with the delay's prior
N(0, SD²) the unit takes the delay and σ of the joint posterior mode
(:func:`~prfmap.engine.fit.sigma_prior.posterior_sigma`), and its final fit and standard errors are
those under that HRF. σ's standard error keeps what is left of the delay's spread (each unit's own
posterior over the offsets, and half a step's rounding); the centre, estimated under the fit's HRF,
keeps all of it (:func:`~prfmap.engine.fit.hrf_alternatives`, their steps in σ scaled per unit).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from prfmap.engine.hrf import HRF

__all__ = ["DELAY_STEP", "DEFAULT_DELAY_SD", "DelayPrior", "delay_prior"]

DELAY_STEP = 1.3
"""The delays tried: the fit HRF's, and that ± this many between-unit SDs (0.75 s at SD 0.577 s;
three delays did as well as five, docs/validation.md)."""
DEFAULT_DELAY_SD = 0.5
"""The between-unit SD of the delay (s) where the HRF carries no estimate of its own
(``HRF.delay_sd``: the participant-level estimate's); also the delay's in
:data:`~prfmap.engine.fit.HRF_VARIABILITY`."""


@dataclass(frozen=True)
class DelayPrior:
    """Each unit's HRF delay ~ N(the fit HRF's delay, ``sd``²), tried at ``offsets``.

    Attributes
    ----------
    hrfs : tuple of HRF
        The HRFs tried, the fit's own first.
    offsets : ndarray, shape (len(hrfs),)
        Their delays' offsets from the fit's, seconds.
    sd : float
        The between-unit SD of the delay, seconds.
    """

    hrfs: tuple[HRF, ...]
    offsets: np.ndarray
    sd: float

    @property
    def penalties(self) -> np.ndarray:
        """−2 log prior of each offset (relative to the fit's own delay)."""
        return (self.offsets / self.sd) ** 2

    def residual_variance(self, weights: np.ndarray) -> np.ndarray:
        """What is left of each unit's delay's variance (s²) once it takes its posterior's offset.

        The variance of the unit's posterior over the offsets, plus a uniform error within half a
        step (the rounding of a delay known exactly to its nearest offset). A unit whose data do not
        tell the delays apart keeps nearly all of the spread's variance.

        Parameters
        ----------
        weights : ndarray, shape (n, len(offsets))
            Each unit's posterior probability of each offset (:class:`SigmaPosterior.hrf_weights`).

        Returns
        -------
        ndarray, shape (n,)
        """
        step = float(np.min(np.diff(np.sort(self.offsets))))
        mean = weights @ self.offsets
        spread = weights @ self.offsets**2 - mean**2
        return np.maximum(spread, 0.0) + step**2 / 12

    def describe(self, chosen: np.ndarray, residual: np.ndarray) -> dict[str, Any]:
        """The record of the sidecars' ``FitSettings.delay_prior``.

        Parameters
        ----------
        chosen : ndarray of int
            The refined units' offsets, indices of ``offsets``.
        residual : ndarray
            Their delays' remaining variances (:meth:`residual_variance`), s².

        Returns
        -------
        dict
        """
        counts = np.bincount(np.asarray(chosen, dtype=int), minlength=len(self.offsets))
        return {
            "option": "spread",
            "delay_sd_s": round(self.sd, 4),
            "offsets_s": [round(float(o), 4) for o in self.offsets],
            "units_per_offset": [int(c) for c in counts],
            "residual_delay_sd_s": round(
                float(np.sqrt(np.median(residual))) if len(residual) else self.sd, 4
            ),
            "description": "each refined unit's HRF peak delay ~ N(the fit HRF's delay, delay_sd^2), "
            "tried at the offsets; the unit takes the delay and sigma of their joint posterior mode, and "
            "its final fit and standard errors are under that delay's HRF",
        }


def delay_prior(hrf: HRF) -> DelayPrior:
    """The delays a fit with ``hrf`` tries, and their prior.

    Parameters
    ----------
    hrf : HRF
        The fit's HRF (one basis); its ``delay_sd`` where it has one, else :data:`DEFAULT_DELAY_SD`.

    Returns
    -------
    DelayPrior
    """
    sd = hrf.delay_sd if hrf.delay_sd > 0 else DEFAULT_DELAY_SD
    offsets = np.array([0.0, -DELAY_STEP * sd, DELAY_STEP * sd])
    return DelayPrior(tuple(replace(hrf, delay=hrf.delay + o) for o in offsets), offsets, float(sd))
