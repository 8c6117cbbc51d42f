"""``predict``: BOLD time courses of given pRF parameters, through the fit's own model and HRF."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from keras import ops

from prfmap.engine import kernels
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import compiled
from prfmap.engine.hrf import CANONICAL, HRF
from prfmap.engine.models import PRFModel, floatx, get_model
from prfmap.engine.problem import FitCache, make_problem
from prfmap.engine.stimulus import Stimulus, StimulusTensors

__all__ = ["predict"]


def predict(
    params: Mapping[str, np.ndarray],
    stim: Stimulus,
    tr: float,
    model: str = "gauss",
    *,
    dtype: str = "float32",
    slice_time_ref: float = 0.5,
    hrf: HRF = CANONICAL,
    cache: FitCache | None = None,
) -> np.ndarray:
    """Predicted BOLD time courses (units, frames) for given pRF parameters.

    Parameters
    ----------
    params : dict
        Reported parameters (``x``, ``y``, ``sigma``, ``amplitude``, ``baseline`` and the model's extras),
        scalars or (units,) arrays; optional per-unit HRF weights ``hrf_deriv`` and ``hrf_disp``, and
        each unit's HRF peak delay ``hrf_delay`` (s; a fit under ``delay_prior``'s), over ``hrf``'s.
    stim : Stimulus
    tr : float
    model : str
        A model of :data:`prfmap.engine.catalog.MODELS`.
    dtype : {"float32", "float64"}
    slice_time_ref : float
    hrf : HRF
        The response (its derivatives weighted by ``hrf_deriv``, ``hrf_disp``); the fit's is
        ``HRF.from_record(result.settings.hrf_model)``.
    cache : FitCache, optional
        Keeps the stimulus and HRF tensors for the next prediction of the same ``stim`` (predictions
        of many units in batches).

    Returns
    -------
    ndarray, shape (units, frames)
    """
    prf_model = get_model(model)
    dtype = floatx(dtype)
    arrays = {k: np.atleast_1d(np.asarray(v, dtype=np.float64)) for k, v in params.items()}
    n = max(len(v) for v in arrays.values())
    arrays = {k: np.broadcast_to(v, (n,)) for k, v in arrays.items()}
    arrays.setdefault("amplitude", np.ones(n))
    theta = prf_model.from_report(arrays)
    weights = np.stack(
        [np.ones(n), arrays.get("hrf_deriv", np.zeros(n)), arrays.get("hrf_disp", np.zeros(n))], axis=1
    )
    weights *= arrays["amplitude"][:, None]
    build = make_problem if cache is None else cache.problem
    fn = compiled(_predict_tensor, prf_model)
    delay = arrays.get("hrf_delay", np.full(n, hrf.delay))
    delay = np.where(np.isfinite(delay), delay, hrf.delay)
    # each unit's own HRF delay (--delay-prior), else the HRF's: every delay's bases side by side, a
    # unit's weights on its own delay's (the neural responses computed once)
    delays, which = np.unique(delay, return_inverse=True)
    probs = [
        build(prf_model, stim, tr, 3, None, dtype, slice_time_ref, replace(hrf, delay=float(value)))
        for value in delays
    ]
    hrf_t = probs[0].hrf_t if len(probs) == 1 else ops.concatenate([p.hrf_t for p in probs], axis=0)
    per_delay = np.zeros((n, len(delays), weights.shape[1]))
    per_delay[np.arange(n), which] = weights
    block = fn(tensor(theta, dtype), tensor(per_delay.reshape(n, -1), dtype), probs[0].stim, hrf_t)
    return to_numpy(block).astype(np.float64) + arrays.get("baseline", np.zeros(n))[:, None]


def _predict_tensor(model: PRFModel, theta: Any, weights: Any, stim: StimulusTensors, hrf_t: Any) -> Any:
    neural = model.neural(theta, stim, jacobian=False)
    regs = kernels.hrf_regressors(neural, hrf_t)[0]  # (bases, units, frames)
    return ops.sum(ops.transpose(weights)[:, :, None] * regs, axis=0)
