"""The noise model of a fit: autocorrelation of the residuals, and the whitening that GLS refines with.

BOLD noise is autocorrelated (AR(1) ρ ≈ 0.2–0.4 at TR 1–2 s). Ordinary least squares under it weighs
the slow noise that resembles a pRF's response as much as the fast noise that does not, and its
standard errors are too small. :func:`estimate_noise` estimates one autoregressive model AR(p) pooled
over units, as SPM and FSL pool theirs, from the residuals of a grid fit of a sample of units; the
fit then refines on data and predictions multiplied by the inverse Cholesky factor of that model's
covariance (:meth:`NoiseModel.whitening`), run by run: generalised least squares, the
prewhitening of nilearn's ``FirstLevelModel(noise_model="ar1")``.

The residuals are those left after the nuisance projection (run means, high-pass, confounds), whose
autocorrelation is lower than the noise's: the estimate is corrected for it (a fixed point: the
AR(p) model whose projected autocorrelation matches the residuals').

Every noise model of the catalogue (:data:`prfmap.engine.catalog.NOISE_MODELS`) is a subclass of the
contract :class:`BaseNoiseModel`, which its entry names (``implementation``, a class or its
``"module:Class"`` path): ``estimate`` (the model from the pooled residuals), ``run_covariance`` (a
run's correlation matrix) and ``describe`` (the sidecars' record); the whitening, the inverse Cholesky
factor of each run's covariance, is the contract's. :class:`NoiseModel` is the built-in autoregressive
one; an entry without an implementation (``ols``) is white noise, :data:`OLS`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import block_diag, cho_factor, solve_triangular, toeplitz

from prfmap.engine import catalog

__all__ = [
    "OLS",
    "BaseNoiseModel",
    "NoiseModel",
    "noise_class",
    "noise_order",
    "pooled_autocorrelation",
    "yule_walker",
]

MAX_COEFFICIENT = 0.95
"""AR(1) coefficients are held in [-0.95, 0.95] (a stationary model; an estimate beyond is not noise)."""


def noise_order(option: str) -> int:
    """The autoregressive order of a ``--noise-model`` option: its entry's ``order`` option.

    ``ols`` 0, ``ar<p>`` p; 0 for an entry whose estimator takes no order (a model that is not
    autoregressive).

    Parameters
    ----------
    option : str
        A key of :data:`prfmap.engine.catalog.NOISE_MODELS`.

    Returns
    -------
    int

    Raises
    ------
    ValueError
        For anything else.
    """
    return int(catalog.get_noise_model(option).options.get("order", 0))


class BaseNoiseModel:
    """The contract of a noise model: one covariance for every unit of a fit, and its whitening.

    A subclass is an immutable value (a frozen dataclass): its ``repr`` keys the whitened problem a
    fit caches. It implements :meth:`estimate`, :meth:`run_covariance` and :meth:`describe`; the
    contract derives :meth:`covariance` and :meth:`whitening` from them.

    Attributes
    ----------
    option : str
        The ``--noise-model`` entry it was estimated for.
    units : int
        Units the estimate pooled (0 when not estimated).
    """

    option: str
    units: int

    @classmethod
    def estimate(
        cls,
        resid: np.ndarray,
        projector: np.ndarray,
        run_lengths: tuple[int, ...],
        *,
        option: str,
        units: int,
        **options: Any,
    ) -> BaseNoiseModel:
        """The model of pooled residuals (:func:`prfmap.engine.estimate.noise.estimate_noise` calls it).

        Parameters
        ----------
        resid : ndarray, shape (units, frames)
            Residual time courses the stimulus does not explain, after the nuisance projection.
        projector : ndarray, shape (frames, frames)
            That projection (to correct the estimate for it).
        run_lengths : tuple of int
            Frames per run.
        option : str
            The entry's name.
        units : int
            How many units the residuals pool.
        **options
            The entry's ``options``.

        Returns
        -------
        BaseNoiseModel
        """
        raise NotImplementedError

    @property
    def white(self) -> bool:
        """Whether the model is white noise (no whitening: ordinary least squares)."""
        return False

    def run_covariance(self, run: int, n: int) -> np.ndarray:
        """The noise covariance of run ``run`` (of ``n`` frames), up to a scale shared by every run.

        Parameters
        ----------
        run : int
            The run's index in the fit.
        n : int
            Its frames.

        Returns
        -------
        ndarray, shape (n, n)
            Symmetric positive definite.
        """
        raise NotImplementedError

    def covariance(self, run_lengths: tuple[int, ...]) -> np.ndarray | None:
        """The noise covariance Σ (frames, frames), block-diagonal by run; None for white noise.

        Parameters
        ----------
        run_lengths : tuple of int
            Frames per run, in order.

        Returns
        -------
        ndarray or None
        """
        if self.white:
            return None
        return block_diag(*(self.run_covariance(i, n) for i, n in enumerate(run_lengths)))

    def whitening(self, run_lengths: tuple[int, ...]) -> np.ndarray | None:
        """The whitening matrix W (frames, frames): block-diagonal by run, ``W Σ Wᵀ = I`` up to a scale.

        Each block is the inverse Cholesky factor of the run's covariance (lower triangular: every frame
        depends only on itself and the frames before it). None for white noise.

        Parameters
        ----------
        run_lengths : tuple of int
            Frames per run, in order.

        Returns
        -------
        ndarray or None
        """
        if self.white:
            return None
        total = sum(run_lengths)
        out = np.zeros((total, total))
        start = 0
        for i, n in enumerate(run_lengths):
            chol, _ = cho_factor(self.run_covariance(i, n), lower=True)
            lower = np.tril(chol)
            out[start : start + n, start : start + n] = solve_triangular(lower, np.eye(n), lower=True)
            start += n
        return out

    def describe(self) -> dict[str, object]:
        """The record written into sidecars: at least ``option`` and ``description``.

        Returns
        -------
        dict
        """
        raise NotImplementedError


def noise_class(spec: catalog.NoiseSpec) -> type[BaseNoiseModel]:
    """The :class:`BaseNoiseModel` subclass a catalogue entry names (imported when given as a path).

    Parameters
    ----------
    spec : NoiseSpec
        An entry with an ``implementation``.

    Returns
    -------
    type
    """
    return catalog.import_path(spec.implementation, BaseNoiseModel, f"noise model {spec.name!r}")


@dataclass(frozen=True)
class NoiseModel(BaseNoiseModel):
    """An autoregressive noise model, the same for every unit of a fit (the built-in ``ar<p>``).

    Attributes
    ----------
    option : str
        ``ols`` (white noise: no whitening) or ``ar<p>``.
    coefficients : tuple of float
        AR coefficients φ₁ … φₚ (``e_t = Σ φ_k e_{t-k} + innovation``).
    units : int
        Units the estimate pooled (0 when not estimated).
    """

    option: str = "ols"
    coefficients: tuple[float, ...] = ()
    units: int = 0

    @property
    def order(self) -> int:
        """The autoregressive order ``p``."""
        return len(self.coefficients)

    def autocorrelation(self, lags: int) -> np.ndarray:
        """The model's autocorrelation at lags 0 … ``lags - 1``.

        Parameters
        ----------
        lags : int
            How many lags.

        Returns
        -------
        ndarray, shape (lags,)
        """
        return ar_autocorrelation(np.asarray(self.coefficients, dtype=np.float64), lags)

    @classmethod
    def estimate(
        cls,
        resid: np.ndarray,
        projector: np.ndarray,
        run_lengths: tuple[int, ...],
        *,
        option: str,
        units: int,
        order: int = 1,
        **options: Any,
    ) -> NoiseModel:
        """The AR(``order``) model of the residuals' pooled autocorrelation, corrected for the projection.

        Parameters
        ----------
        resid : ndarray, shape (units, frames)
            Pooled residuals.
        projector : ndarray, shape (frames, frames)
            The projection they went through.
        run_lengths : tuple of int
            Frames per run.
        option : str
            The entry's name.
        units : int
            Units pooled.
        order : int
            The autoregressive order (the entry's ``order`` option).
        **options
            None other.

        Returns
        -------
        NoiseModel
        """
        if options:
            raise ValueError(f"noise model {option!r}: unknown options {sorted(options)}")
        observed = pooled_autocorrelation(resid, run_lengths, order + 1)
        phi = corrected_coefficients(observed, projector, run_lengths)
        return cls(option, tuple(float(c) for c in phi), units)

    @property
    def white(self) -> bool:
        """Whether the model is white noise: no coefficients (``ols``)."""
        return not self.coefficients

    def run_covariance(self, run: int, n: int) -> np.ndarray:
        """The AR(p) correlation matrix of a run of ``n`` frames (the same for every run).

        Parameters
        ----------
        run : int
            The run's index (unused: stationary noise).
        n : int
            Its frames.

        Returns
        -------
        ndarray, shape (n, n)
        """
        return toeplitz(self.autocorrelation(n))

    def describe(self) -> dict[str, object]:
        """The record written into sidecars.

        Returns
        -------
        dict
        """
        if not self.coefficients:
            return {"option": "ols", "description": "ordinary least squares (no prewhitening)"}
        return {
            "option": self.option,
            "description": (
                f"AR({self.order}) noise pooled over {self.units} units, estimated from grid-fit "
                "residuals (corrected for the nuisance projection); data and predictions prewhitened "
                "run by run (generalised least squares) in the refinement and the standard errors"
            ),
            "coefficients": [round(float(c), 6) for c in self.coefficients],
            "units": self.units,
        }


OLS = NoiseModel()
"""White noise: no whitening."""


def ar_autocorrelation(phi: np.ndarray, lags: int) -> np.ndarray:
    """Autocorrelation of a stationary AR(p) process with coefficients ``phi`` at lags 0 … ``lags - 1``.

    Parameters
    ----------
    phi : ndarray, shape (p,)
        Coefficients.
    lags : int
        How many lags.

    Returns
    -------
    ndarray, shape (lags,)
    """
    p = len(phi)
    rho = np.zeros(max(lags, p + 1))
    rho[0] = 1.0
    if p:  # the Yule–Walker equations for rho_1 … rho_p: rho_k = sum_j phi_j rho_|k-j|
        system = np.eye(p)
        rhs = np.zeros(p)
        for k in range(1, p + 1):
            for j in range(1, p + 1):
                lag = abs(k - j)
                if lag == 0:
                    rhs[k - 1] += phi[j - 1]
                else:
                    system[k - 1, lag - 1] -= phi[j - 1]
        rho[1 : p + 1] = np.linalg.solve(system, rhs)
        for k in range(p + 1, lags):
            rho[k] = sum(phi[j - 1] * rho[k - j] for j in range(1, p + 1))
    return rho[:lags]


def yule_walker(rho: np.ndarray) -> np.ndarray:
    """AR(p) coefficients from autocorrelations ``rho`` at lags 0 … p (the Yule–Walker equations).

    Parameters
    ----------
    rho : ndarray, shape (p + 1,)
        Autocorrelations, ``rho[0] == 1``.

    Returns
    -------
    ndarray, shape (p,)
    """
    p = len(rho) - 1
    return np.linalg.solve(toeplitz(rho[:p]), rho[1 : p + 1])


def pooled_autocorrelation(resid: np.ndarray, run_lengths: tuple[int, ...], lags: int) -> np.ndarray:
    """The units' mean normalised autocorrelation at lags 0 … ``lags - 1``, within runs.

    Parameters
    ----------
    resid : ndarray, shape (units, frames)
        Residual time courses.
    run_lengths : tuple of int
        Frames per run (lags never cross a run's end).
    lags : int
        How many lags.

    Returns
    -------
    ndarray, shape (lags,)
    """
    cov = np.zeros((resid.shape[0], lags))
    start = 0
    for n in run_lengths:
        block = resid[:, start : start + n]
        for k in range(min(lags, n)):
            cov[:, k] += np.sum(block[:, k:] * block[:, : n - k], axis=1)
        start += n
    keep = cov[:, 0] > 0
    if not keep.any():
        out = np.zeros(lags)
        out[0] = 1.0
        return out
    return np.mean(cov[keep] / cov[keep, :1], axis=0)


def projected_autocorrelation(
    phi: np.ndarray, projector: np.ndarray, run_lengths: tuple[int, ...], lags: int
) -> np.ndarray:
    """The expected pooled autocorrelation of AR(p) noise after the projection ``projector``.

    ``E[Σ_t r_t r_{t-k}] = tr(P Σ P L_k)`` for ``r = P e``, ``e ~ N(0, Σ)`` and the within-run lag-k
    shift ``L_k``; the ratio to lag 0 approximates the pooled normalised autocorrelation.

    Parameters
    ----------
    phi : ndarray, shape (p,)
        AR coefficients.
    projector : ndarray, shape (frames, frames)
        The residual projection.
    run_lengths : tuple of int
        Frames per run.
    lags : int
        How many lags.

    Returns
    -------
    ndarray, shape (lags,)
    """
    total = sum(run_lengths)
    sigma = np.zeros((total, total))
    start = 0
    for n in run_lengths:
        sigma[start : start + n, start : start + n] = toeplitz(ar_autocorrelation(phi, n))
        start += n
    cov = projector @ sigma @ projector
    out = np.zeros(lags)
    start = 0
    for n in run_lengths:
        block = cov[start : start + n, start : start + n]
        for k in range(min(lags, n)):
            out[k] += np.trace(block, offset=-k)
        start += n
    return out / out[0]


def corrected_coefficients(
    observed: np.ndarray, projector: np.ndarray, run_lengths: tuple[int, ...], iterations: int = 8
) -> np.ndarray:
    """AR(p) coefficients whose projected autocorrelation matches ``observed`` (lags 0 … p).

    Parameters
    ----------
    observed : ndarray, shape (p + 1,)
        Pooled autocorrelation of projected residuals.
    projector : ndarray, shape (frames, frames)
        The projection the residuals went through.
    run_lengths : tuple of int
        Frames per run.
    iterations : int
        Fixed-point steps.

    Returns
    -------
    ndarray, shape (p,)
    """
    target = np.array(observed, dtype=np.float64)
    rho = target.copy()
    phi = stable(yule_walker(rho))
    for _ in range(iterations):
        predicted = projected_autocorrelation(phi, projector, run_lengths, len(target))
        rho = rho + (target - predicted)
        rho[0] = 1.0
        phi = stable(yule_walker(np.concatenate([[1.0], np.clip(rho[1:], -0.99, 0.99)])))
    return phi


def stable(phi: np.ndarray) -> np.ndarray:
    """``phi`` shrunk until its AR polynomial's roots lie outside the unit circle (a stationary model).

    Parameters
    ----------
    phi : ndarray, shape (p,)

    Returns
    -------
    ndarray, shape (p,)
    """
    phi = np.asarray(phi, dtype=np.float64)
    if len(phi) == 1:
        return np.clip(phi, -MAX_COEFFICIENT, MAX_COEFFICIENT)
    for _ in range(50):
        roots = np.roots(np.concatenate([-phi[::-1], [1.0]]))
        if np.all(np.abs(roots) > 1.0 / MAX_COEFFICIENT):
            break
        phi = phi * 0.9
    return phi
