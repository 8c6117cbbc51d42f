"""What prfmap knows about its models, their parameters and the refiners, as plain data.

This module imports neither Keras nor a backend, so the command line, the sidecar writers and the docs
can read it before a backend is chosen. Everything model-specific that is not numerical lives here; the
numerics (a :class:`~prfmap.engine.models.PRFModel` subclass) live in ``models.py``.

Adding a model
--------------
1. Write a ``PRFModel`` subclass in ``models.py`` (its neural response and Jacobian) and add an instance
   to ``models.MODELS``, or call :func:`prfmap.engine.models.register_model` on it.
2. Add a :class:`ModelSpec` to :data:`MODELS` here (or call :func:`register_model`), listing the
   reported parameters in the order ``model.report`` returns them followed by ``amplitude`` and
   ``baseline``; a parameter no model had before also needs a :class:`Parameter` in :data:`PARAMETERS`
   (or :func:`register_parameter`).

Nothing else changes: the ``--model`` choices, the sidecars, the memory sizing and the fit read these.

Bounds
------
Every parameter has a :class:`Bound`: a lower and an upper :class:`Limit`, each a number times a
*reference* — a scale of the stimulus (:data:`STIMULUS_SCALES`: the stimulated radius, the field of
view, the pixel size), another parameter of the same unit (e.g. the surround's size is at least the
centre's ``sigma``), or nothing (an absolute value). :meth:`Bound.resolve` turns a bound into numbers
(or per-unit arrays) for one stimulus and one fit; :meth:`Bound.describe` into text for sidecars and
docs. A ``None`` limit means unbounded on that side.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import numpy as np

UNITS = {
    "deg": "degrees of visual angle",
    "%": "percent signal change",
    "1": "dimensionless",
}
"""The unit spellings parameters may use, and what each means."""

STIMULUS_SCALES = {
    "radius": "radius of the stimulated field: the largest eccentricity of a pixel ever stimulated (deg)",
    "fov": "full width of the aperture (deg)",
    "pixel": "distance between neighbouring aperture pixel centres (deg)",
}
"""Stimulus quantities a :class:`Limit` may be relative to (see ``Stimulus.scales``)."""

CENTRE_RADII = 2.0
"""pRF centres lie within this many stimulated radii of fixation (the field's practice is 1.5–2)."""

SURROUND_SCALE = (1.0, 20.0)
"""A surround or normalisation Gaussian is wider than the centre, and at most this many times wider."""

SURROUND_VANISHED = 0.01
"""A surround whose integral is below this fraction of the centre's (DoG ``amplitude_surround /
amplitude``), or a normalisation pool that changes the denominator by less than this fraction (DN
``amplitude_norm / baseline_norm``), has vanished: the fit is a Gaussian (``FitResult.flags``)."""


@dataclass(frozen=True)
class Limit:
    """One end of a bound: ``value``, or ``value`` times a reference quantity.

    Attributes
    ----------
    value : float
        The number (a multiplier when ``per`` is set).
    per : str, optional
        A stimulus scale (a key of :data:`STIMULUS_SCALES`) or the key of another parameter of the same
        unit; None for an absolute value.
    inclusive : bool
        Whether the limit itself is a valid value (``n <= 1``) or not (``n > 0``).
    """

    value: float
    per: str | None = None
    inclusive: bool = True

    def resolve(self, scales: Mapping[str, Any]) -> Any:
        """The limit's value; ``scales`` maps each reference used to a number or a per-unit array."""
        if self.per is None:
            return self.value
        if self.per not in scales:
            raise KeyError(f"the bound needs {self.per!r}; give it in scales")
        return self.value * scales[self.per]

    def describe(self) -> str:
        """The limit as text, e.g. ``"2 × radius"`` or ``"0"``."""
        number = f"{self.value:g}"
        return number if self.per is None else f"{number} × {self.per}"


@dataclass(frozen=True)
class Bound:
    """The valid range of a parameter: ``lower`` ≤ value ≤ ``upper`` (None: unbounded on that side)."""

    lower: Limit | None = None
    upper: Limit | None = None

    def resolve(self, scales: Mapping[str, Any] | None = None) -> tuple[Any, Any]:
        """``(low, high)`` as numbers or per-unit arrays; -inf / inf where unbounded.

        Parameters
        ----------
        scales : mapping, optional
            Values of the references the limits use: stimulus scales (``Stimulus.scales``) and, for
            limits relative to another parameter, that parameter's per-unit values.
        """
        scales = scales or {}
        low = -math.inf if self.lower is None else self.lower.resolve(scales)
        high = math.inf if self.upper is None else self.upper.resolve(scales)
        return low, high

    def references(self) -> tuple[str, ...]:
        """The stimulus scales and parameters this bound depends on."""
        return tuple(lim.per for lim in (self.lower, self.upper) if lim is not None and lim.per)

    def describe(self, name: str = "value") -> str:
        """The bound as text, e.g. ``"0 < n <= 1"``; ``"unbounded"`` when neither side is."""
        parts = []
        if self.lower is not None:
            parts.append(f"{self.lower.describe()} {'<=' if self.lower.inclusive else '<'}")
        parts.append(name)
        if self.upper is not None:
            parts.append(f"{'<=' if self.upper.inclusive else '<'} {self.upper.describe()}")
        return " ".join(parts) if len(parts) > 1 else "unbounded"


UNBOUNDED = Bound()


@dataclass(frozen=True)
class Parameter:
    """A reported parameter: how files, sidecars and results name it, its units and valid range.

    Attributes
    ----------
    key : str
        The snake_case key of ``FitResult.params`` (``sigma_surround``).
    units : str
        One of :data:`UNITS`.
    description : str
        One line for sidecars and docs.
    bound : Bound
        Valid range (see the module docstring).
    label : str
        The BIDS file label (``desc-<label>`` of a map): alphanumeric, by default the key without underscores.
    """

    key: str
    units: str
    description: str
    bound: Bound = UNBOUNDED
    label: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.key.replace("_", ""))
        if not re.fullmatch(r"[a-z0-9]+", self.label):
            raise ValueError(f"parameter {self.key!r}: a BIDS label must be lower-case alphanumeric")
        if self.units not in UNITS:
            raise ValueError(f"parameter {self.key!r}: units {self.units!r} not one of {', '.join(UNITS)}")


