"""The fit stage: the participant's HRF, the checkpointed engine fit and the cvr2 folds.

Its value is a :class:`FitOutcome`.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from prfmap.config import Config
from prfmap.engine import (
    HRF,
    BaseNoiseModel,
    FitOptions,
    FitResult,
    Stimulus,
    catalog,
)
from prfmap.participant.checkpoint import Checkpoints, fit_chunked
from prfmap.participant.crossval import (
    CrossValidation,
    Fold,
    HeldOutData,
    RunSet,
    cross_validate,
    engine_predictor,
    reproducible,
)
from prfmap.participant.load import LoadedFit, ProgressFn
from prfmap.participant.plan import checkpoint_dir, how_to_resume
from prfmap.participant.preprocess import CombinedData
from prfmap.runtime.memory import chunk_units, engine_mem_gb, seeded_chunk_units

if TYPE_CHECKING:
    from prfmap.engine import FitCache

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class FitOutcome:
    """A plan's data and the engine's result.

    Attributes
    ----------
    loaded : LoadedFit
        The data that were fitted.
    result : FitResult
        Parameters, r², settings, timings (and predictions when kept).
    seconds : float
        Time spent fitting.
    warnings : tuple of str
        What the report should tell the user.
    cv : CrossValidation or None
        The leave-one-run-out ``cvr2`` (None with one run or ``--no-cvr2``).
    checkpoints : tuple of Path
        The checkpoint folders of the fit and its folds (removed once the outputs are published).
    """

    loaded: LoadedFit
    result: FitResult
    seconds: float
    warnings: tuple[str, ...] = ()
    cv: CrossValidation | None = None
    checkpoints: tuple[Path, ...] = ()

    @property
    def timings(self) -> dict[str, float]:
        """Seconds per stage so far: ``load``, ``fit`` (and ``cross_validation``)."""
        timings = {"load": self.loaded.seconds, "fit": self.seconds}
        if self.cv is not None:
            timings["cross_validation"] = sum(self.cv.seconds)
        return timings

    def maps(self) -> dict[str, np.ndarray]:
        """Every map of the fit under its label, with ``cvr2`` when it was cross-validated.

        Returns
        -------
        dict
            File label → (units,) values.
        """
        maps = self.result.maps()
        label = catalog.PARAMETERS["status"].label
        if self.cv is not None:
            maps[catalog.PARAMETERS["cvr2"].label] = self.cv.cvr2
            if label in maps:
                maps[label] = mark_not_reproducible(maps[label], self.cv.z)
        elif label in maps:
            maps[label] = mark_not_cross_validated(maps[label])
        return maps


def mark_not_cross_validated(status: np.ndarray) -> np.ndarray:
    """``status`` with the ``not_cross_validated`` bit on every fitted unit (a fit without cvr2).

    Parameters
    ----------
    status : ndarray, shape (units,)
        The fit's status map.

    Returns
    -------
    ndarray, shape (units,)
    """
    codes = catalog.status_codes(status)
    codes[(codes & catalog.STATUS_BITS["no_signal"]) == 0] |= catalog.STATUS_BITS["not_cross_validated"]
    return codes.astype(np.float64)


def mark_not_reproducible(status: np.ndarray, z: np.ndarray) -> np.ndarray:
    """``status`` with the ``not_reproducible`` bit set where the held-out correlation is not significant.

    Set on fitted units whose ``z`` (``CrossValidation.z``) fails
    :func:`prfmap.participant.crossval.reproducible`.

    Parameters
    ----------
    status : ndarray, shape (units,)
        The fit's status map.
    z : ndarray, shape (units,)
        ``CrossValidation.z``.

    Returns
    -------
    ndarray, shape (units,)
    """
    codes = catalog.status_codes(status)
    fitted = (codes & catalog.STATUS_BITS["no_signal"]) == 0
    z = np.where(fitted, z, np.nan)
    codes[fitted & ~reproducible(z)] |= catalog.STATUS_BITS["not_reproducible"]
    return codes.astype(np.float64)


@dataclass
class SharedWork:
    """What the fits of several models of the same data share, per fit and per fold.

    Keyed by the held-out run's name (None: the fit of all runs).

    Attributes
    ----------
    hrf : dict
        The participant HRF estimated for that data.
    noise : dict
        The noise model estimated for that data.
    gauss : dict
        The Gaussian fit of that data, which the other models seed from.
    keep_held_out : bool
        Keep the folds' held-out series (a comparison of models tests on them).
    held_out : dict
        Each held-out run's projected data and autocovariance, by its index (every model's
        cross-validation scores its predictions against the same).
    gauss_cv : CrossValidation or None
        The Gaussian's cross-validation: where another model's fold fit took the Gaussian's over, its
        scores are the Gaussian's.
    """

    hrf: dict[str | None, HRF] = dataclasses.field(default_factory=dict)
    noise: dict[str | None, BaseNoiseModel] = dataclasses.field(default_factory=dict)
    gauss: dict[str | None, FitResult] = dataclasses.field(default_factory=dict)
    keep_held_out: bool = False
    held_out: dict[int, HeldOutData] = dataclasses.field(default_factory=dict)
    gauss_cv: CrossValidation | None = None


def fit_models(loaded: LoadedFit, config: Config, progress: ProgressFn) -> list[FitOutcome]:
    """Fit every model of ``config`` (:attr:`Config.models`) to one plan's data, the Gaussian first.

    One loading, and per fit and per fold one participant HRF and one noise model, serve every model;
    the others seed from the Gaussian's fit of the same data (``FitOptions.gauss_start``). Each
    model's fit is what ``--model <model>`` alone would give but for its start.

    Parameters
    ----------
    loaded : LoadedFit
        The preprocessed data of a plan.
    config : Config
        The run's configuration.
    progress : callable
        ``progress(stage, done, total)``.

    Returns
    -------
    list of FitOutcome
        One per model, in :attr:`Config.models`'s order.
    """
    models = config.models
    if len(models) == 1:
        return [fit_loaded(loaded, config, progress)]
    shared = SharedWork(keep_held_out=True)
    outcomes = []
    for model in models:
        plan = dataclasses.replace(loaded.plan, key=dataclasses.replace(loaded.plan.key, model=model))
        mine = dataclasses.replace(loaded, plan=plan)
        outcomes.append(fit_loaded(mine, config.for_model(model), progress, shared=shared))
    return outcomes


def fit_loaded(
    loaded: LoadedFit, config: Config, progress: ProgressFn, shared: SharedWork | None = None
) -> FitOutcome:
    """Fit the combined data chunk by chunk, reusing the checkpoints of an interrupted run.

    Then, with two or more runs, the leave-one-run-out folds of ``cvr2`` the same way.

    Parameters
    ----------
    loaded : LoadedFit
        The preprocessed data of a plan.
    config : Config
        The run's configuration.
    progress : callable
        ``progress(stage, done, total)``.
    shared : SharedWork, optional
        What the fits of other models of the same data estimated (:func:`fit_models`).

    Returns
    -------
    FitOutcome
    """
    plan, combined = loaded.plan, loaded.combined
    stim = Stimulus(combined.design, fov_deg=loaded.fov_deg, run_lengths=combined.run_lengths)
    start = time.perf_counter()
    owned: list[Path] = []
    runs = FittedRuns(combined, stim, plan.name)
    result = _checkpointed_fit(loaded, config, runs, progress, owned=owned, shared=shared)
    seconds = time.perf_counter() - start
    r2 = np.asarray(result.r2)
    fitted = np.isfinite(np.asarray(result.params["x"]))
    outside = ~loaded.roi.units if loaded.roi is not None else np.zeros(fitted.shape, bool)
    n_bad = int((~fitted & ~outside).sum())
    warnings = loaded.warnings
    if n_bad:
        warnings += (
            f"{n_bad} of {fitted.size} units had no usable signal (NaN or constant: medial "
            "wall, outside the brain) and are NaN in the maps",
        )
    threshold = config.outputs.r2_threshold
    above = fitted & (np.nan_to_num(r2, nan=-np.inf) >= threshold)
    logger.info(
        "%s: fitted %d units in %.1f s; %d with r² ≥ %g (median r² of those %.3f)",
        plan.name,
        int(fitted.sum()),
        seconds,
        int(above.sum()),
        threshold,
        float(np.median(r2[above])) if above.any() else float("nan"),
    )
    cv = without_unfitted(cross_validate_fit(loaded, config, progress, owned=owned, shared=shared), result)
    return FitOutcome(loaded, result, seconds, warnings, cv, tuple(owned))


def without_unfitted(cv: CrossValidation | None, result: FitResult) -> CrossValidation | None:
    """``cv`` with NaN ``cvr2``/``strict_cvr2``/``z`` where the fit has the ``no_signal`` status.

    Such units are NaN in every map (status bit 1); a fold fitted on fewer runs can still find a
    response there, which is not an estimate of the fit.

    Parameters
    ----------
    cv : CrossValidation or None
        :func:`cross_validate_fit`'s result.
    result : FitResult
        The fit of all runs.

    Returns
    -------
    CrossValidation or None
    """
    if cv is None or result.status is None:
        return cv
    unfitted = (catalog.status_codes(result.status) & catalog.STATUS_BITS["no_signal"]) != 0
    if not unfitted.any():
        return cv
    return dataclasses.replace(
        cv,
        **{name: np.where(unfitted, np.nan, getattr(cv, name)) for name in ("cvr2", "strict_cvr2", "z")},
    )


@dataclass(frozen=True)
class FittedRuns:
    """The runs one checkpointed fit fits: all of a plan's runs, or a fold's training runs.

    Attributes
    ----------
    data : CombinedData
        The combined runs.
    stim : Stimulus
        Their apertures.
    name : str
        The fit's name in the log.
    held_out_run : str, optional
        The run a fold leaves out (None: the fit of all runs, which keeps its predictions when asked
        and computes the standard errors; a fold's fit only predicts its held-out run).
    """

    data: CombinedData
    stim: Stimulus
    name: str
    held_out_run: str | None = None


def fit_options(loaded: LoadedFit, config: Config, runs: FittedRuns) -> FitOptions:
    """The engine options of a fit of ``runs``, before its participant HRF, noise model and seeds.

    Parameters
    ----------
    loaded : LoadedFit
        The preprocessed data of a plan (its slice timing).
    config : Config
        The run's configuration.
    runs : FittedRuns
        What is fitted.

    Returns
    -------
    FitOptions
    """
    whole = runs.held_out_run is None
    return FitOptions(
        **{
            **config.fit.engine_kwargs(),
            "slice_time_ref": loaded.slice_time.fraction,
            "mem_gb": engine_mem_gb(config.execution.mem_gb),
            "return_predictions": whole and config.outputs.keep_predictions,
            # two runs: each fold fits one run alone, and their standard errors give the test–retest check
            "uncertainty": whole or len(loaded.runs) == 2,
        }
    )


def _checkpointed_fit(
    loaded: LoadedFit,
    config: Config,
    runs: FittedRuns,
    progress: ProgressFn,
    *,
    owned: list[Path] | None = None,
    shared: SharedWork | None = None,
) -> FitResult:
    """``fit_chunked`` of combined runs with the configuration's fit options.

    The checkpoint folder is appended to ``owned``; ``shared`` holds (and receives) the HRF, noise
    model and Gaussian fit of the same data that other models' fits estimated.
    """
    # Deferred: the engine's compiled code (and Keras) loads when a fit needs it, not on import.
    from prfmap.engine import FitCache

    shared = shared if shared is not None else SharedWork()
    key, data, stim = runs.held_out_run, runs.data, runs.stim
    options = fit_options(loaded, config, runs)
    # the participant HRF's screen, the noise model's and the chunks build the same problem and grid
    # predictions; they go with this call (device memory: one fit's at a time)
    cache = FitCache()
    if options.hrf == "participant":
        if key not in shared.hrf:
            shared.hrf[key] = participant_hrf(loaded, runs, options, progress, cache)
        options = dataclasses.replace(options, hrf=shared.hrf[key])
    if catalog.get_noise_model(options.noise).implementation is not None:
        if key not in shared.noise:
            shared.noise[key] = participant_noise(loaded, runs, options, progress, cache)
        options = dataclasses.replace(options, noise=shared.noise[key])
    if options.model != "gauss":  # the priors on σ and the delay are measured for the Gaussian only
        options = dataclasses.replace(options, sigma_prior="none", delay_prior="none")
    chunk = chunk_units(config.execution.mem_gb, data.data.shape[1])
    gauss = shared.gauss.get(key)
    if gauss is not None and options.model != "gauss":
        # Deferred: the engine's compiled code (and Keras) loads when a fit needs it, not on import.
        from prfmap.engine import seeded_by_gaussian

        linear = ("x", "y", "sigma", "amplitude", "baseline", *catalog.HRF_PARAMETERS)
        start = {k: np.asarray(v) for k, v in gauss.params.items() if k in linear}
        start |= {"r2": np.asarray(gauss.r2), "loss": np.asarray(gauss.loss)}
        if options.return_predictions and gauss.predictions is not None:
            start["predictions"] = np.asarray(gauss.predictions)
        options = dataclasses.replace(options, gauss_start=start)
        seeded = int(np.sum(seeded_by_gaussian(start["r2"], config.fit.refine_r2_min)))
        chunk = seeded_chunk_units(chunk, data.data.shape[0], seeded)
    store = Checkpoints(
        folder=checkpoint_dir(config, loaded.plan.key.subject) / loaded.plan.name,
        chunk=chunk,
        inputs=tuple(loaded.inputs),
        name=runs.name,
        how_to_resume=how_to_resume(config),
        budget="auto" if config.execution.mem_gb_auto else None,
        labels={} if key is None else {"held_out_run": key},
        owned=owned,
    )
    result = fit_chunked(
        data.data,
        stim,
        loaded.tr,
        options,
        store,
        nuisance=data.nuisance,
        progress=progress,
        cache=cache,
    )
    if options.model == "gauss":
        shared.gauss[key] = result
    return result


def participant_hrf(
    loaded: LoadedFit,
    runs: FittedRuns,
    options: FitOptions,
    progress: ProgressFn,
    cache: FitCache | None = None,
) -> HRF:
    """The HRF of ``--hrf participant``, estimated once from all units of ``runs`` before the chunked fit.

    ``runs`` holds the combined runs of the fit, or of one cross-validation fold's training runs.

    Parameters
    ----------
    loaded : LoadedFit
        The fit (its TR).
    runs : FittedRuns
        The runs the HRF is estimated from (and the fit's name in the log).
    options : FitOptions
        The fit's options (``slice_time_ref``, ``mem_gb``).
    progress : callable
        ``progress(stage, done, total)``.
    cache : prfmap.engine.FitCache, optional
        The fit's problems and grid predictions, shared with its other estimates and its chunks.

    Returns
    -------
    HRF
        With the between-unit spread of the delay for the fit of all runs (its standard errors).
    """
    # Deferred: the engine's compiled code (and Keras) loads when a fit needs it, not on import.
    from prfmap.engine import estimate_hrf

    start = time.perf_counter()
    spread = options.uncertainty
    hrf = estimate_hrf(
        runs.data.data,
        runs.stim,
        loaded.tr,
        nuisance=runs.data.nuisance,
        slice_time_ref=options.slice_time_ref,
        mem_gb=options.mem_gb,
        progress=lambda stage, done, total: progress(f"HRF {stage}", done, total),
        spread=spread,
        cache=cache,
    )
    logger.info(
        "%s: participant HRF from %d units in %.1f s: peak delay %.2f s, dispersion %.2f "
        "(maximum at %.2f s; SPM's canonical: 6 s, 1, 5 s)%s",
        runs.name,
        hrf.units,
        time.perf_counter() - start,
        hrf.delay,
        hrf.dispersion,
        hrf.peak_s(),
        f", between-unit delay SD {hrf.delay_sd:.2f} s" if spread else "",
    )
    return hrf


def participant_noise(
    loaded: LoadedFit,
    runs: FittedRuns,
    options: FitOptions,
    progress: ProgressFn,
    cache: FitCache | None = None,
) -> BaseNoiseModel:
    """The noise model of ``--noise-model`` (``ar<p>``...), estimated once from ``runs`` before the fit.

    ``runs`` holds the combined runs of the fit, or of one cross-validation fold's training runs.

    Parameters
    ----------
    loaded : LoadedFit
        The fit (its TR).
    runs : FittedRuns
        The runs the noise is estimated from (and the fit's name in the log).
    options : FitOptions
        The fit's options (``noise``: the option; ``hrf``, ``slice_time_ref``, ``mem_gb``, ``seed``).
    progress : callable
        ``progress(stage, done, total)``.
    cache : prfmap.engine.FitCache, optional
        The fit's problems and grid predictions, shared with its other estimates and its chunks.

    Returns
    -------
    BaseNoiseModel
    """
    # Deferred: the engine's compiled code (and Keras) loads when a fit needs it, not on import.
    from prfmap.engine import estimate_noise

    start = time.perf_counter()
    noise = estimate_noise(
        runs.data.data,
        runs.stim,
        loaded.tr,
        options.noise,
        nuisance=runs.data.nuisance,
        hrf=options.hrf if isinstance(options.hrf, HRF) else "canonical",
        slice_time_ref=options.slice_time_ref,
        mem_gb=options.mem_gb,
        seed=options.seed,
        progress=lambda stage, done, total: progress(f"noise {stage}", done, total),
        cache=cache,
    )
    logger.info(
        "%s: %s noise model from %d units in %.1f s: coefficients %s",
        runs.name,
        noise.option,
        noise.units,
        time.perf_counter() - start,
        ", ".join(f"{float(c):.3f}" for c in noise.describe().get("coefficients", ())) or "none",
    )
    return noise


def cross_validate_fit(
    loaded: LoadedFit,
    config: Config,
    progress: ProgressFn,
    owned: list[Path] | None = None,
    shared: SharedWork | None = None,
) -> CrossValidation | None:
    """``cvr2`` of every unit (:mod:`prfmap.participant.crossval`).

    Each run predicted by a checkpointed fit of the others; None with fewer than two runs or ``--no-cvr2``.

    Parameters
    ----------
    loaded : LoadedFit
        The preprocessed data of a plan.
    config : Config
        The run's configuration.
    progress : callable
        ``progress(stage, done, total)``.
    owned : list of Path, optional
        The folds' checkpoint folders are appended to it.
    shared : SharedWork, optional
        What the folds of other models' fits estimated from the same training runs.

    Returns
    -------
    CrossValidation or None
    """
    plan = loaded.plan
    if not config.outputs.cvr2 or len(loaded.runs) < 2:
        if config.outputs.cvr2:
            logger.info("%s: one run, no cross-validated r² (cvr2 needs two or more runs)", plan.name)
        return None
    names = [run.name for run in plan.runs]

    def fit_fold(training: CombinedData, stim: Stimulus, fold: Fold) -> FitResult:
        name = f"{plan.name} fold {fold.held_out + 1}/{len(names)} (held out: {names[fold.held_out]})"
        runs = FittedRuns(training, stim, name, held_out_run=names[fold.held_out])
        return _checkpointed_fit(loaded, config, runs, progress, owned=owned, shared=shared)

    cv = cross_validate(
        RunSet(loaded.runs, [run.stimulus_key for run in plan.runs], loaded.designs, fov_deg=loaded.fov_deg),
        fit=fit_fold,
        predict=engine_predictor(loaded.tr, config.fit.model, slice_time_ref=loaded.slice_time.fraction),
        keep_held_out=shared is not None and shared.keep_held_out,
        held_out_data=shared.held_out if shared is not None else None,
        gaussian=shared.gauss_cv if shared is not None and config.fit.model != "gauss" else None,
    )
    if shared is not None and config.fit.model == "gauss":
        shared.gauss_cv = cv
    logger.info(
        "%s: cvr2 from %d leave-one-run-out folds in %.1f s, median %.3f",
        plan.name,
        len(cv.folds),
        sum(cv.seconds),
        float(np.nanmedian(cv.cvr2)) if np.isfinite(cv.cvr2).any() else float("nan"),
    )
    return cv
