"""What prfmap knows about its models, their parameters, the refiners and the noise models: the registry.

This module imports neither Keras nor a backend, so the command line, the sidecar writers,
the report and the docs read it before a backend is chosen. Everything about a model or a refiner that
is not numerical lives here, in ONE entry per extension point; the numerics live in the class the entry
names (a :class:`~prfmap.engine.models.PRFModel` subclass, a solver of :mod:`prfmap.engine.solvers`),
which the engine imports when it first needs it.

Adding a model
--------------
Write a ``PRFModel`` subclass (its internal parameters, neural response and Jacobian, ``report``) in
any module, and register one :class:`ModelSpec` naming it::

    register_model(ModelSpec("toy", "a toy pRF", "Doe, 2026", ("x", "y", "sigma", Parameter("k", "1",
                             "a constant", Bound(Limit(0.0)), neutral=1.0), "amplitude", "baseline"),
                             reference="Doe J (2026). A toy.", implementation=ToyModel))

Its ``parameters`` are the keys ``FitResult.params`` reports, in order (the model's ``report``, then
``amplitude`` and ``baseline``); a new parameter is given as a :class:`Parameter` (units, bound, the
neutral value that pads units without a fit, its title in the report) and registered with the model.
The ``--model`` choices, the Boutiques descriptor's choices (:mod:`prfmap.cli.descriptor`), the
sidecars, the memory sizing, the fit, the cross-validation's padding and the report's methods text
(``reference``) all read the entry; :func:`prfmap.engine.models.get_model` checks that the class
reports what the entry lists.

Adding a refiner
----------------
Write a solver (a frozen dataclass with ``init``, ``step``, ``terminate`` and ``postprocess``,
:class:`prfmap.engine.solvers.Solver`) and register one :class:`RefinerSpec` naming it, with its
default iteration budget, tolerance, constructor options and reference.

Adding a noise model
--------------------
Write a :class:`prfmap.engine.noise.BaseNoiseModel` subclass (its ``estimate`` from pooled residuals,
each run's covariance, its record) and register one :class:`NoiseSpec` naming it, with its
``estimate`` options; the whitening is the contract's.

Bounds are :class:`~prfmap.engine.catalog.bounds.Bound` values (:mod:`prfmap.engine.catalog.bounds`);
the fit status bits are in :mod:`prfmap.engine.catalog.status`. Both are re-exported here.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from prfmap.engine.catalog.bounds import STIMULUS_SCALES as STIMULUS_SCALES
from prfmap.engine.catalog.bounds import UNBOUNDED as UNBOUNDED
from prfmap.engine.catalog.bounds import Bound as Bound
from prfmap.engine.catalog.bounds import Limit as Limit
from prfmap.engine.catalog.specs import AMPLITUDE_MAX as AMPLITUDE_MAX
from prfmap.engine.catalog.specs import CENTRE_RADII as CENTRE_RADII
from prfmap.engine.catalog.specs import NORM_GAIN_MAX as NORM_GAIN_MAX
from prfmap.engine.catalog.specs import SURROUND_SCALE as SURROUND_SCALE
from prfmap.engine.catalog.specs import SURROUND_VANISHED as SURROUND_VANISHED
from prfmap.engine.catalog.specs import UNITS as UNITS
from prfmap.engine.catalog.specs import ModelSpec as ModelSpec
from prfmap.engine.catalog.specs import NoiseSpec as NoiseSpec
from prfmap.engine.catalog.specs import Parameter as Parameter
from prfmap.engine.catalog.specs import RefinerSpec as RefinerSpec
from prfmap.engine.catalog.status import CENTRE_SE_LIMIT as CENTRE_SE_LIMIT
from prfmap.engine.catalog.status import DOUBTFUL as DOUBTFUL
from prfmap.engine.catalog.status import DOUBTFUL_BITS as DOUBTFUL_BITS
from prfmap.engine.catalog.status import SIGMA_WIDTH_LIMIT as SIGMA_WIDTH_LIMIT
from prfmap.engine.catalog.status import STATUS_BITS as STATUS_BITS
from prfmap.engine.catalog.status import STATUS_FLAGS as STATUS_FLAGS
from prfmap.engine.catalog.status import Z95 as Z95
from prfmap.engine.catalog.status import Z95_ONE_SIDED as Z95_ONE_SIDED
from prfmap.engine.catalog.status import doubtful as doubtful
from prfmap.engine.catalog.status import share_of as share_of
from prfmap.engine.catalog.status import status_codes as status_codes

_CENTRE = Bound(Limit(-CENTRE_RADII, "radius"), Limit(CENTRE_RADII, "radius"))
_SIZE = Bound(Limit(1.0, "pixel"), Limit(1.0, "fov"))
_WIDER = Bound(Limit(SURROUND_SCALE[0], "sigma", inclusive=False), Limit(SURROUND_SCALE[1], "sigma"))
_POSITIVE = Bound(Limit(0.0, inclusive=False))
_NON_NEGATIVE = Bound(Limit(0.0))

PARAMETERS: dict[str, Parameter] = {
    p.key: p
    for p in (
        Parameter(
            "x", "deg", "horizontal position of the pRF centre (positive: right visual field)", _CENTRE
        ),
        Parameter("y", "deg", "vertical position of the pRF centre (positive: upper visual field)", _CENTRE),
        Parameter(
            "sigma",
            "deg",
            "pRF size: one standard deviation of the Gaussian",
            _SIZE,
            neutral=1.0,
            title="pRF size σ",
        ),
        Parameter(
            "amplitude",
            "%",
            "response amplitude (percent signal change for the full pRF)",
            Bound(Limit(0.0), Limit(AMPLITUDE_MAX)),
        ),
        Parameter("baseline", "%", "baseline (percent signal change)"),
        Parameter(
            "r2",
            "1",
            "variance explained by the model (fraction, after nuisance projection)",
            Bound(None, Limit(1.0)),
            title="r²",
        ),
        Parameter(
            "cvr2",
            "1",
            "cross-validated variance explained: each run predicted by a fit of the "
            "others, one gain over all held-out runs, signed (prfmap.participant.crossval)",
            Bound(Limit(-1.0), Limit(1.0)),
            title="cross-validated r²",
        ),
        Parameter(
            "polar_angle",
            "deg",
            "polar angle of the pRF centre",
            Bound(Limit(-180.0, inclusive=False), Limit(180.0)),
            title="polar angle",
        ),
        Parameter(
            "eccentricity",
            "deg",
            "eccentricity of the pRF centre, hypot(x, y)",
            Bound(Limit(0.0), Limit(CENTRE_RADII, "radius")),
        ),
        Parameter(
            "n",
            "1",
            "compressive exponent of the CSS model",
            Bound(Limit(0.0, inclusive=False), Limit(1.0)),
            neutral=0.5,
        ),
        Parameter(
            "sigma_surround", "deg", "standard deviation of the suppressive surround", _WIDER, neutral=2.0
        ),
        Parameter("amplitude_surround", "%", "amplitude of the suppressive surround", _NON_NEGATIVE),
        Parameter("sigma_norm", "deg", "standard deviation of the normalisation pool", _WIDER, neutral=2.0),
        Parameter(
            "amplitude_norm",
            "1",
            "gain of the normalisation pool",
            Bound(Limit(0.0, inclusive=False), Limit(NORM_GAIN_MAX)),
            neutral=1.0,
        ),
        Parameter(
            "baseline_activation", "1", "baseline of the activation term (DN model)", _POSITIVE, neutral=1.0
        ),
        Parameter(
            "baseline_norm", "1", "baseline of the normalisation term (DN model)", _POSITIVE, neutral=1.0
        ),
        Parameter(
            "status",
            "1",
            "fit status: a sum of the bits of STATUS_FLAGS (0: refined, converged, inside every bound)",
        ),
        Parameter("hrf_deriv", "1", "weight of the HRF's time derivative"),
        Parameter("hrf_disp", "1", "weight of the HRF's dispersion derivative"),
        Parameter(
            "hrf_delay",
            "s",
            "peak delay of the unit's own HRF: the fit's, moved per unit under --delay-prior spread "
            "(prfmap.engine.fit.delay_prior)",
            neutral=6.0,
        ),
    )
}
"""Every reported parameter by key; ``FitResult.maps()`` and the sidecars use their labels."""


DERIVED = ("r2", "polar_angle", "eccentricity")
"""Parameters every fit reports besides a model's own (``FitResult.maps()`` adds them)."""

