"""Cross-validated variance explained (``cvr2``): leave one run out, fit the others, predict it.

Folds: with ``R >= 2`` runs, fold ``i`` holds out run ``i`` and fits the other runs combined as the
main fit combines them (runs with the same aperture averaged, different apertures concatenated), so
runs with the same aperture are left out one at a time and a run with its own aperture is predicted
from a fit of the others. The fit's parameters (amplitude included) predict the held-out run from
its own aperture.

Definition, per unit: run ``i``'s data ``y_i`` and the prediction ``p_i`` are both projected onto the
complement of that run's nuisance subspace (a constant, its DCT high-pass basis and confounds,
exactly what its preprocessing removed), then over the folds ``F`` where both are finite

    c    = Σ_F <y_i, p_i> / sqrt(Σ_F |y_i|² · Σ_F |p_i|²)
    cvr2 = sign(c) · c²

that is the fraction of the held-out runs' variance that the fold predictions explain with one gain
fitted over all held-out data (and negative when they anti-correlate). One gain, not one per fold,
keeps a single number fitted to held-out data; fitting it at all makes cvr2 measure what the pRF
parameters predict, the shape and timing of the response, not a run's overall gain (attention,
scanner drift, a run of pure noise gets cvr2 ≈ 0 rather than an arbitrarily negative value), and
the same measure the issue-10 comparisons use (fitted time courses correlated with a held-out
run). ``strict_cvr2`` (no gain: ``1 - Σ|y_i - p_i|² / Σ|y_i|²``) is returned alongside, for
validation.

Use (the workflow passes checkpointed fits; any fit and predictor work)::

    from prfmap.participant.crossval import RunSet, cross_validate, engine_predictor
    cv = cross_validate(RunSet(runs, keys, designs, fov_deg=20.0),
                        fit=lambda train, stim, fold: fit_prf(train.data, stim, tr,
                                                              nuisance=train.nuisance, **kwargs),
                        predict=engine_predictor(tr, model="gauss", slice_time_ref=0.5))
    cv.cvr2        # (units,)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.fft
from scipy.linalg import orth
from scipy.stats import norm

from prfmap.engine import HRF, FitResult, Stimulus, catalog
from prfmap.participant.preprocess import CombinedData, PreprocessedRun, combine_runs
from prfmap.participant.retest import FoldEstimate, retest_consistency

DEFINITION = (
    "cross-validated variance explained: with R >= 2 runs, fold i fits all runs but run i (same "
    "aperture averaged, different apertures concatenated) and predicts run i from its aperture; "
    "data and prediction are projected onto the complement of run i's nuisance subspace (constant, "
    "DCT high-pass, confounds); over the folds c = sum <y_i, p_i> / sqrt(sum |y_i|^2 * sum |p_i|^2) "
    "and cvr2 = sign(c) * c^2: the fraction of the held-out runs' variance the fold predictions "
    "explain with one gain fitted over all held-out runs (negative when they anti-correlate)"
)
"""The definition written in every ``cvr2`` sidecar and in the README."""
PREDICT_CHUNK = 1024
FAMILY_ALPHA = 0.05
"""Family-wise error of the ``not_reproducible`` status flag over a fit's units (:func:`reproducible`)."""


@dataclass(frozen=True)
class Fold:
    """One fold: the run held out and the runs fitted (indices into the runs given)."""

    held_out: int
    training: tuple[int, ...]


FitFn = Callable[[CombinedData, Stimulus, Fold], FitResult]
PredictFn = Callable[..., np.ndarray]
"""``predict(result, stimulus) -> (units, frames)``; with ``rows=`` (a compared model's units not
kept Gaussian) only those units, NaN elsewhere."""


