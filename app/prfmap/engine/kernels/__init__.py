"""Compiled tensor kernels of the fitters, written once with ``keras.ops``.

Everything here is traceable: tensors in and out, no branching on tensor values. The callers (``search.py``,
``solvers.py``, ``fit.py``) hold the Python loops over tiles and batches and convert to and from numpy.
"""

from __future__ import annotations

from typing import Any

from keras import ops

from prfmap.engine import catalog
from prfmap.engine.backend.ops import at_least, matmul, spd_solve
from prfmap.engine.models import PRFModel
from prfmap.engine.stimulus import StimulusTensors

TINY = 1e-20


def project_out(t: Any, q: Any) -> Any:
    """Remove from time courses ``t`` (..., frames) their projection on orthonormal columns ``q``.

    Parameters
    ----------
    t : tensor, shape (..., frames)
        Time courses.
    q : tensor, shape (frames, k)
        Orthonormal columns.

    Returns
    -------
    tensor, shape (..., frames)
    """
    return t - matmul(matmul(t, q), ops.transpose(q))


def hrf_regressors(neural: Any, hrf_t: Any) -> Any:
    """Convolve neural responses (J, units, distinct) with each HRF basis: (J, bases, units, frames).

    One 2-D product of (J·units, distinct) by the bases side by side (distinct, bases·frames); ``hrf_t``
    also expands the distinct frames to the frames (:mod:`prfmap.engine.stimulus.frames`).

    Parameters
    ----------
    neural : tensor, shape (J, units, distinct)
        Neural responses to the distinct frames (a response and its derivatives).
    hrf_t : tensor, shape (bases, distinct, frames)
        Transposed convolution matrices of the HRF bases, folded with the expansion of the frames.

    Returns
    -------
    tensor, shape (J, bases, units, frames)
    """
    n_j, n_units, n_distinct = tuple(ops.shape(neural))
    n_bases, _, n_frames = tuple(ops.shape(hrf_t))
    kernels = ops.reshape(ops.transpose(hrf_t, (1, 0, 2)), (n_distinct, n_bases * n_frames))
    out = matmul(ops.reshape(neural, (n_j * n_units, n_distinct)), kernels)
    out = ops.reshape(out, (n_j, n_units, n_bases, n_frames))
    if n_bases == 1:
        return ops.reshape(out, (n_j, 1, n_units, n_frames))
    return ops.transpose(out, (0, 2, 1, 3))


def _eye_like(m: Any) -> Any:
    return ops.eye(ops.shape(m)[-1], dtype=m.dtype)[None]


def solve_small(m: Any, rhs: Any) -> Any:
    """Batched solve of small symmetric systems (units, n, n) · x = rhs (units, n, r), regularised.

    Parameters
    ----------
    m : tensor, shape (units, n, n)
        Symmetric matrices.
    rhs : tensor, shape (units, n, r)
        Right-hand sides.

    Returns
    -------
    tensor, shape (units, n, r)
    """
    scale = at_least(ops.mean(ops.diagonal(m, axis1=1, axis2=2), axis=1), TINY)
    return spd_solve(m + 1e-7 * scale[:, None, None] * _eye_like(m), rhs)


def linear_fit(a: Any, y: Any) -> tuple[Any, Any]:
    """Least-squares weights of regressors ``a`` (units, L, frames) for data ``y`` (units, frames).

    Parameters
    ----------
    a : tensor, shape (units, L, frames)
        Regressors.
    y : tensor, shape (units, frames)
        Data.

    Returns
    -------
    beta : tensor, shape (units, L)
        The weights.
    gram : tensor, shape (units, L, L)
        The regressors' Gram matrices.
    """
    gram = matmul(a, ops.transpose(a, (0, 2, 1)))
    beta = solve_small(gram, matmul(a, y[:, :, None]))[:, :, 0]
    return beta, gram