HRF_PARAMETERS = ("hrf_deriv", "hrf_disp")
"""Per-unit HRF derivative weights, reported when the fit estimates them (``hrf="vertex"``)."""

TOOK_GAUSSIAN = "took_gaussian"
"""The per-unit flag (``FitResult.flags``) of a model seeded from a Gaussian fit of the same data (a
comparison of models) where a unit keeps that Gaussian fit, below ``refine_r2_min``: its time courses
are that Gaussian's."""

HRF_OPTIONS = ("canonical", "participant", "vertex")
"""How a fit models the HRF: SPM's canonical response; one two-gamma response per participant,
estimated from its best units and then held fixed (:func:`prfmap.engine.estimate.hrf.estimate_hrf`,
handed to ``fit_prf`` as an ``HRF``); or the
canonical response plus per-unit temporal and dispersion derivative weights."""
DEFAULT_HRF = "participant"
"""The ``--hrf`` default, chosen by measurement (docs/validation.md, "HRF default"). The engine's
``fit_prf`` keeps ``canonical``: a participant's HRF needs all its units, and the workflow estimates
it once per fit and fold and hands it to every chunk."""

AUTOREGRESSIVE = "prfmap.engine.noise:NoiseModel"
"""The class of the built-in autoregressive noise models (``ar<p>``, option ``order``)."""