@dataclass(frozen=True)
class ModelSpec:
    """A pRF model as the command line, the sidecars and the memory sizing see it.

    Attributes
    ----------
    name : str
        ``--model`` value and ``model-<name>`` file entity (lower-case alphanumeric).
    description, citation : str
        What the model is and where it was published.
    parameters : tuple of str
        Reported parameter keys (of :data:`PARAMETERS`), in the order of ``FitResult.params``.
    gaussians : int
        Gaussians evaluated per unit (centre, surround...), for memory sizing.
    fixed : mapping
        Parameters held at a value unless the caller says otherwise (``fit_prf(fixed=...)``).
    """

    name: str
    description: str
    citation: str
    parameters: tuple[str, ...]
    gaussians: int = 1
    fixed: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]+", self.name):
            raise ValueError(f"model name {self.name!r}: a BIDS label must be lower-case alphanumeric")
        object.__setattr__(self, "fixed", MappingProxyType(dict(self.fixed)))

    @property
    def summary(self) -> str:
        """Description and citation in one line, e.g. for sidecars."""
        return f"{self.description} ({self.citation})"


@dataclass(frozen=True)
class RefinerSpec:
    """A refinement after the grid search, with its default iteration budget and tolerance."""

    name: str
    description: str
    max_iter: int = 0
    tol: float = 0.0


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
        Parameter("sigma", "deg", "pRF size: one standard deviation of the Gaussian", _SIZE),
        Parameter(
            "amplitude", "%", "response amplitude (percent signal change for the full pRF)", _NON_NEGATIVE
        ),
        Parameter("baseline", "%", "baseline (percent signal change)"),
        Parameter(
            "r2",
            "1",
            "variance explained by the model (fraction, after nuisance projection)",
            Bound(None, Limit(1.0)),
        ),
        Parameter(
            "cvr2",
            "1",
            "cross-validated variance explained: each run predicted by a fit of the "
            "others, one gain over all held-out runs, signed (prfmap.crossval)",
            Bound(Limit(-1.0), Limit(1.0)),
        ),
        Parameter(
            "polar_angle",
            "deg",
            "polar angle of the pRF centre",
            Bound(Limit(-180.0, inclusive=False), Limit(180.0)),
        ),
        Parameter(
            "eccentricity",
            "deg",
            "eccentricity of the pRF centre, hypot(x, y)",
            Bound(Limit(0.0), Limit(CENTRE_RADII, "radius")),
        ),
        Parameter(
            "n", "1", "compressive exponent of the CSS model", Bound(Limit(0.0, inclusive=False), Limit(1.0))
        ),
        Parameter("sigma_surround", "deg", "standard deviation of the suppressive surround", _WIDER),
        Parameter("amplitude_surround", "%", "amplitude of the suppressive surround", _NON_NEGATIVE),
        Parameter("sigma_norm", "deg", "standard deviation of the normalisation pool", _WIDER),
        Parameter("amplitude_norm", "1", "gain of the normalisation pool", _POSITIVE),
        Parameter("baseline_activation", "1", "baseline of the activation term (DN model)", _POSITIVE),
        Parameter("baseline_norm", "1", "baseline of the normalisation term (DN model)", _POSITIVE),
        Parameter(
            "status",
            "1",
            "fit status: a sum of the bits of STATUS_FLAGS (0: refined, converged, inside every bound)",
        ),
        Parameter("hrf_deriv", "1", "weight of the HRF's time derivative"),
        Parameter("hrf_disp", "1", "weight of the HRF's dispersion derivative"),
    )
}
"""Every reported parameter by key; ``FitResult.maps()`` and the sidecars use their labels."""

