"""Which model each vertex needs: the models of one fit compared on the same held-out runs.

Every model is cross-validated on the same leave-one-run-out folds, each fold fitted from its
training runs alone (:mod:`prfmap.participant.crossval`), and a model ``M`` other than the Gaussian
``G`` wins a unit when all of these hold:

1. **It predicts what the Gaussian does not.** In each fold, the part of ``M``'s held-out prediction
   that the Gaussian's does not contain, ``q = p_M − (<p_M, p_G>/|p_G|²) p_G``, is correlated with
   the held-out data: ``T = Σ_F <y, q>``. Were ``q`` unrelated to the held-out run (``M`` fitted
   the training runs' noise where the Gaussian did not), ``T`` would be centred on zero with the
   variance of a cross-product of two autocorrelated series (Bartlett's formula,
   :func:`~prfmap.participant.crossval.null_variance`, of the data less their Gaussian prediction and
   ``q``), so ``z = T / sd`` is about N(0, 1): the same autocorrelation-corrected test as the
   reproducibility flag. ``M`` passes where ``z`` exceeds the one-sided limit of
   :data:`ALPHA`, Bonferroni-corrected over the models compared with the Gaussian.
2. **It predicts better.** ``cvr2_M > cvr2_G`` (``Δcvr2 > 0``).
3. **It is identifiable** on the fit of all runs (:func:`identifiable`): what makes it more than a
   Gaussian was estimated, not assumed — a DoG's surround and a DN model's normalisation pool have
   not vanished and their weight's 95 % interval excludes zero; a CSS exponent's interval stays
   below :data:`CSS_GAUSSIAN_N`; and the fit was not rejected.

Among the models that pass, a simpler one is not given up for a richer one without evidence: the
passing models are taken from the fewest free parameters to the most (CSS, DoG, DN), the first
becomes the unit's winner, and a later one replaces it only where it predicts what the winner does
not (the test of 1 with the winner in the Gaussian's place, at the same limit) and its cvr2 is
higher. A DN fit, whose normalisation can compress as a CSS exponent does, thus takes a unit from
CSS only where it predicts more than the compression. A unit where none passes keeps the Gaussian.
With one run (no held-out data) there is no comparison.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import norm

from prfmap.engine import FitResult, catalog
from prfmap.participant.crossval import CrossValidation, null_variance
from prfmap.participant.fit import FitOutcome

ALPHA = 0.05
"""Error rate, per unit, of declaring a model other than the Gaussian the winner where it predicts
nothing the Gaussian does not (Bonferroni over the models compared with the Gaussian)."""
CSS_GAUSSIAN_N = 0.95
"""A CSS fit whose exponent's 95 % interval reaches this value does not tell itself from a Gaussian
(an exponent of 1)."""
logger = logging.getLogger(__name__)

DEFINITION = (
    "per unit, the model that predicts the held-out runs best among those that beat the Gaussian: "
    "each model is cross-validated on the same leave-one-run-out folds (each fold fitted from its "
    "training runs alone); a model other than the Gaussian wins where (1) the part of its held-out "
    "prediction the Gaussian's does not contain correlates with the held-out data (z of the summed "
    "cross-product over the folds, its variance by Bartlett's formula for autocorrelated series, "
    "above the one-sided limit of alpha / (models - 1)), (2) its cvr2 exceeds the Gaussian's, and "
    "(3) it is identifiable in the fit of all runs (a DoG surround or DN normalisation pool whose "
    "weight's 95 % interval excludes 0; a CSS exponent whose 95 % interval stays below "
    f"{CSS_GAUSSIAN_N}); among the models that pass, taken from the fewest free parameters to the "
    "most, a richer model replaces the simpler winner only where it passes (1) against it and its "
    "cvr2 is higher; elsewhere the Gaussian"
)
"""The definition written in the comparison's sidecars and the report."""