NOISE_MODELS: dict[str, NoiseSpec] = {
    n.name: n
    for n in (
        NoiseSpec("ols", "ordinary least squares (no prewhitening)"),
        *(
            NoiseSpec(
                f"ar{p}",
                f"AR({p}) noise pooled over the units, prewhitened run by run",
                AUTOREGRESSIVE,
                {"order": p},
            )
            for p in (1, 2, 3)
        ),
    )
}
"""Noise models of ``--noise-model``: ordinary least squares (white noise), or an autoregressive
model of order 1–3 pooled over the units, estimated once per fit and fold before it
(:func:`prfmap.engine.estimate.noise.estimate_noise`, with the class and options the entry names),
that the refinement and the standard errors prewhiten with (generalised least squares). The command
line's choices, the estimate and the report's words all read this registry."""
DEFAULT_NOISE = "ar1"
"""The ``--noise-model`` default, chosen by measurement (docs/validation.md, "Noise model")."""

COVARIANCES = {
    "laplace": "Laplace (Gauss–Newton): the inverse information times the residual variance",
    "sandwich": "sandwich (Huber–White) with Newey–West's autocorrelation-consistent meat",
}
"""How the standard errors are computed (``--covariance``): the model's own curvature, right when the
model and the noise model are; or the information's inverse around the scores' observed covariance,
which holds up when the residuals are not what the noise model says
(:func:`prfmap.engine.fit.uncertainty.parameter_uncertainty`)."""
SIGMA_PRIORS = ("none", "eccentricity")
"""``--sigma-prior``: the maximum-likelihood σ, or σ's posterior mode under an empirical-Bayes prior on
log σ given eccentricity (:mod:`prfmap.engine.fit.sigma_prior`)."""
DELAY_PRIORS = ("none", "spread")
"""``--delay-prior``: every unit under the fit's HRF, or each refined unit's HRF delay and σ at their
joint posterior mode, the delay's prior the participant's between-vertex spread
(:mod:`prfmap.engine.fit.delay_prior`)."""
DEFAULT_DELAY_PRIOR = "spread"
"""The ``--delay-prior`` default, chosen by measurement (docs/validation.md, "A prior on each vertex's
HRF delay"); the engine's ``fit_prf`` keeps ``none``."""
DEFAULT_SIGMA_PRIOR = "eccentricity"
"""The ``--sigma-prior`` default, chosen by measurement (docs/validation.md, "Prior information on σ").
The engine's ``fit_prf`` keeps ``none``: a participant's prior is estimated once per fit and fold
(from a pilot sample of its units) and handed to every chunk."""
DEFAULT_COVARIANCE = "laplace"
"""The ``--covariance`` default, chosen by measurement (docs/validation.md, "Robust standard errors")."""

