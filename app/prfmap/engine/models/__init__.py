"""The contract of a pRF model (:class:`PRFModel`) and the lookup of the registered ones (:func:`get_model`).

A model maps per-unit parameters ``theta`` (units, K) to a neural time course (units, frames), with
the analytic Jacobian of that time course, used by Levenberg–Marquardt; gradient refiners
differentiate the same function with the backend's autodiff. Amplitudes (and HRF-derivative weights)
are linear and are solved for, not listed here. The built-in models live in
:mod:`prfmap.engine.models.gaussians`; every model is found through its catalogue entry
(:data:`prfmap.engine.catalog.MODELS`), which names its class.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Mapping
from typing import Any, NamedTuple

import numpy as np
from keras import ops

from prfmap.engine import catalog
from prfmap.engine.models.transforms import InternalParameter, transform_of
from prfmap.engine.stimulus import StimulusTensors


class InternalBounds(NamedTuple):
    """Where a refinement keeps each unit's internal parameters."""

    lower: np.ndarray  # (K,) internal values; -inf where unbounded
    upper: np.ndarray  # (K,) internal values; inf where unbounded
    eccentricity: float  # the centre (x, y: columns 0 and 1) stays within this distance of fixation


class PRFModel:
    """Base class: a named model with internal parameters and a neural response.

    Its ``name`` is its catalogue entry's, set on the instance :func:`get_model` makes (one per
    entry); a class states its parameters, the entry states what they are.

    A model with parameters beyond the Gaussian's ``x, y, sigma`` lists in ``seed_grid`` the values of
    those extras (internal names) tried for each unit around its Gaussian grid start (the seed search of
    ``fit_prf``); a ``sigma`` entry multiplies the unit's Gaussian size.
    """

    name: str = ""
    params: tuple[InternalParameter, ...] = ()
    seed_grid: Mapping[str, tuple[float, ...]] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """Internal parameter names in column order."""
        return tuple(p.name for p in self.params)

    def natural(self, u: Any) -> tuple[Any, Any]:
        """Natural parameters (units, K) and d natural / d internal (units, K) from internal ``u``.

        Parameters
        ----------
        u : tensor, shape (units, K)
            Internal parameters.

        Returns
        -------
        theta : tensor, shape (units, K)
            Natural parameters.
        derivative : tensor, shape (units, K)
            d natural / d internal.
        """
        cols = [transform_of(p).natural(u[:, k]) for k, p in enumerate(self.params)]
        return ops.stack([c[0] for c in cols], axis=1), ops.stack([c[1] for c in cols], axis=1)

    def internal(self, theta: np.ndarray) -> np.ndarray:
        """Internal (unconstrained) values of natural parameters (units, K), numpy.

        Parameters
        ----------
        theta : ndarray, shape (units, K)
            Natural parameters.

        Returns
        -------
        ndarray, shape (units, K)
        """
        return np.stack([transform_of(p).internal(theta[:, k]) for k, p in enumerate(self.params)], axis=1)

    def bounds(self, scales: Mapping[str, float]) -> InternalBounds:
        """The bounds of the internal parameters for a stimulus of ``scales``.

        The catalogue's bounds of the parameters the optimisers move directly (``identity`` and
        ``exp`` transforms: the centre and the size) mapped to internal values; -inf / inf where a
        parameter has no catalogue bound or its transform bounds it already (``scale``, ``sigmoid``);
        and the catalogue's largest eccentricity of the centre (columns 0 and 1, ``x`` and ``y``).

        Parameters
        ----------
        scales : mapping
            The stimulus' scales (``Stimulus.scales``).

        Returns
        -------
        InternalBounds
        """
        low, high = np.full(len(self.params), -np.inf), np.full(len(self.params), np.inf)
        for k, p in enumerate(self.params):
            transform = transform_of(p)
            if transform.held_by_bounds and p.name in catalog.PARAMETERS:
                low[k], high[k] = transform.internal_limits(*catalog.PARAMETERS[p.name].bound.resolve(scales))
        return InternalBounds(low, high, float(catalog.PARAMETERS["eccentricity"].bound.resolve(scales)[1]))

    def neural(self, theta: Any, stim: StimulusTensors, jacobian: bool) -> Any:
        """Neural time course (1 + K if jacobian, units, frames): response, then d/d theta_k.

        Parameters
        ----------
        theta : tensor, shape (units, K)
            Natural parameters.
        stim : StimulusTensors
            The stimulated pixels.
        jacobian : bool
            Also the derivatives.

        Returns
        -------
        tensor, shape (1 + K if jacobian else 1, units, frames)
        """
        raise NotImplementedError

    def candidate_sizes(self, candidates: np.ndarray) -> np.ndarray | None:
        """Each seed candidate's size of the Gaussian that varies, relative to the unit's (numpy).

        Where a unit's candidates share all but that size and the extras, their Gaussians take a few
        sizes, computed once per unit (:meth:`candidate_neural`); None where they do not (or the model
        does not implement it).

        Parameters
        ----------
        candidates : ndarray, shape (units, C, K)
            Natural parameters of each unit's candidates.

        Returns
        -------
        ndarray, shape (units, C), or None
        """
        return None

    def candidate_neural(self, theta: Any, sizes: Any, which: Any, stim: StimulusTensors) -> Any:
        """Neural responses (units, C, frames) of seed candidates that share their Gaussians.

        The candidates' varying Gaussian (:meth:`candidate_sizes`) is ``sizes[which]`` times the
        unit's; the responses equal :meth:`neural`'s of the candidates.

        Parameters
        ----------
        theta : tensor, shape (units, C, K)
            Natural parameters of the candidates.
        sizes : tensor, shape (S,)
            The distinct relative sizes.
        which : tensor of int, shape (units, C)
            Each candidate's among ``sizes``.
        stim : StimulusTensors
            The stimulated pixels.

        Returns
        -------
        tensor, shape (units, C, frames)
        """
        raise NotImplementedError

    def as_gaussian(self, theta: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """The model's parameters at which it is the Gaussian of ``theta``'s centre and size.

        Its extras at the values that make its response the Gaussian's (CSS ``n`` 1, no surround, no
        normalisation pool), and the gain of that response relative to the Gaussian's.

        Parameters
        ----------
        theta : ndarray, shape (units, K)
            Natural parameters.

        Returns
        -------
        tuple of ndarray or None
            Natural parameters (units, K) and gains (units,); None for a model that contains no
            Gaussian.
        """
        return None

    def report(self, theta: np.ndarray, amplitude: np.ndarray) -> dict[str, np.ndarray]:
        """Reported (snake_case) parameters from natural internal parameters and the amplitude.

        Parameters
        ----------
        theta : ndarray, shape (units, K)
            Natural parameters.
        amplitude : ndarray, shape (units,)
            The fitted amplitude.

        Returns
        -------
        dict
            Reported key → (units,) values, in the catalogue entry's order.
        """
        return {"x": theta[:, 0], "y": theta[:, 1], "sigma": theta[:, 2]}

    def surround_strength(self, theta: np.ndarray) -> np.ndarray | None:
        """The surround's (or normalisation pool's) weight relative to the centre, per unit; None if none.

        Parameters
        ----------
        theta : ndarray, shape (units, K)
            Natural parameters.

        Returns
        -------
        ndarray or None
        """
        return None

    def flags(self, theta: np.ndarray) -> dict[str, np.ndarray]:
        """Per-unit boolean flags of natural parameters (units, K).

        ``surround_vanished`` (models with a surround or normalisation pool): its relative weight is below
        :data:`prfmap.engine.catalog.SURROUND_VANISHED`, so the fit is a Gaussian and the surround's size
        means nothing.

        Parameters
        ----------
        theta : ndarray, shape (units, K)
            Natural parameters.

        Returns
        -------
        dict
            Flag name → (units,) bool.
        """
        strength = self.surround_strength(theta)
        return {} if strength is None else {"surround_vanished": strength < catalog.SURROUND_VANISHED}

    def seed_candidates(self, theta: np.ndarray, keep: Collection[str] = ()) -> np.ndarray:
        """Starting points (units, C, K) around each unit's natural parameters ``theta`` (units, K).

        The Cartesian product of :attr:`seed_grid`, leaving the parameters named in ``keep`` (fixed ones)
        as they are in ``theta``; one candidate per unit (``theta`` itself) when nothing is left to try.

        Parameters
        ----------
        theta : ndarray, shape (units, K)
            Each unit's natural parameters.
        keep : collection of str
            Parameters left as they are.

        Returns
        -------
        ndarray, shape (units, C, K)
        """
        axes = {k: v for k, v in self.seed_grid.items() if k not in keep}
        if not axes:
            return theta[:, None, :].copy()
        combos = np.array(list(itertools.product(*axes.values())), dtype=np.float64)
        out = np.repeat(theta[:, None, :], len(combos), axis=1)
        for i, name in enumerate(axes):
            k = self.names.index(name)
            out[:, :, k] = out[:, :, k] * combos[:, i] if name == "sigma" else combos[:, i]
        return out

    def from_report(self, params: dict[str, np.ndarray]) -> np.ndarray:
        """Natural internal parameters (units, K) from reported parameters.

        Parameters
        ----------
        params : dict
            Reported parameters (scalars or (units,) arrays); missing ones take their defaults.

        Returns
        -------
        ndarray, shape (units, K)
        """
        n = len(np.atleast_1d(params["x"]))
        cols = []
        for p in self.params:
            value = params.get(p.name, p.default)
            cols.append(np.broadcast_to(np.asarray(value, dtype=np.float64), (n,)))
        return np.stack(cols, axis=1)


_INSTANCES: dict[str, PRFModel] = {}
"""One instance per model name: the engine's compiled functions are keyed by it."""


def reported_parameters(model: PRFModel) -> tuple[str, ...]:
    """The keys a fit of a model reports, in order: ``model.report``'s, then amplitude and baseline.

    Parameters
    ----------
    model : PRFModel

    Returns
    -------
    tuple of str
    """
    theta = np.ones((1, len(model.params)))
    return tuple(model.report(theta, np.ones(1))) + ("amplitude", "baseline")


def implementation(spec: catalog.ModelSpec) -> type[PRFModel]:
    """The :class:`PRFModel` subclass a catalogue entry names (imported when given as a path).

    Parameters
    ----------
    spec : ModelSpec

    Returns
    -------
    type
    """
    return catalog.import_path(spec.implementation, PRFModel, f"model {spec.name!r}")


def get_model(name: str) -> PRFModel:
    """The model registered as ``name`` in :data:`prfmap.engine.catalog.MODELS`, ready to fit.

    Parameters
    ----------
    name : str
        A key of :data:`prfmap.engine.catalog.MODELS`.

    Returns
    -------
    PRFModel
        One instance per name and class (the compile key of the engine's functions).

    Raises
    ------
    ValueError
        No such model, or its class reports other parameters than its catalogue entry lists.
    """
    spec = catalog.get_model_spec(name)
    cls = implementation(spec)
    model = _INSTANCES.get(name)
    if type(model) is not cls:
        model = cls()
        model.name = spec.name
        reported = reported_parameters(model)
        if reported != spec.parameters:
            raise ValueError(
                f"model {name!r}: {cls.__name__} reports {reported}, its catalogue entry lists "
                f"{spec.parameters}"
            )
        _INSTANCES[name] = model
    return model


def model_parameters(name: str) -> tuple[str, ...]:
    """Reported parameter names of a model, without the HRF weights (from the catalogue).

    Parameters
    ----------
    name : str
        A model of the catalogue.

    Returns
    -------
    tuple of str
    """
    return catalog.get_model_spec(get_model(name).name).parameters


def free_mask(model: PRFModel, fixed: Mapping[str, float]) -> tuple[np.ndarray, dict[str, float]]:
    """1 for each fitted, 0 for each fixed internal parameter, and the fixed values.

    ``fixed`` adds to (or overrides) the defaults of the model's catalogue entry.

    Parameters
    ----------
    model : PRFModel
        The model.
    fixed : mapping
        Internal parameter → value, added to (or overriding) the catalogue entry's.

    Returns
    -------
    free : ndarray, shape (K,)
        1 or 0 per internal parameter.
    values : dict
        The fixed values.
    """
    fixed = {**catalog.MODELS[model.name].fixed, **dict(fixed)}
    unknown = set(fixed) - set(model.names)
    if unknown:
        raise ValueError(
            f"cannot fix {sorted(unknown)} of model {model.name!r}; fixable: {', '.join(model.names)}"
        )
    return np.array([0.0 if n in fixed else 1.0 for n in model.names]), fixed


def floatx(dtype: str) -> str:
    """Validate a float dtype name.

    Parameters
    ----------
    dtype : str
        ``float32`` or ``float64``.

    Returns
    -------
    str
        ``dtype``; ValueError for any other.
    """
    if dtype not in ("float32", "float64"):
        raise ValueError(f"dtype must be float32 or float64, got {dtype!r}")
    return dtype


__all__ = ["PRFModel", "free_mask", "get_model", "model_parameters", "reported_parameters"]
