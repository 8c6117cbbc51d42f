"""Residual sums of squares at given parameters, row by row, in calls of one compiled shape.

σ's profiles (:mod:`~prfmap.engine.fit.sigma_prior`, 32 points of log σ per unit under each of the
delay prior's HRFs) and the centre's likelihood path (:mod:`~prfmap.engine.fit.uncertainty`, 9 points
per unit) evaluate the variable-projection cost (:func:`~prfmap.engine.kernels.vp_costs`) of rows of
parameters, each against its unit's time course. Both use the same fixed number of rows per call: one
program per number of HRFs is compiled (a shape per power of two of the rows was compiled for each),
and a chunk's last call pads fewer rows.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from keras import ops

from prfmap.engine import kernels
from prfmap.engine.backend.ops import tensor, to_numpy
from prfmap.engine.batching import batch_size, compiled, pad, run_batches
from prfmap.engine.problem import Problem

COST_ROWS = 1024
"""Rows of each call (fewer where the memory budget allows fewer)."""


def rss_rows(
    problems: Sequence[Problem],
    u: np.ndarray,
    y: np.ndarray,
    of_unit: np.ndarray,
    mem_gb: float,
    stage: str,
) -> np.ndarray:
    """The residual sum of squares of each row's parameters against its unit's time course.

    Parameters
    ----------
    problems : sequence of Problem
        The (whitened) problems, which differ only in their HRF (:func:`kernels.vp_costs` computes
        the neural responses once for all of them).
    u : ndarray, shape (rows, K)
        Internal parameters, one row per evaluation.
    y : ndarray, shape (units, frames)
        The units' (whitened) time courses.
    of_unit : ndarray of int, shape (rows,)
        Each row's unit, a row of ``y``.
    mem_gb : float
        Memory budget of a call.
    stage : str
        The stage's name in warnings.

    Returns
    -------
    ndarray, shape (len(problems), rows)
    """
    prob = problems[0]
    fn = compiled(kernels.vp_costs, prob.model)
    hrf_ts = ops.stack([p.hrf_t for p in problems])
    out = np.empty((len(problems), len(u)))

    def run(start: int, stop: int, batch: int) -> None:
        cost = fn(
            tensor(pad(u[start:stop], batch), prob.dtype),
            tensor(pad(y[of_unit[start:stop]], batch), prob.dtype),
            prob.stim,
            hrf_ts,
            prob.q,
        )
        out[:, start:stop] = to_numpy(cost)[:, : stop - start]

    rows = min(COST_ROWS, batch_size(prob, mem_gb, 0))
    run_batches(len(u), rows, run, stage, None, shrink=False)
    return out