_LINEAR = ("amplitude", "baseline")
_MODELS = "prfmap.engine.models.gaussians"

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec(
            "gauss",
            "isotropic 2D Gaussian pRF",
            "Dumoulin & Wandell, 2008",
            ("x", "y", "sigma") + _LINEAR,
            reference="Dumoulin SO, Wandell BA (2008). Population receptive field estimates in human visual "
            "cortex. NeuroImage 39(2):647-660. doi:10.1016/j.neuroimage.2007.09.034",
            implementation=f"{_MODELS}:GaussModel",
        ),
        ModelSpec(
            "css",
            "compressive spatial summation",
            "Kay et al., 2013",
            ("x", "y", "sigma", "n") + _LINEAR,
            reference="Kay KN, Winawer J, Mezer A, Wandell BA (2013). Compressive spatial summation in human "
            "visual cortex. J Neurophysiol 110(2):481-494. doi:10.1152/jn.00105.2013",
            implementation=f"{_MODELS}:CSSModel",
        ),
        ModelSpec(
            "dog",
            "difference of Gaussians",
            "Zuiderbaan et al., 2012",
            ("x", "y", "sigma", "sigma_surround", "amplitude_surround") + _LINEAR,
            gaussians=2,
            reference="Zuiderbaan W, Harvey BM, Dumoulin SO (2012). Modeling center-surround configurations "
            "in population receptive fields using fMRI. J Vis 12(3):10. doi:10.1167/12.3.10",
            implementation=f"{_MODELS}:DoGModel",
        ),
        ModelSpec(
            "dn",
            "divisive normalisation",
            "Aqil et al., 2021",
            ("x", "y", "sigma", "sigma_norm", "amplitude_norm", "baseline_activation", "baseline_norm")
            + _LINEAR,
            gaussians=2,
            fixed={"baseline_norm": 1.0},
            reference="Aqil M, Knapen T, Dumoulin SO (2021). Divisive normalization unifies disparate "
            "response signatures throughout the human visual hierarchy. PNAS 118(46):e2108713118. "
            "doi:10.1073/pnas.2108713118",
            implementation=f"{_MODELS}:DNModel",
        ),
    )
}
"""Every model by name, in the order the command line lists them."""

REFINERS: dict[str, RefinerSpec] = {
    r.name: r
    for r in (
        RefinerSpec(
            "lm",
            "Levenberg-Marquardt with the linear weights solved for (variable projection)",
            max_iter=30,
            tol=1e-4,
            solver="prfmap.engine.solvers.levenberg_marquardt:LevenbergMarquardt",
            reference="Marquardt DW (1963). An algorithm for least-squares estimation of nonlinear "
            "parameters. J Soc Ind Appl Math 11(2):431-441. doi:10.1137/0111030",
        ),
        RefinerSpec(
            "sgd",
            "Adam gradient descent on the variable-projection cost",
            max_iter=400,
            tol=1e-5,
            solver="prfmap.engine.solvers.adam:Adam",
            options={"learning_rate": 0.05},
            reference="Kingma DP, Ba J (2015). Adam: a method for stochastic optimization. ICLR. "
            "arXiv:1412.6980",
        ),
        RefinerSpec("none", "the grid search and linear fit alone"),
    )
}
"""Every refinement method by name, in the order the command line lists them."""


def import_path(target: Any, base: type | None = None, entry: str = "") -> Any:
    """The implementation a catalogue entry names: ``target`` itself, or what its path names.

    Entries may name their class by a ``"module:Name"`` path, so that this package imports no Keras;
    the engine resolves it here when it first needs the class (a model's, a refiner's solver, a noise
    model's).

    Parameters
    ----------
    target : str or object
        ``"package.module:Name"`` (imported, then its attribute ``Name``), or the object itself.
    base : type, optional
        The contract the object must be a subclass of.
    entry : str
        The entry, in the error's words (``"model 'css'"``).

    Returns
    -------
    object
        The object named.

    Raises
    ------
    ValueError
        A string that is not ``"module:Name"``, or an object that is not a subclass of ``base``.
    """
    found = target
    if isinstance(target, str):
        module, sep, name = target.partition(":")
        if not (module and sep and name):
            raise ValueError(f"{target!r}: name an implementation as 'package.module:Name'")
        found = getattr(importlib.import_module(module), name)
    if base is not None and not (isinstance(found, type) and issubclass(found, base)):
        raise ValueError(f"{entry}: its implementation {found!r} is not a {base.__name__} subclass")
    return found


def get_model_spec(name: str) -> ModelSpec:
    """The catalogue entry of a model.

    Parameters
    ----------
    name : str
        A key of :data:`MODELS`.

    Returns
    -------
    ModelSpec

    Raises
    ------
    ValueError
        No such model (the message lists the choices).
    """
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}") from None


def get_refiner(name: str) -> RefinerSpec:
    """The catalogue entry of a refiner.

    Parameters
    ----------
    name : str
        A key of :data:`REFINERS`.

    Returns
    -------
    RefinerSpec

    Raises
    ------
    ValueError
        No such refiner (the message lists the choices).
    """
    try:
        return REFINERS[name]
    except KeyError:
        raise ValueError(f"unknown refine {name!r}; choose from {', '.join(REFINERS)}") from None


