"""The kinds of entries of the catalogue (:mod:`prfmap.engine.catalog`): parameters, models, refiners.

Plain frozen data: this module imports nothing but :mod:`prfmap.engine.catalog.bounds`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from prfmap.engine.catalog.bounds import UNBOUNDED, Bound

UNITS = {
    "deg": "degrees of visual angle",
    "%": "percent signal change",
    "1": "dimensionless",
    "s": "seconds",
}
"""The unit spellings parameters may use, and what each means."""

CENTRE_RADII = 2.0
"""pRF centres lie within this many stimulated radii of fixation (the field's practice is 1.5–2)."""

SURROUND_SCALE = (1.0, 20.0)
"""A surround or normalisation Gaussian is wider than the centre, and at most this many times wider."""

SURROUND_VANISHED = 0.01
"""A surround whose integral is below this fraction of the centre's (DoG ``amplitude_surround /
amplitude``), or a normalisation pool that changes the denominator by less than this fraction (DN
``amplitude_norm / baseline_norm``), has vanished: the fit is a Gaussian (``FitResult.flags``)."""

AMPLITUDE_MAX = 100.0
"""Largest amplitude (percent signal change of the fully stimulated pRF) a fit may report.

No BOLD response doubles the mean signal; fits that need more are pRFs placed where the stimulus
barely reaches them (a sliver of a pRF scaled up to explain the data) or noise: the final linear fit
holds the amplitude at this bound and the unit's status gets ``at_bound``.
"""

NORM_GAIN_MAX = 100.0
"""Largest gain of the DN normalisation pool (``amplitude_norm``, with ``baseline_norm`` fixed at 1).

Beyond it the response is the ratio of activation to pool alone: the pool's gain and the amplitude
trade off without changing the prediction, and neither is an estimate.
"""


@dataclass(frozen=True)
class Parameter:
    """A reported parameter: how files, sidecars, results and the report name it, its units and range.

    Attributes
    ----------
    key : str
        The snake_case key of ``FitResult.params`` (``sigma_surround``).
    units : str
        One of :data:`UNITS`.
    description : str
        One line for sidecars and docs.
    bound : Bound
        Valid range (:mod:`prfmap.engine.catalog.bounds`).
    label : str
        The BIDS file label (``desc-<label>`` of a map): alphanumeric, by default the key without
        underscores.
    neutral : float
        A valid stand-in value for a unit without a fit, where a batch is padded (its prediction is
        discarded): inside the bound, e.g. 1 for a size.
    title : str
        Words for the map in the report (default: the label).
    """

    key: str
    units: str
    description: str
    bound: Bound = UNBOUNDED
    label: str = ""
    neutral: float = 0.0
    title: str = ""

    def __post_init__(self) -> None:
        if not self.label:
            object.__setattr__(self, "label", self.key.replace("_", ""))
        if not self.title:
            object.__setattr__(self, "title", self.label)
        if not re.fullmatch(r"[a-z0-9]+", self.label):
            raise ValueError(f"parameter {self.key!r}: a BIDS label must be lower-case alphanumeric")
        if self.units not in UNITS:
            raise ValueError(f"parameter {self.key!r}: units {self.units!r} not one of {', '.join(UNITS)}")


@dataclass(frozen=True)
class ModelSpec:
    """A pRF model: everything prfmap knows about it besides its numerics, and where they are.

    Attributes
    ----------
    name : str
        ``--model`` value and ``model-<name>`` file entity (lower-case alphanumeric).
    description, citation : str
        What the model is, and where it was published in a few words (``Kay et al., 2013``).
    parameters : tuple of str
        Reported parameter keys (of :data:`PARAMETERS`), in the order of ``FitResult.params``. Given
        as :class:`Parameter` values, new parameters are registered with the model (``defines``).
    gaussians : int
        Gaussians evaluated per unit (centre, surround...), for memory sizing.
    fixed : mapping
        Parameters held at a value unless the caller says otherwise (``fit_prf(fixed=...)``).
    reference : str
        The full reference, cited in the report's methods text.
    implementation : str or type
        The :class:`~prfmap.engine.models.PRFModel` subclass, or its ``"module:Class"`` path
        (imported on first use, so this module needs no Keras).
    defines : tuple of Parameter
        The parameters this entry brings (filled from ``parameters``).
    """

    name: str
    description: str
    citation: str
    parameters: tuple[Any, ...]
    gaussians: int = 1
    fixed: Mapping[str, float] = field(default_factory=dict)
    reference: str = ""
    implementation: Any = None
    defines: tuple[Parameter, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if not re.fullmatch(r"[a-z0-9]+", self.name):
            raise ValueError(f"model name {self.name!r}: a BIDS label must be lower-case alphanumeric")
        object.__setattr__(self, "fixed", MappingProxyType(dict(self.fixed)))
        new = tuple(p for p in self.parameters if isinstance(p, Parameter))
        object.__setattr__(self, "defines", self.defines + new)
        keys = tuple(p.key if isinstance(p, Parameter) else p for p in self.parameters)
        object.__setattr__(self, "parameters", keys)

    @property
    def summary(self) -> str:
        """Description and citation in one line, e.g. for sidecars."""
        return f"{self.description} ({self.citation})"


@dataclass(frozen=True)
class RefinerSpec:
    """A refinement after the grid search: its solver, defaults and reference.

    Attributes
    ----------
    name : str
        ``--refine`` value.
    description : str
        What it does, in the methods text's words.
    max_iter : int
        Default iteration budget.
    tol : float
        Default relative cost change under which a unit stops (0: only the budget stops it).
    solver : str or type, optional
        The solver class (:class:`prfmap.engine.solvers.Solver`), or its ``"module:Class"`` path;
        None for no refinement. Constructed as ``solver(model, dtype, tol, **options)``.
    options : mapping
        Default keyword arguments of the solver's constructor (``fit_prf`` may override them).
    reference : str
        The full reference, cited in the report's methods text.
    """

    name: str
    description: str
    max_iter: int = 0
    tol: float = 0.0
    solver: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    reference: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))


@dataclass(frozen=True)
class NoiseSpec:
    """A noise model of ``--noise-model``: its name, its words, its class and the class' options.

    Attributes
    ----------
    name : str
        ``--noise-model`` value.
    description : str
        What it is, in the report's words (when a fit's record carries no description of its own).
    implementation : str or type, optional
        The :class:`~prfmap.engine.noise.BaseNoiseModel` subclass, or its ``"module:Class"`` path
        (imported on first use); None for white noise (no estimate, no prewhitening).
    options : mapping
        Keyword arguments of the class' ``estimate`` (the built-in AR models': ``order``).
    """

    name: str
    description: str
    implementation: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))