@dataclass
class CrossValidation:
    """The cross-validated variance explained of every unit.

    Attributes
    ----------
    cvr2 : ndarray
        (units,) signed squared correlation over all held-out runs (see the module docstring);
        NaN where no fold had finite data and prediction.
    strict_cvr2 : ndarray
        (units,) ``1 - Σ|y - p|² / Σ|y|²`` over the same folds, without a gain.
    z : ndarray
        (units,) ``Σ<y_i, p_i>`` over its standard deviation were the held-out data unrelated to
        the predictions, both autocorrelated (Bartlett's variance of a cross-correlation:
        ``Σ_k A_y(k) A_p(k)``, the autocovariance sums of data and prediction, Tukey-tapered over
        a quarter of the run): about N(0, 1) without a pRF. NaN where cvr2 is.
    folds : list of Fold
        The folds, in order.
    seconds : list of float
        Seconds per fold (fit and prediction).
    fold_sums : ndarray, shape (folds, 5, units), optional
        Each fold's sums of the scores (``<y,p>``, ``|y|²``, ``|p|²``, ``|y-p|²``, null variance).
    retest : dict, optional
        With two runs (two independent single-run fits), the test–retest consistency of their
        standard errors (:func:`prfmap.participant.retest.retest_consistency`).
    held_out : list of (ndarray, ndarray), optional
        Each fold's projected held-out data and prediction, float32 (units, frames), where
        :func:`cross_validate` was asked to keep them (a comparison of models tests on them).
    """

    cvr2: np.ndarray
    strict_cvr2: np.ndarray
    z: np.ndarray
    folds: list[Fold]
    seconds: list[float] = field(default_factory=list)
    fold_sums: np.ndarray | None = None
    held_out: list[tuple[np.ndarray, np.ndarray]] | None = None
    retest: dict[str, Any] | None = None

    def fold_cvr2(self, folds: Sequence[int]) -> np.ndarray:
        """``cvr2`` over some of the folds only, e.g. one held-out run's.

        Parameters
        ----------
        folds : sequence of int
            Indices into :attr:`folds`.

        Returns
        -------
        ndarray, shape (units,)
        """
        if self.fold_sums is None:
            raise ValueError("this cross-validation kept no per-fold sums")
        cvr2 = _scores(self.fold_sums[list(folds)].sum(axis=0))[0]
        return np.where(np.isfinite(self.cvr2), cvr2, np.nan)


def reproducible(z: np.ndarray, alpha: float = FAMILY_ALPHA) -> np.ndarray:
    """Units whose held-out correlation is significant.

    ``z`` above the one-sided Bonferroni limit ``Φ⁻¹(1 − alpha / n)`` over the ``n`` units with a finite
    ``z``.

    Parameters
    ----------
    z : ndarray, shape (units,)
        ``CrossValidation.z``.
    alpha : float
        Family-wise error.

    Returns
    -------
    ndarray of bool
    """
    finite = np.isfinite(z)
    limit = norm.isf(alpha / max(int(finite.sum()), 1))
    return finite & (np.where(finite, z, -np.inf) >= limit)


def leave_one_run_out(n_runs: int) -> list[Fold]:
    """Fold ``i`` holds out run ``i`` and fits the others; none for fewer than two runs.

    Parameters
    ----------
    n_runs : int
        Runs of the fit.

    Returns
    -------
    list of Fold
    """
    if n_runs < 2:
        return []
    return [Fold(i, tuple(j for j in range(n_runs) if j != i)) for i in range(n_runs)]


def held_out_projection(run: PreprocessedRun) -> np.ndarray:
    """Orthonormal (frames, k) basis of a run's nuisance subspace: a constant and its regressors.

    Parameters
    ----------
    run : PreprocessedRun
        The held-out run.

    Returns
    -------
    ndarray, shape (frames, k)
    """
    n = run.data.shape[1]
    return orth(np.column_stack([np.ones(n), run.nuisance]))