def visual_field_polar(x: Any, y: Any) -> tuple[np.ndarray, np.ndarray]:
    """Polar angle and eccentricity of pRF centres, the one definition every output uses.

    Polar angle is ``atan2(y, x)`` in degrees, in (-180, 180] (0 the right horizontal meridian, 90
    the upper vertical); eccentricity ``hypot(x, y)``.

    Parameters
    ----------
    x, y : array-like
        Centres, degrees of visual angle.

    Returns
    -------
    polar_angle, eccentricity : ndarray
    """
    x, y = np.asarray(x), np.asarray(y)
    polar = np.degrees(np.arctan2(y, x))
    return np.where(polar == -180.0, 180.0, polar), np.hypot(x, y)


def get_noise_model(name: str) -> NoiseSpec:
    """The catalogue entry of a noise model.

    Parameters
    ----------
    name : str
        A key of :data:`NOISE_MODELS`.

    Returns
    -------
    NoiseSpec

    Raises
    ------
    ValueError
        No such noise model (the message lists the choices).
    """
    try:
        return NOISE_MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown noise model {name!r}; choose from {', '.join(NOISE_MODELS)}") from None


def parameter_by_label(label: str) -> Parameter | None:
    """The parameter whose BIDS file label is ``label``.

    Parameters
    ----------
    label : str
        A file label (``sigmasurround``).

    Returns
    -------
    Parameter or None
        None when no parameter has that label.
    """
    return next((p for p in PARAMETERS.values() if p.label == label), None)


def register_parameter(parameter: Parameter) -> Parameter:
    """Add a parameter to :data:`PARAMETERS` (a new model's extra).

    Parameters
    ----------
    parameter : Parameter
        Its key and label must be new, unless it is the very same parameter.

    Returns
    -------
    Parameter
    """
    if PARAMETERS.get(parameter.key) == parameter:
        return parameter
    if parameter.key in PARAMETERS or parameter_by_label(parameter.label) is not None:
        raise ValueError(f"parameter {parameter.key!r} (label {parameter.label!r}) already exists")
    PARAMETERS[parameter.key] = parameter
    return parameter


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model to :data:`MODELS`, with the parameters it defines.

    Parameters
    ----------
    spec : ModelSpec
        A new name; every parameter either in :data:`PARAMETERS` or in ``spec.defines``.

    Returns
    -------
    ModelSpec
    """
    if spec.name in MODELS:
        raise ValueError(f"model {spec.name!r} already exists")
    if spec.implementation is None:
        raise ValueError(f"model {spec.name!r}: name its PRFModel subclass (implementation=)")
    defined = {p.key for p in spec.defines}
    unknown = [p for p in spec.parameters if p not in PARAMETERS and p not in defined]
    if unknown:
        raise ValueError(f"model {spec.name!r}: unknown parameters {unknown}; give them as Parameter values")
    for parameter in spec.defines:
        register_parameter(parameter)
    MODELS[spec.name] = spec
    return spec


def register_refiner(spec: RefinerSpec) -> RefinerSpec:
    """Add a refiner to :data:`REFINERS`.

    Parameters
    ----------
    spec : RefinerSpec
        A new name and the solver it constructs.

    Returns
    -------
    RefinerSpec
    """
    if spec.name in REFINERS:
        raise ValueError(f"refiner {spec.name!r} already exists")
    if spec.solver is None:
        raise ValueError(f"refiner {spec.name!r}: name its solver class (solver=)")
    REFINERS[spec.name] = spec
    return spec


def register_noise_model(spec: NoiseSpec) -> NoiseSpec:
    """Add a noise model to :data:`NOISE_MODELS`.

    Parameters
    ----------
    spec : NoiseSpec
        A new name, its words, its class (or ``"module:Class"`` path) and the class' options.

    Returns
    -------
    NoiseSpec
    """
    if spec.name in NOISE_MODELS:
        raise ValueError(f"noise model {spec.name!r} already exists")
    if spec.implementation is None:
        raise ValueError(f"noise model {spec.name!r}: name its BaseNoiseModel subclass (implementation=)")
    NOISE_MODELS[spec.name] = spec
    return spec


def model_bounds(name: str, fit_hrf: bool = False) -> dict[str, Bound]:
    """Bounds of every parameter a fit of a model reports, derived ones included.

    Parameters
    ----------
    name : str
        A key of :data:`MODELS`.
    fit_hrf : bool
        Include the per-unit HRF derivative weights.

    Returns
    -------
    dict
        Parameter key → :class:`Bound`.
    """
    keys = get_model_spec(name).parameters + DERIVED + (HRF_PARAMETERS if fit_hrf else ())
    return {k: PARAMETERS[k].bound for k in keys}