@dataclass(frozen=True)
class ModelComparison:
    """The per-unit comparison of the models of one fit.

    Attributes
    ----------
    models : tuple of str
        The models compared, the Gaussian first.
    winner : ndarray, shape (units,)
        The winning model's code (:func:`model_code`), NaN where the Gaussian has no cvr2.
    cvr2 : ndarray, shape (units,)
        The winner's cvr2.
    delta_cvr2 : ndarray, shape (units,)
        The winner's cvr2 less the Gaussian's (0 where the Gaussian wins).
    z : dict
        Model → (units,) z of the test that it predicts what the Gaussian does not (not the Gaussian).
    delta : dict
        Model → (units,) its cvr2 less the Gaussian's (not the Gaussian).
    identifiable : dict
        Model → (units,) bool: what makes it more than a Gaussian was estimated (not the Gaussian).
    z_limit : float
        The limit ``z`` must exceed.
    """

    models: tuple[str, ...]
    winner: np.ndarray
    cvr2: np.ndarray
    delta_cvr2: np.ndarray
    z: dict[str, np.ndarray]
    delta: dict[str, np.ndarray]
    identifiable: dict[str, np.ndarray]
    z_limit: float

    def winner_z(self) -> np.ndarray:
        """The winner's ``z`` against the Gaussian per unit.

        Returns
        -------
        ndarray, shape (units,)
            NaN where the Gaussian wins.
        """
        out = np.full(self.winner.shape, np.nan)
        for model, z in self.z.items():
            here = self.winner == model_code(model)
            out[here] = z[here]
        return out

    def shares(self) -> dict[str, float]:
        """The fraction of the compared units each model wins.

        Returns
        -------
        dict
            Model → share of the units with a winner.
        """
        compared = np.isfinite(self.winner)
        total = max(int(compared.sum()), 1)
        return {m: float((self.winner == model_code(m)).sum() / total) for m in self.models}

    def levels(self) -> dict[str, str]:
        """The winner map's codes and the models they name (a BIDS sidecar's ``Levels``).

        Returns
        -------
        dict
            Code (a string) → model.
        """
        return {str(model_code(m)): m for m in self.models}


def model_code(model: str) -> int:
    """The integer a model has in ``winner`` maps: its place in the catalogue (gauss 0, css 1, dog 2, dn 3).

    Parameters
    ----------
    model : str
        A model of :data:`prfmap.engine.catalog.MODELS`.

    Returns
    -------
    int
    """
    return list(catalog.MODELS).index(model)


def free_parameters(model: str) -> int:
    """The number of parameters a model fits (its reported ones less those it holds fixed).

    Parameters
    ----------
    model : str
        A catalogue model.

    Returns
    -------
    int
    """
    spec = catalog.get_model_spec(model)
    return len(spec.parameters) - len(spec.fixed)


def z_limit(n_models: int, alpha: float = ALPHA) -> float:
    """The one-sided limit of a model's ``z``, Bonferroni over the ``n_models - 1`` alternatives.

    Parameters
    ----------
    n_models : int
        Models compared, the Gaussian included.
    alpha : float
        Error rate per unit.

    Returns
    -------
    float
    """
    return float(norm.isf(alpha / max(n_models - 1, 1)))


def added_prediction_z(
    gauss: CrossValidation, other: CrossValidation, folds: Sequence[int] | None = None
) -> np.ndarray:
    """``z`` of the test that ``other``'s held-out predictions add to the Gaussian's (module docstring).

    Parameters
    ----------
    gauss, other : CrossValidation
        The two models' cross-validations, on the same folds, with their held-out series
        (``CrossValidation.held_out``).
    folds : sequence of int, optional
        The folds summed (default all).

    Returns
    -------
    ndarray, shape (units,)
        NaN where the Gaussian's prediction or the data are not finite in any fold.
    """
    if gauss.held_out is None or other.held_out is None:
        raise ValueError(
            "the comparison needs each fold's held-out series (cross_validate(keep_held_out=True))"
        )
    chosen = range(len(gauss.folds)) if folds is None else folds
    n_units = gauss.cvr2.shape[0]
    total, variance = np.zeros(n_units), np.zeros(n_units)
    for f in chosen:
        y, p_gauss = (np.asarray(a, dtype=np.float64) for a in gauss.held_out[f])
        p_other = np.asarray(other.held_out[f][1], dtype=np.float64)
        pp = np.sum(p_gauss * p_gauss, axis=1)
        safe = np.where(pp > 0, pp, 1.0)
        q = p_other - (np.sum(p_other * p_gauss, axis=1) / safe)[:, None] * p_gauss
        r = y - (np.sum(y * p_gauss, axis=1) / safe)[:, None] * p_gauss
        total += np.sum(r * q, axis=1)
        variance += null_variance(r, q)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = np.where(variance > 0, total / np.sqrt(variance), 0.0)
    return np.where(np.isfinite(gauss.cvr2) & np.isfinite(other.cvr2), z, np.nan)


def identifiable(result: FitResult) -> np.ndarray:
    """Units where what makes the fit's model more than a Gaussian was estimated (module docstring).

    Parameters
    ----------
    result : FitResult
        A fit of all runs, with its standard errors where it has them.

    Returns
    -------
    ndarray of bool, shape (units,)
        All True for the Gaussian.
    """
    params = {k: np.asarray(v, dtype=np.float64) for k, v in result.params.items()}
    n = len(params["x"])
    if result.model == "gauss":
        return np.ones(n, dtype=bool)
    ok = np.isfinite(params["x"])
    if result.status is not None:
        bad = sum(catalog.STATUS_BITS[b] for b in ("no_signal", "refinement_rejected", "surround_vanished"))
        ok &= (catalog.status_codes(result.status) & bad) == 0
    se = result.uncertainty.se if result.uncertainty is not None else {}
    upper = result.uncertainty.upper if result.uncertainty is not None else {}
    with np.errstate(invalid="ignore"):
        if "n" in params:
            ok &= np.nan_to_num(upper.get("n", params["n"]), nan=1.0) < CSS_GAUSSIAN_N
        for weight in ("amplitude_surround", "amplitude_norm"):
            if weight in params:
                spread = se.get(weight, np.zeros(n))
                ok &= np.nan_to_num(params[weight] - catalog.Z95 * spread, nan=-1.0) > 0
    return ok