def capped_amplitude(beta: Any, gram: Any, high: float) -> Any:
    """Least-squares weights with the amplitude (the first) held at or below ``high``.

    Where the unconstrained amplitude exceeds ``high``, the weights that minimise the residual with
    the amplitude fixed at ``high``: ``beta + G⁻¹e₀ (high − beta₀) / (G⁻¹)₀₀`` for the Gram matrix
    ``G`` (the other HRF bases' weights re-solved; with one basis, ``min(beta, high)``).

    Parameters
    ----------
    beta : tensor, shape (units, L)
        Unconstrained weights (amplitude first).
    gram : tensor, shape (units, L, L)
        The regressors' Gram matrices.
    high : float
        The amplitude's upper bound.

    Returns
    -------
    tensor, shape (units, L)
    """
    n_bases = ops.shape(beta)[1]
    if n_bases == 1:
        return ops.minimum(beta, high)
    first = ops.one_hot(ops.zeros((ops.shape(beta)[0],), dtype="int32"), n_bases, dtype=beta.dtype)
    column = solve_small(gram, first[:, :, None])[:, :, 0]  # G⁻¹ e₀
    step = (high - beta[:, 0]) / at_least(column[:, 0], TINY)
    return ops.where((beta[:, 0] > high)[:, None], beta + column * step[:, None], beta)


def vp_cost(model: PRFModel, u: Any, y: Any, stim: StimulusTensors, hrf_t: Any, q: Any) -> Any:
    """Per-unit residual sum of squares with the linear weights solved for (variable projection).

    Parameters
    ----------
    model : PRFModel
        The model.
    u : tensor, shape (units, K)
        Internal parameters.
    y : tensor, shape (units, frames)
        Projected data.
    stim : StimulusTensors
        The stimulated pixels.
    hrf_t : tensor
        Transposed HRF convolution matrices.
    q : tensor, shape (frames, k)
        Nuisance basis.

    Returns
    -------
    tensor, shape (units,)
    """
    theta, _ = model.natural(u)
    neural = model.neural(theta, stim, jacobian=False)
    return _residual_ss(project_out(hrf_regressors(neural, hrf_t)[0], q), y)


def vp_costs(model: PRFModel, u: Any, y: Any, stim: StimulusTensors, hrf_ts: Any, q: Any) -> Any:
    """:func:`vp_cost` under each of several HRFs, the neural responses computed once.

    The neural responses (units × pixels × distinct frames) are most of :func:`vp_cost`'s arithmetic;
    each further HRF adds only its regressors (units × distinct × frames) and their least squares.

    Parameters
    ----------
    model, u, y, stim, q
        As :func:`vp_cost`'s.
    hrf_ts : tensor, shape (H, bases, distinct, frames)
        Each HRF's transposed convolution matrices (``Problem.hrf_t``).

    Returns
    -------
    tensor, shape (H, units)
    """
    theta, _ = model.natural(u)
    neural = model.neural(theta, stim, jacobian=False)
    n_hrfs, n_bases, n_distinct, n_frames = tuple(ops.shape(hrf_ts))
    regressors = hrf_regressors(neural, ops.reshape(hrf_ts, (n_hrfs * n_bases, n_distinct, n_frames)))[0]
    return ops.stack(
        [_residual_ss(project_out(regressors[h * n_bases : (h + 1) * n_bases], q), y) for h in range(n_hrfs)]
    )


def _residual_ss(regressors: Any, y: Any) -> Any:
    """Each unit's residual sum of squares of ``y`` (units, frames) on ``regressors`` (L, units, frames)."""
    a = ops.transpose(regressors, (1, 0, 2))
    beta, _ = linear_fit(a, y)
    resid = y - ops.sum(beta[:, :, None] * a, axis=1)
    return ops.sum(resid * resid, axis=1)


def vp_objective(
    model: PRFModel, u: Any, y: Any, stim: StimulusTensors, hrf_t: Any, q: Any
) -> tuple[Any, Any]:
    """The batch's summed variable-projection cost, which gradient solvers minimise, and each unit's.

    Parameters
    ----------
    model, u, y, stim, hrf_t, q
        As :func:`vp_cost`.

    Returns
    -------
    total : tensor, shape ()
        The summed cost.
    cost : tensor, shape (units,)
        Each unit's.
    """
    cost = vp_cost(model, u, y, stim, hrf_t, q)
    return ops.sum(cost), cost