STATUS_FLAGS: dict[int, tuple[str, str]] = {
    1: (
        "no_signal",
        "no usable data (non-finite or constant after the nuisance projection) or no "
        "positive response anywhere on the grid: every parameter and r2 are NaN",
    ),
    2: (
        "grid_only",
        "not refined (the grid's r2 is below refine_r2_min): the grid point and its linear fit are written",
    ),
    4: (
        "at_bound",
        "the refinement stopped on a bound of a parameter other than sigma's floor, or "
        "the centre on the largest eccentricity (FitSettings.bounds): the estimate is written but "
        "the best fit may lie beyond the bound",
    ),
    8: ("not_converged", "the refinement used all its iterations without converging"),
    16: (
        "refinement_rejected",
        "the refinement ended outside the model's valid range (amplitude not "
        "positive or a non-finite cost): the start (grid point or seed) and its linear fit are "
        "written instead",
    ),
    32: (
        "surround_vanished",
        "the surround or normalisation pool of a DoG or DN fit vanished: the "
        "fit is that of a Gaussian and its extra parameters are not estimates",
    ),
    64: (
        "not_reproducible",
        "the held-out runs' correlation with the fold predictions is not "
        "significant (z of the cross-validation, autocorrelation-corrected, below the one-sided "
        "Bonferroni limit over the fitted units for a family-wise error of 0.05): the fit does not "
        "predict the held-out runs",
    ),
    128: (
        "size_at_floor",
        "sigma stopped at the resolution floor (one aperture pixel): the pRF is "
        "smaller than the stimulus resolves, sigma is an upper limit; the position is an estimate",
    ),
}
"""Bits of the ``status`` map; a unit's status is the sum of the bits that apply to it."""

STATUS_BITS: dict[str, int] = {name: bit for bit, (name, _) in STATUS_FLAGS.items()}
"""Each status flag's bit, by name."""

DOUBTFUL = ("at_bound", "not_converged", "refinement_rejected", "not_reproducible")
"""Flags that mark an estimate as doubtful: the report and the group level leave such units out."""

DOUBTFUL_BITS = sum(STATUS_BITS[name] for name in DOUBTFUL)
"""The bits of :data:`DOUBTFUL` together (a unit is doubtful when ``status & DOUBTFUL_BITS``)."""


def status_codes(status: Any) -> np.ndarray:
    """A status map (float, as written; NaN read as 0) as integer bit codes."""
    return np.nan_to_num(np.asarray(status, dtype=np.float64), nan=0.0).astype(np.int64)


def doubtful(status: Any) -> np.ndarray:
    """Per unit: the status map has a bit of :data:`DOUBTFUL`."""
    return (status_codes(status) & DOUBTFUL_BITS) != 0