def _project(values: np.ndarray, basis: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values - (values @ basis) @ basis.T


@dataclass(frozen=True)
class HeldOutData:
    """A held-out run's data as every model's fold scores it: what does not depend on the prediction.

    Attributes
    ----------
    y : ndarray, shape (units, frames)
        The run's data projected off its nuisance subspace (:func:`held_out_projection`); 0 in the
        rows that are not finite.
    autocovariance : ndarray, shape (units, lags)
        Their autocovariance sums (:func:`autocovariance`).
    """

    y: np.ndarray
    autocovariance: np.ndarray

    @classmethod
    def of(cls, run: PreprocessedRun) -> HeldOutData:
        """The projected data of ``run`` and their autocovariance.

        Parameters
        ----------
        run : PreprocessedRun
            The held-out run.

        Returns
        -------
        HeldOutData
        """
        finite = np.isfinite(run.data).all(axis=1)
        y = _project(np.where(finite[:, None], np.nan_to_num(run.data), 0.0), held_out_projection(run))
        return cls(y, autocovariance(y))


@dataclass(frozen=True)
class RunSet:
    """The runs of a fit with their apertures: what the folds of :func:`cross_validate` split.

    Attributes
    ----------
    runs : sequence of PreprocessedRun
        Every run of the fit, preprocessed (same units), in order.
    stimulus_keys : sequence of str
        One per run; equal keys saw the same aperture (``RunInput.stimulus_key``).
    designs : mapping
        Key → (frames, rows, cols) aperture.
    fov_deg : float
        Width of the aperture grid, degrees.
    """

    runs: Sequence[PreprocessedRun]
    stimulus_keys: Sequence[str]
    designs: Mapping[str, np.ndarray]
    fov_deg: float = field(kw_only=True)

    def training(self, fold: Fold) -> tuple[CombinedData, Stimulus]:
        """The training runs of ``fold`` combined as the main fit combines them, and their stimulus.

        Parameters
        ----------
        fold : Fold
            The fold.

        Returns
        -------
        CombinedData
            Runs with the same aperture averaged, different apertures concatenated.
        Stimulus
            Their aperture, with the length of each concatenated run.
        """
        combined = combine_runs(
            [self.runs[i] for i in fold.training],
            [self.stimulus_keys[i] for i in fold.training],
            self.designs,
        )
        return combined, Stimulus(combined.design, fov_deg=self.fov_deg, run_lengths=combined.run_lengths)

    def held_out(self, fold: Fold) -> tuple[PreprocessedRun, Stimulus]:
        """The run ``fold`` holds out and the stimulus of its own aperture.

        Parameters
        ----------
        fold : Fold
            The fold.

        Returns
        -------
        PreprocessedRun
            The held-out run.
        Stimulus
            Its aperture.
        """
        design = self.designs[self.stimulus_keys[fold.held_out]]
        return self.runs[fold.held_out], Stimulus(design, fov_deg=self.fov_deg)


def cross_validate(
    runs: RunSet,
    *,
    fit: FitFn,
    predict: PredictFn,
    keep_held_out: bool = False,
    held_out_data: dict[int, HeldOutData] | None = None,
    gaussian: CrossValidation | None = None,
) -> CrossValidation:
    """Leave-one-run-out ``cvr2`` of every unit.

    Parameters
    ----------
    runs : RunSet
        Every run of the fit with its aperture.
    fit : callable
        ``fit(training, stimulus, fold) -> FitResult``: fits the combined training runs (e.g.
        :func:`prfmap.engine.fit_prf` with ``nuisance=training.nuisance``, or the workflow's
        checkpointed fit).
    predict : callable
        ``predict(result, stimulus) -> (units, frames)``: the fold fit's time courses for a
        held-out aperture (:func:`engine_predictor`).
    keep_held_out : bool
        Keep each fold's projected held-out data and prediction (``CrossValidation.held_out``).
    held_out_data : dict, optional
        Each held-out run's :class:`HeldOutData` by its index, filled as the folds need them: the
        cross-validations of several models of the same runs share one.
    gaussian : CrossValidation, optional
        The cross-validation, on the same folds and with its held-out series kept, of the Gaussian fits
        a compared model was seeded from: where a fold's fit took that Gaussian fit over (the
        :data:`~prfmap.engine.catalog.TOOK_GAUSSIAN` flag), its scores and held-out series are the
        Gaussian's, not predicted again.

    Returns
    -------
    CrossValidation
        Empty folds and NaN maps for fewer than two runs.
    """
    n_units = runs.runs[0].data.shape[0] if runs.runs else 0
    folds = leave_one_run_out(len(runs.runs))
    sums = np.zeros((len(folds), 5, n_units))  # <y,p>, |y|², |p|², |y-p|², null variance of <y,p>
    seconds: list[float] = []
    held_out: list[tuple[np.ndarray, np.ndarray]] = []
    held_out_data = {} if held_out_data is None else held_out_data
    estimates: list[FoldEstimate | None] = []
    for fold in folds:
        start = time.perf_counter()
        result = fit(*runs.training(fold), fold)
        if len(folds) == 2:
            estimates.append(FoldEstimate.of(result))
        held, held_stim = runs.held_out(fold)
        taken = _taken(result, gaussian)
        rows = None if taken is None else np.flatnonzero(~taken)
        prediction = predict(result, held_stim) if rows is None else predict(result, held_stim, rows=rows)
        if fold.held_out not in held_out_data:
            held_out_data[fold.held_out] = HeldOutData.of(held)
        y, p = _accumulate(sums[len(seconds)], held_out_data[fold.held_out], held, prediction)
        if taken is not None and gaussian is not None:
            _take_over(sums[len(seconds)], (y, p), gaussian, len(seconds), taken)
        if keep_held_out:
            held_out.append((y.astype(np.float32), p.astype(np.float32)))
        seconds.append(time.perf_counter() - start)
    kept = held_out if keep_held_out else None
    retest = None
    if len(estimates) == 2 and estimates[0] is not None and estimates[1] is not None:
        retest = retest_consistency(estimates[0], estimates[1])
    return CrossValidation(*_scores(sums.sum(axis=0)), folds, seconds, sums, kept, retest)


def _taken(result: FitResult, gaussian: CrossValidation | None) -> np.ndarray | None:
    """The units whose fold fit is the Gaussian's fit (None: none, or no Gaussian cross-validation)."""
    taken = result.flags.get(catalog.TOOK_GAUSSIAN)
    if gaussian is None or gaussian.fold_sums is None or gaussian.held_out is None or taken is None:
        return None
    taken = np.asarray(taken, dtype=bool)
    return taken if taken.any() else None


def _take_over(
    sums: np.ndarray,
    series: tuple[np.ndarray, np.ndarray],
    gaussian: CrossValidation,
    fold: int,
    taken: np.ndarray,
) -> None:
    """Give the units ``taken`` the Gaussian's scores and held-out series of ``fold``, in place."""
    assert gaussian.fold_sums is not None and gaussian.held_out is not None
    sums[:, taken] = gaussian.fold_sums[fold][:, taken]
    for mine, theirs in zip(series, gaussian.held_out[fold], strict=True):
        mine[taken] = theirs[taken]


def _accumulate(
    sums: np.ndarray, data: HeldOutData, held: PreprocessedRun, prediction: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Add a fold's scores to ``sums``; returns its projected data and prediction (0 where not finite)."""
    ok = np.isfinite(held.data).all(axis=1) & np.isfinite(prediction).all(axis=1)
    y = np.where(ok[:, None], data.y, 0.0)
    p = _project(np.where(ok[:, None], np.nan_to_num(prediction), 0.0), held_out_projection(held))
    sums[0, ok] += np.sum(y * p, axis=1)[ok]
    sums[1, ok] += np.sum(y * y, axis=1)[ok]
    sums[2, ok] += np.sum(p * p, axis=1)[ok]
    sums[3, ok] += np.sum((y - p) ** 2, axis=1)[ok]
    sums[4, ok] += bartlett_variance(data.autocovariance[ok], autocovariance(p[ok]), y.shape[1])
    return y, p


def null_variance(y: np.ndarray, p: np.ndarray) -> np.ndarray:
    """Variance of ``<y, p>`` (units,) were ``y`` and ``p`` independent stationary series (rows).

    The held-out data's own autocovariance is used as it is, response included: conservative
    where there is a response (its variance counts as noise), exact without one. Measured in
    docs/validation.md: the data less its fit by ``p`` gives more power, but lets through noise
    units that the r² threshold selected for resembling a response in every run.

    Bartlett's formula: ``Σ_k A_y(k) A_p(k) / N`` over lags ``|k| < N/4``, ``A`` the
    autocovariance sums, with a Tukey taper so that the estimate stays positive and stable.

    Parameters
    ----------
    y, p : ndarray, shape (units, frames)
        Projected held-out data and predictions.

    Returns
    -------
    ndarray, shape (units,)
    """
    return bartlett_variance(autocovariance(y), autocovariance(p), y.shape[1])


def autocovariance(x: np.ndarray) -> np.ndarray:
    """Autocovariance sums ``A(k) = Σ_t x_t x_{t+k}`` of each row (units, frames) at lags ``k < N/4``.

    Parameters
    ----------
    x : ndarray, shape (units, frames)
        Series, one per row.

    Returns
    -------
    ndarray, shape (units, max(frames // 4, 1))
    """
    n = x.shape[1]
    lags = max(n // 4, 1)
    size = scipy.fft.next_fast_len(n + lags, real=True)  # zero-padded past the lags: no wrap-around
    spectrum = scipy.fft.rfft(x, size, axis=1)
    return scipy.fft.irfft(spectrum.real**2 + spectrum.imag**2, size, axis=1)[:, :lags]


def bartlett_variance(a_y: np.ndarray, a_p: np.ndarray, n: int) -> np.ndarray:
    """:func:`null_variance` from the two series' :func:`autocovariance` and their length ``n``.

    Parameters
    ----------
    a_y, a_p : ndarray, shape (units, lags)
        The autocovariance sums of the data and of the predictions.
    n : int
        Frames.

    Returns
    -------
    ndarray, shape (units,)
    """
    lags = a_y.shape[1]
    taper = 0.5 * (1.0 + np.cos(np.pi * np.arange(lags) / lags))
    taper[1:] *= 2.0  # lags ±k
    return np.maximum(np.sum(taper * a_y * a_p, axis=1) / n, 0.0)


def _scores(sums: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    cross, yy, pp, residual, variance = sums
    valid = yy > 0
    with np.errstate(invalid="ignore", divide="ignore"):
        c = np.where(valid & (pp > 0), cross / np.sqrt(yy * pp), 0.0)
        strict = 1.0 - residual / yy
        z = np.where(variance > 0, cross / np.sqrt(variance), 0.0)
    cvr2 = np.where(valid, np.sign(c) * c**2, np.nan)
    return cvr2, np.where(valid, strict, np.nan), np.where(valid, z, np.nan)


def engine_predictor(
    tr: float, model: str, *, slice_time_ref: float = 0.5, chunk: int = PREDICT_CHUNK
) -> PredictFn:
    """A ``predict`` for :func:`cross_validate`.

    :func:`prfmap.engine.predict` on a fold fit's parameters and HRF (``settings.hrf_model``), ``chunk`` units
    at a time (the last chunk padded, so one compiled shape serves all); NaN rows where the fit has no finite
    parameters.

    Parameters
    ----------
    tr : float
        Repetition time, s.
    model : str
        The fitted model.
    slice_time_ref : float
        Where in each TR the volumes sample the signal.
    chunk : int
        Units per prediction.

    Returns
    -------
    callable
        ``predict(result, stimulus, rows=None) -> (units, frames)``: only the units ``rows`` where
        given (the others NaN).
    """
    # Deferred: the engine's compiled code (and Keras) loads when the first fold is predicted.
    from prfmap.engine import FitCache, predict

    def predict_fold(result: FitResult, stim: Stimulus, rows: np.ndarray | None = None) -> np.ndarray:
        params = {k: np.asarray(v, dtype=np.float64) for k, v in result.params.items()}
        hrf = HRF.from_record(result.settings.hrf_model if result.settings is not None else None)
        n = len(next(iter(params.values())))
        finite = np.all([np.isfinite(v) for v in params.values()], axis=0)
        wanted = np.arange(n) if rows is None else np.asarray(rows, dtype=np.int64)
        safe = {k: np.where(finite, v, _neutral(k))[wanted] for k, v in params.items()}
        out = np.full((n, stim.n_frames), np.nan)
        cache = FitCache()  # one problem for the chunks of this fold's prediction
        for start in range(0, wanted.size, chunk):
            stop = min(start + chunk, wanted.size)
            block = {k: _padded(v[start:stop], chunk, _neutral(k)) for k, v in safe.items()}
            values = predict(block, stim, tr, model, slice_time_ref=slice_time_ref, hrf=hrf, cache=cache)
            out[wanted[start:stop]] = values[: stop - start]
        out[~finite] = np.nan
        return out

    return predict_fold


def _neutral(key: str) -> float:
    """A valid stand-in for a parameter of a unit without a fit (its prediction is discarded)."""
    return catalog.PARAMETERS[key].neutral


def _padded(values: np.ndarray, size: int, fill: float) -> np.ndarray:
    if len(values) == size:
        return values
    return np.concatenate([values, np.full(size - len(values), fill)])