def _vp_linearised(
    model: PRFModel, u: Any, y: Any, free: Any, stim: StimulusTensors, hrf_t: Any, q: Any
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """The variable-projection fit at ``u`` and its derivatives.

    Returns the neural responses and their derivatives (1 + K, units, distinct), the projected
    regressors ``a`` (units, L, frames), the prediction's derivatives ``d`` (units, K, frames, times
    ``free``), the weights, their Gram matrices and the residual.
    """
    theta, dtheta = model.natural(u)
    neural = model.neural(theta, stim, jacobian=True)
    neural = ops.concatenate(
        [neural[:1], neural[1:] * ops.transpose(dtheta * free[None])[:, :, None]], axis=0
    )
    regs = project_out(hrf_regressors(neural, hrf_t), q)  # (1 + K, L, units, frames)
    a = ops.transpose(regs[0], (1, 0, 2))  # (units, L, frames)
    da = ops.transpose(regs[1:], (2, 0, 1, 3))  # (units, K, L, frames)
    beta, gram = linear_fit(a, y)
    resid = y - ops.sum(beta[:, :, None] * a, axis=1)
    d = ops.sum(da * beta[:, None, :, None], axis=2)  # (units, K, frames)
    return neural, a, d, beta, gram, resid


def vp_normal_equations(
    model: PRFModel, u: Any, y: Any, free: Any, stim: StimulusTensors, hrf_t: Any, q: Any
) -> tuple[Any, Any, Any]:
    """Cost, Gauss–Newton matrix and gradient of the variable-projection residual (Kaufman's Jacobian).

    Parameters
    ----------
    model, u, y, stim, hrf_t, q
        As :func:`vp_cost`.
    free : tensor, shape (K,)
        1 for each fitted, 0 for each fixed internal parameter.

    Returns
    -------
    cost : (units,)
    jtj : (units, K, K)
    jte : (units, K)
    """
    neural, a, d, beta, gram, resid = _vp_linearised(model, u, y, free, stim, hrf_t, q)
    cost = ops.sum(resid * resid, axis=1)
    c = solve_small(gram, matmul(a, ops.transpose(d, (0, 2, 1))))  # (units, L, K)
    jac = -(d - matmul(ops.transpose(c, (0, 2, 1)), a))
    jtj = matmul(jac, ops.transpose(jac, (0, 2, 1)))
    jte = ops.sum(jac * resid[:, None, :], axis=2)
    return cost, jtj, jte


def vp_information(
    model: PRFModel,
    u: Any,
    y: Any,
    free: Any,
    stim: StimulusTensors,
    hrf_t: Any,
    q: Any,
    terms: tuple[Any, Any],
) -> tuple[Any, Any, Any, Any, Any, Any]:
    """Cost and Gauss–Newton information of every parameter, the linear weights included.

    The Jacobian of the residual ``y - Σ β_l a_l(θ)`` with respect to the internal parameters (times
    ``free``) and the weights ``β`` (least squares at ``u``), stacked: ``J = [d; a]``; the
    information is ``J Jᵀ``. Its inverse times the residual variance is the Laplace (Gauss–Newton)
    covariance; the block of the internal parameters is the inverse of the Kaufman matrix
    :func:`vp_normal_equations` builds (the Schur complement of the weights).

    Parameters
    ----------
    model, u, y, stim, hrf_t, q
        As :func:`vp_cost`.
    free : tensor, shape (K,)
        1 for each fitted, 0 for each fixed internal parameter.
    terms : (tensor, tensor)
        ``hrf_alt`` and ``lag_weights``:

    hrf_alt : tensor, shape (S, bases, distinct, frames)
        HRF matrices of ``S`` other responses (the HRF's delay or dispersion moved), for the
        sensitivity of the estimates to the HRF.
    lag_weights : tensor, shape (2, lags + 1, frames)
        Weights of the products of the scores ``g_t = J_t r_t`` (each frame's Jacobian times its
        residual) ``lag`` frames apart, ending at frame ``t`` (0 where frame ``t - lag`` is in
        another run): the "meat" of a sandwich covariance; then the same times the residual
        projection's ``M_{t,t-lag}`` (:func:`score_covariance`). No lags: none.

    Returns
    -------
    cost : (units,)
    information : (units, K + L, K + L)
    amplitude : (units,)
        The least-squares weight of the response (the first basis).
    cross : (units, K + L, S)
        ``Jᵀ (p_s - p)``: the Jacobian against each other response's change of the prediction
        (with the same parameters and weights).
    observed, expected : (units, K + L, K + L)
        :func:`score_covariance` (zeros without lags).
    """
    hrf_alt, lag_weights = terms
    neural, a, d, beta, _, resid = _vp_linearised(model, u, y, free, stim, hrf_t, q)
    jac = ops.concatenate([d, a], axis=1)
    information = matmul(jac, ops.transpose(jac, (0, 2, 1)))
    fit = ops.sum(beta[:, :, None] * a, axis=1)
    changes = []
    for s in range(int(ops.shape(hrf_alt)[0])):
        alt = ops.transpose(project_out(hrf_regressors(neural[:1], hrf_alt[s])[0], q), (1, 0, 2))
        changes.append(ops.sum(beta[:, :, None] * alt, axis=1) - fit)
    if changes:
        cross = matmul(jac, ops.transpose(ops.stack(changes, axis=1), (0, 2, 1)))
    else:
        cross = ops.zeros((ops.shape(u)[0], ops.shape(jac)[1], 0), dtype=u.dtype)
    observed, expected = score_covariance(jac, resid, lag_weights)
    return ops.sum(resid * resid, axis=1), information, beta[:, 0], cross, observed, expected


def score_covariance(jac: Any, resid: Any, lag_weights: Any) -> tuple[Any, Any]:
    """Lagged outer products of the per-frame scores ``g_t = J_t r_t``, observed and expected, weighted.

    Observed: ``Σ_t w_0t g_t g_tᵀ + Σ_{l ≥ 1} Σ_t w_lt (g_t g_{t-l}ᵀ + g_{t-l} g_tᵀ)``, with Bartlett
    weights Newey and West's (1987) heteroscedasticity and autocorrelation consistent estimate of
    the scores' covariance. Expected: the same sum with ``r_t r_{t-l}`` replaced by its expectation
    (per unit of residual variance) where the fitted model and noise model are right, ``M_{t,t-l}``
    of the residual's projection, folded into the second set of weights.

    Parameters
    ----------
    jac : tensor, shape (units, P, frames)
        The residual's Jacobian.
    resid : tensor, shape (units, frames)
        The residual.
    lag_weights : tensor, shape (2, lags + 1, frames)
        As :func:`vp_information`: the weights ``w``, then ``w ⊙ M``.

    Returns
    -------
    observed, expected : tensor, shape (units, P, P)
    """
    if int(ops.shape(lag_weights)[1]) == 0:
        empty = ops.zeros_like(matmul(jac[:, :, :1], ops.transpose(jac[:, :, :1], (0, 2, 1))))
        return empty, empty
    observed = _lagged_products(jac * resid[:, None, :], lag_weights[0])
    information = matmul(jac, ops.transpose(jac, (0, 2, 1)))
    return observed, _expected_products(jac, solve_small(information, jac), lag_weights)


def _expected_products(jac: Any, hat: Any, lag_weights: Any) -> Any:
    """:func:`_lagged_products` of ``jac`` with ``r_t r_{t-l}`` replaced by ``(M - H)_{t,t-l}``.

    ``M`` is the nuisance projection's (folded into ``lag_weights[1]``), ``H_{t,t-l} = J_tᵀ A⁻¹ J_{t-l}``
    the fit's own hat matrix (``hat = A⁻¹ J``): what the residual's lagged products are, per unit of
    noise variance, where the model is right.
    """
    weights, model_weights = lag_weights[0], lag_weights[1]
    w0 = model_weights[0][None] - weights[0][None] * ops.sum(jac * hat, axis=1)
    out = matmul(jac * w0[:, None, :], ops.transpose(jac, (0, 2, 1)))
    for lag in range(1, int(ops.shape(weights)[0])):
        h = ops.sum(jac[:, :, lag:] * hat[:, :, :-lag], axis=1)
        w = model_weights[lag, lag:][None] - weights[lag, lag:][None] * h
        cross = matmul(jac[:, :, lag:] * w[:, None, :], ops.transpose(jac[:, :, :-lag], (0, 2, 1)))
        out = out + cross + ops.transpose(cross, (0, 2, 1))
    return out


def _lagged_products(scores: Any, weights: Any) -> Any:
    """``Σ_t w_0t s_t s_tᵀ + Σ_{l ≥ 1} Σ_t w_lt (s_t s_{t-l}ᵀ + s_{t-l} s_tᵀ)`` of ``scores``.

    ``scores`` has shape (units, P, frames); ``weights`` (lags + 1, frames).
    """
    out = matmul(scores * weights[0], ops.transpose(scores, (0, 2, 1)))
    for lag in range(1, int(ops.shape(weights)[0])):
        later = scores[:, :, lag:] * weights[lag, lag:]
        cross = matmul(later, ops.transpose(scores[:, :, :-lag], (0, 2, 1)))
        out = out + cross + ops.transpose(cross, (0, 2, 1))
    return out


def finalize(model, u, y, y_raw, stim, hrf_t, q):
    """Linear weights, baseline, cost and fitted time courses at the final parameters.

    Parameters
    ----------
    model, u, y, stim, hrf_t, q
        As :func:`vp_cost`.
    y_raw : tensor, shape (units, frames)
        The data as given (its mean gives the baseline).

    Returns
    -------
    beta : (units, L)  weights of the HRF bases (amplitude first)
    baseline : (units,)
    cost : (units,)
    fitted : (units, frames) model time course in the space of ``y_raw``
    """
    theta, _ = model.natural(u)
    neural = model.neural(theta, stim, jacobian=False)
    raw = ops.transpose(hrf_regressors(neural, hrf_t)[0], (1, 0, 2))
    a = project_out(raw, q)
    beta, gram = linear_fit(a, y)
    beta = capped_amplitude(beta, gram, catalog.PARAMETERS["amplitude"].bound.resolve()[1])
    fit_proj = ops.sum(beta[:, :, None] * a, axis=1)
    resid = y - fit_proj
    baseline = ops.mean(y_raw - ops.sum(beta[:, :, None] * raw, axis=1), axis=1)
    return beta, baseline, ops.sum(resid * resid, axis=1), fit_proj + (y_raw - y)


def grid_predictions(model, theta, stim, hrf_t, q):
    """Unit-norm, projected canonical-HRF predictions of grid points ``theta`` (grid, K).

    Parameters
    ----------
    model : PRFModel
        The model.
    theta : tensor, shape (grid, K)
        Natural parameters of the grid points.
    stim, hrf_t, q
        As :func:`vp_cost`.

    Returns
    -------
    tensor, shape (grid, frames)
    """
    return unit_norm_predictions(model.neural(theta, stim, jacobian=False)[0], hrf_t, q)


def unit_norm_predictions(neural: Any, hrf_t: Any, q: Any) -> Any:
    """Neural responses (N, distinct) to unit-norm, projected canonical-HRF predictions (N, frames).

    Parameters
    ----------
    neural : tensor, shape (N, distinct)
        Neural responses.
    hrf_t, q
        As :func:`vp_cost`.

    Returns
    -------
    tensor, shape (N, frames)
    """
    pred = project_out(matmul(neural, hrf_t[0]), q)
    norm = ops.sqrt(ops.sum(pred * pred, axis=1, keepdims=True))
    return ops.where(norm > 1e-12, pred / at_least(norm, 1e-12), 0.0)


def grid_responses(model: PRFModel, theta: Any, stim: StimulusTensors, hrf_t: Any, q: Any) -> Any:
    """Neural responses of grid points, scaled so that their predictions have unit norm.

    The grid scored in the space of the distinct frames (issue 18, :func:`grid_score_folded`): each
    response (distinct,) is divided by the norm of its projected canonical-HRF prediction.

    Parameters
    ----------
    model : PRFModel
        The model.
    theta : tensor, shape (grid, K)
        Natural parameters of the grid points.
    stim : StimulusTensors
        The stimulated pixels of the distinct frames.
    hrf_t : tensor, shape (bases, distinct, frames)
        The folded HRF matrices (the first basis is used).
    q : tensor, shape (frames, k)
        Orthonormal nuisance basis.

    Returns
    -------
    tensor, shape (grid, distinct)
    """
    neural = model.neural(theta, stim, jacobian=False)[0]
    pred = project_out(matmul(neural, hrf_t[0]), q)
    norm = ops.sqrt(ops.sum(pred * pred, axis=1, keepdims=True))
    return ops.where(norm > 1e-12, neural / at_least(norm, 1e-12), 0.0)


def grid_score_folded(y_unit: Any, grid_resp: Any, hrf_t: Any) -> tuple[Any, Any]:
    """:func:`grid_score` over the distinct frames.

    ``<y, P(n M)> = <y Mᵀ, n>`` for data already orthogonal to the nuisance basis, so one product of
    the data with ``M = hrf_t[0]`` (distinct, frames) brings them to the distinct frames.

    Parameters
    ----------
    y_unit : tensor, shape (units, frames)
        Unit-norm projected data.
    grid_resp : tensor, shape (grid, distinct)
        :func:`grid_responses` of the grid.
    hrf_t : tensor, shape (bases, distinct, frames)
        The folded HRF matrices.

    Returns
    -------
    best : tensor, shape (units,)
        The best correlation.
    index : tensor, shape (units,)
        Its grid point.
    """
    return grid_score(matmul(y_unit, ops.transpose(hrf_t[0])), grid_resp)


def grid_score(y_unit: Any, grid_unit: Any) -> tuple[Any, Any]:
    """Best correlation and its grid index for unit-norm data (units, F) against grid (grid, F).

    Parameters
    ----------
    y_unit : tensor, shape (units, frames)
        Unit-norm projected data.
    grid_unit : tensor, shape (grid, frames)
        Unit-norm grid predictions.

    Returns
    -------
    best : tensor, shape (units,)
        The best correlation.
    index : tensor, shape (units,)
        Its grid point.
    """
    corr = matmul(y_unit, ops.transpose(grid_unit))
    return ops.max(corr, axis=1), ops.argmax(corr, axis=1)


def seed_score(model, theta, y_unit, stim, hrf_t, q):
    """Each unit's best candidate: ``theta`` (units, C, K) against unit-norm data (units, F).

    The candidates are scored as grid points are (:func:`grid_predictions`, correlation with the data).

    Parameters
    ----------
    model : PRFModel
        The model.
    theta : tensor, shape (units, C, K)
        Natural parameters of each unit's candidates.
    y_unit : tensor, shape (units, frames)
        Unit-norm projected data.
    stim, hrf_t, q
        As :func:`vp_cost`.

    Returns
    -------
    score : (units,) best correlation
    index : (units,) its candidate
    """
    n_units, n_cand, k = tuple(ops.shape(theta))
    pred = grid_predictions(model, ops.reshape(theta, (n_units * n_cand, k)), stim, hrf_t, q)
    return _best_candidate(pred, y_unit)


def seed_score_shared(model, sizes, theta, which, y_unit, stim, hrf_t, q):
    """:func:`seed_score` of candidates that share their Gaussians (:meth:`PRFModel.candidate_neural`).

    A unit's candidates differ only in the extras and in the size of one Gaussian, which takes one
    of a few ``sizes``: each unit computes those few Gaussians once, not one or two per candidate.

    Parameters
    ----------
    model : PRFModel
        A model whose candidates share their Gaussians (``PRFModel.candidate_sizes``).
    sizes : tensor, shape (S,)
        The distinct relative sizes of the candidates' varying Gaussian.
    theta : tensor, shape (units, C, K)
        Natural parameters of each unit's candidates, the centre and size the same in all.
    which : tensor of int, shape (units, C)
        Each candidate's value among ``sizes``.
    y_unit, stim, hrf_t, q
        As :func:`seed_score`.

    Returns
    -------
    score : (units,) best correlation
    index : (units,) its candidate
    """
    n_units, n_cand, _ = tuple(ops.shape(theta))
    neural = model.candidate_neural(theta, sizes, which, stim)
    pred = unit_norm_predictions(ops.reshape(neural, (n_units * n_cand, -1)), hrf_t, q)
    return _best_candidate(pred, y_unit)


def _best_candidate(pred: Any, y_unit: Any) -> tuple[Any, Any]:
    """Best correlation and its candidate: predictions (units·C, frames) against data (units, frames)."""
    n_units = ops.shape(y_unit)[0]
    corr = ops.sum(ops.reshape(pred, (n_units, -1, ops.shape(pred)[1])) * y_unit[:, None, :], axis=2)
    return ops.max(corr, axis=1), ops.argmax(corr, axis=1)