def compare_models(
    results: Mapping[str, FitResult],
    validations: Mapping[str, CrossValidation],
    *,
    alpha: float = ALPHA,
    folds: Sequence[int] | None = None,
) -> ModelComparison:
    """The winner of every unit among the fits of the same data (module docstring).

    Parameters
    ----------
    results : mapping
        Model → its fit of all runs; the Gaussian among them.
    validations : mapping
        Model → its cross-validation, all on the same folds, with the held-out series kept.
    alpha : float
        Error rate per unit (:data:`ALPHA`).
    folds : sequence of int, optional
        Compare on these folds only (default all): e.g. the fold of one held-out run.

    Returns
    -------
    ModelComparison
    """
    if "gauss" not in results:
        raise ValueError("a comparison of models needs the Gaussian among them")
    models = tuple(m for m in catalog.MODELS if m in results)
    cvr2 = {m: _cvr2(validations[m], folds) for m in models}
    limit = z_limit(len(models), alpha)
    best = cvr2["gauss"].copy()
    winner = np.where(np.isfinite(best), float(model_code("gauss")), np.nan)
    z, delta, known = {}, {}, {}
    by_size = sorted(models[1:], key=lambda m: (free_parameters(m), models.index(m)))
    for i, m in enumerate(by_size):
        z[m] = added_prediction_z(validations["gauss"], validations[m], folds)
        delta[m] = cvr2[m] - cvr2["gauss"]
        known[m] = identifiable(results[m])
        with np.errstate(invalid="ignore"):
            wins = (z[m] > limit) & (delta[m] > 0) & known[m] & (cvr2[m] > best)
        for simpler in by_size[:i]:  # a richer model must also predict what a simpler winner does not
            held = winner == model_code(simpler)
            if held.any():
                beyond = added_prediction_z(validations[simpler], validations[m], folds)
                with np.errstate(invalid="ignore"):
                    wins &= ~held | (beyond > limit)
        best = np.where(wins, cvr2[m], best)
        winner = np.where(wins, float(model_code(m)), winner)
    return ModelComparison(
        models,
        winner,
        best,
        np.where(np.isfinite(best), best - cvr2["gauss"], np.nan),
        z,
        delta,
        known,
        limit,
    )


def _cvr2(cv: CrossValidation, folds: Sequence[int] | None) -> np.ndarray:
    return cv.cvr2 if folds is None else cv.fold_cvr2(folds)


@dataclass(frozen=True)
class ComparedFit:
    """The models of one plan and their comparison.

    Attributes
    ----------
    outcomes : tuple of FitOutcome
        Each model's fit, the Gaussian first.
    comparison : ModelComparison
        The per-unit winners.
    """

    outcomes: tuple[FitOutcome, ...]
    comparison: ModelComparison

    @property
    def gauss(self) -> FitOutcome:
        """The Gaussian's fit."""
        return self.outcomes[0]


def compare_outcomes(outcomes: Sequence[FitOutcome]) -> ComparedFit | None:
    """The comparison of a plan's models; None with one model or without cross-validation.

    Parameters
    ----------
    outcomes : sequence of FitOutcome
        :func:`prfmap.participant.fit.fit_models`'s, the Gaussian first.

    Returns
    -------
    ComparedFit or None
    """
    if len(outcomes) < 2 or any(o.cv is None for o in outcomes):
        return None
    results = {o.result.model: o.result for o in outcomes}
    validations = {o.result.model: o.cv for o in outcomes if o.cv is not None}
    comparison = compare_models(results, validations)
    return ComparedFit(tuple(outcomes), comparison)


def log_comparison(name: str, compared: ComparedFit) -> None:
    """Log the shares of the units each model wins, and each model's median cvr2 gain where it wins.

    Parameters
    ----------
    name : str
        The plan's name.
    compared : ComparedFit
        Its comparison.
    """
    comparison = compared.comparison
    parts = []
    for model, share in comparison.shares().items():
        won = comparison.winner == model_code(model)
        gain = (
            f", median Δcvr2 {np.median(comparison.delta_cvr2[won]):.3f}"
            if model != "gauss" and won.any()
            else ""
        )
        parts.append(f"{model} {100 * share:.1f} %{gain}")
    logger.info("%s: models compared on the held-out runs; winners: %s", name, "; ".join(parts))