DERIVED = ("r2", "polar_angle", "eccentricity")
"""Parameters every fit reports besides a model's own (``FitResult.maps()`` adds them)."""

HRF_PARAMETERS = ("hrf_deriv", "hrf_disp")
"""Per-unit HRF derivative weights, reported when the fit estimates them (``hrf="vertex"``)."""

HRF_OPTIONS = ("canonical", "participant", "vertex")
"""How a fit models the HRF: SPM's canonical response; one two-gamma response per participant,
estimated from its best units and then held fixed (:func:`prfmap.engine.fit.estimate_hrf`); or the
canonical response plus per-unit temporal and dispersion derivative weights."""
DEFAULT_HRF = "participant"
"""The ``--hrf`` default, chosen by measurement (docs/validation.md, "HRF default"). The engine's
``fit_prf`` keeps ``canonical``: a participant's HRF needs all its units, and the workflow estimates
it once per fit and fold and hands it to every chunk."""

_LINEAR = ("amplitude", "baseline")

MODELS: dict[str, ModelSpec] = {
    m.name: m
    for m in (
        ModelSpec(
            "gauss", "isotropic 2D Gaussian pRF", "Dumoulin & Wandell, 2008", ("x", "y", "sigma") + _LINEAR
        ),
        ModelSpec(
            "css", "compressive spatial summation", "Kay et al., 2013", ("x", "y", "sigma", "n") + _LINEAR
        ),
        ModelSpec(
            "dog",
            "difference of Gaussians",
            "Zuiderbaan et al., 2012",
            ("x", "y", "sigma", "sigma_surround", "amplitude_surround") + _LINEAR,
            gaussians=2,
        ),
        ModelSpec(
            "dn",
            "divisive normalisation",
            "Aqil et al., 2021",
            ("x", "y", "sigma", "sigma_norm", "amplitude_norm", "baseline_activation", "baseline_norm")
            + _LINEAR,
            gaussians=2,
            fixed={"baseline_norm": 1.0},
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
        ),
        RefinerSpec("sgd", "Adam gradient descent on the variable-projection cost", max_iter=400, tol=1e-5),
        RefinerSpec("none", "the grid search and linear fit alone"),
    )
}
"""Every refinement method by name, in the order the command line lists them."""


def get_model_spec(name: str) -> ModelSpec:
    """The catalogue entry of model ``name``; ValueError naming the choices when there is none."""
    try:
        return MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; choose from {', '.join(MODELS)}") from None


def get_refiner(name: str) -> RefinerSpec:
    """The catalogue entry of refiner ``name``; ValueError naming the choices when there is none."""
    try:
        return REFINERS[name]
    except KeyError:
        raise ValueError(f"unknown refine {name!r}; choose from {', '.join(REFINERS)}") from None


def parameter_by_label(label: str) -> Parameter | None:
    """The parameter whose BIDS file label is ``label`` (``sigmasurround``), or None."""
    return next((p for p in PARAMETERS.values() if p.label == label), None)


def register_parameter(parameter: Parameter) -> Parameter:
    """Add a parameter to :data:`PARAMETERS` (a new model's extra); its key and label must be new."""
    if parameter.key in PARAMETERS or parameter_by_label(parameter.label) is not None:
        raise ValueError(f"parameter {parameter.key!r} (label {parameter.label!r}) already exists")
    PARAMETERS[parameter.key] = parameter
    return parameter


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add a model to :data:`MODELS`; its parameters must be in :data:`PARAMETERS` already."""
    if spec.name in MODELS:
        raise ValueError(f"model {spec.name!r} already exists")
    unknown = [p for p in spec.parameters if p not in PARAMETERS]
    if unknown:
        raise ValueError(f"model {spec.name!r}: unknown parameters {unknown}; register them first")
    MODELS[spec.name] = spec
    return spec


def model_bounds(name: str, fit_hrf: bool = False) -> dict[str, Bound]:
    """Bounds of every parameter a fit of model ``name`` reports, derived ones included."""
    keys = get_model_spec(name).parameters + DERIVED + (HRF_PARAMETERS if fit_hrf else ())
    return {k: PARAMETERS[k].bound for k in keys}
