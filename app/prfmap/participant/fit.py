"""The fit stage: the participant's HRF, the checkpointed engine fit and the cvr2 folds.

Its value is a :class:`FitOutcome`.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from prfmap.config import Config
from prfmap.engine import HRF, FitResult, Stimulus, catalog, estimate_hrf
from prfmap.participant.checkpoint import fit_chunked
from prfmap.participant.crossval import (
    CrossValidation,
    Fold,
    cross_validate,
    engine_predictor,
    reproducible,
)
from prfmap.participant.load import LoadedFit, ProgressFn
from prfmap.participant.plan import checkpoint_dir, how_to_resume
from prfmap.participant.preprocess import CombinedData
from prfmap.runtime.memory import chunk_units, engine_mem_gb

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
    """

    loaded: LoadedFit
    result: FitResult
    seconds: float
    warnings: tuple[str, ...] = ()
    cv: CrossValidation | None = None

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
        if self.cv is not None:
            maps[catalog.PARAMETERS["cvr2"].label] = self.cv.cvr2
            status = maps.get(catalog.PARAMETERS["status"].label)
            if status is not None:
                maps[catalog.PARAMETERS["status"].label] = mark_not_reproducible(status, self.cv.z)
        return maps


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


def fit_loaded(loaded: LoadedFit, config: Config, progress: ProgressFn) -> FitOutcome:
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

    Returns
    -------
    FitOutcome
    """
    plan, combined = loaded.plan, loaded.combined
    stim = Stimulus(combined.design, fov_deg=loaded.fov_deg, run_lengths=combined.run_lengths)
    keep = config.outputs.keep_predictions
    start = time.perf_counter()
    result = _checkpointed_fit(loaded, config, combined, stim, plan.name, progress, keep=keep)
    seconds = time.perf_counter() - start
    r2 = np.asarray(result.r2)
    fitted = np.isfinite(np.asarray(result.params["x"]))
    n_bad = int((~fitted).sum())
    warnings = loaded.warnings
    if n_bad:
        warnings += (
            f"{n_bad} of {fitted.size} units had no usable signal (NaN or constant: medial "
            "wall, outside the brain) and are NaN in the maps",
        )
    logger.info(
        "%s: fitted %d units in %.1f s, median r² %.3f",
        plan.name,
        int(fitted.sum()),
        seconds,
        float(np.nanmedian(r2[fitted])) if fitted.any() else float("nan"),
    )
    return FitOutcome(loaded, result, seconds, warnings, cross_validate_fit(loaded, config, progress))


def _checkpointed_fit(
    loaded: LoadedFit,
    config: Config,
    data: CombinedData,
    stim: Stimulus,
    name: str,
    progress: ProgressFn,
    *,
    keep: bool,
    **identity: Any,
) -> FitResult:
    """``fit_chunked`` of combined runs with the configuration's fit options.

    ``identity`` adds what else tells this fit's checkpoints apart (a fold's held-out run).
    """
    execution = config.execution
    fit_kwargs = {
        **config.fit.engine_kwargs(),
        "slice_time_ref": loaded.slice_time.fraction,
        "nuisance": data.nuisance,
        "mem_gb": engine_mem_gb(execution.mem_gb),
        "return_predictions": keep,
    }
    settings = {
        **config.to_dict()["fit"],
        "slice_time_ref": loaded.slice_time.fraction,
        "return_predictions": keep,
        **identity,
    }
    if fit_kwargs["hrf"] == "participant":
        hrf = participant_hrf(loaded, data, stim, fit_kwargs, name, progress)
        fit_kwargs["hrf"], settings["hrf_model"] = hrf, hrf.describe()
    return fit_chunked(
        data.data,
        stim,
        loaded.tr,
        folder=checkpoint_dir(config, loaded.plan.key.subject) / loaded.plan.name,
        chunk=chunk_units(execution.mem_gb, data.data.shape[1]),
        fit_kwargs=fit_kwargs,
        settings=settings,
        inputs=loaded.inputs,
        name=name,
        how_to_resume=how_to_resume(config),
        progress=progress,
        budget="auto" if execution.mem_gb_auto else None,
    )


def participant_hrf(
    loaded: LoadedFit,
    data: CombinedData,
    stim: Stimulus,
    fit_kwargs: dict[str, Any],
    name: str,
    progress: ProgressFn,
) -> HRF:
    """The HRF of ``--hrf participant``, estimated once from all units of ``data`` before the chunked fit.

    ``data`` holds the combined runs of the fit, or of one cross-validation fold's training runs.

    Parameters
    ----------
    loaded : LoadedFit
        The fit (its TR and name in the log).
    data : CombinedData
        The runs the HRF is estimated from.
    stim : Stimulus
        Their apertures.
    fit_kwargs : dict
        The fit's keywords (``slice_time_ref``, ``mem_gb``).
    name : str
        The fit's name in the log.
    progress : callable
        ``progress(stage, done, total)``.

    Returns
    -------
    HRF
    """
    start = time.perf_counter()
    hrf = estimate_hrf(
        data.data,
        stim,
        loaded.tr,
        nuisance=data.nuisance,
        slice_time_ref=fit_kwargs["slice_time_ref"],
        mem_gb=fit_kwargs["mem_gb"],
        progress=lambda stage, done, total: progress(f"HRF {stage}", done, total),
    )
    logger.info(
        "%s: participant HRF from %d units in %.1f s: peak delay %.2f s, dispersion %.2f "
        "(maximum at %.2f s; SPM's canonical: 6 s, 1, 5 s)",
        name,
        hrf.units,
        time.perf_counter() - start,
        hrf.delay,
        hrf.dispersion,
        hrf.peak_s(),
    )
    return hrf


def cross_validate_fit(loaded: LoadedFit, config: Config, progress: ProgressFn) -> CrossValidation | None:
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
        return _checkpointed_fit(
            loaded, config, training, stim, name, progress, keep=False, held_out_run=names[fold.held_out]
        )

    cv = cross_validate(
        loaded.runs,
        [run.stimulus_key for run in plan.runs],
        loaded.designs,
        fov_deg=loaded.fov_deg,
        fit=fit_fold,
        predict=engine_predictor(loaded.tr, config.fit.model, slice_time_ref=loaded.slice_time.fraction),
    )
    logger.info(
        "%s: cvr2 from %d leave-one-run-out folds in %.1f s, median %.3f",
        plan.name,
        len(cv.folds),
        sum(cv.seconds),
        float(np.nanmedian(cv.cvr2)) if np.isfinite(cv.cvr2).any() else float("nan"),
    )
    return cv
