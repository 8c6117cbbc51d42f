"""Bounds of parameters as data: a :class:`Bound` is a lower and an upper :class:`Limit`.

Each limit is a number times a *reference* — a scale of the stimulus (:data:`STIMULUS_SCALES`: the
stimulated radius, the field of view, the pixel size), another parameter of the same unit (e.g. the
surround's size is at least the centre's ``sigma``), or nothing (an absolute value).
:meth:`Bound.resolve` turns a bound into numbers (or per-unit arrays) for one stimulus and one fit;
:meth:`Bound.describe` into text for sidecars and docs. A ``None`` limit means unbounded on that
side. This module imports nothing of prfmap, so the catalogue and the sidecars read it without Keras.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

STIMULUS_SCALES = {
    "radius": "radius of the stimulated field: the largest eccentricity of a pixel ever stimulated (deg)",
    "fov": "full width of the aperture (deg)",
    "pixel": "distance between neighbouring aperture pixel centres (deg)",
}
"""Stimulus quantities a :class:`Limit` may be relative to (see ``Stimulus.scales``)."""


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
        """The limit's value; ``scales`` maps each reference used to a number or a per-unit array.

        Parameters
        ----------
        scales : mapping
            Each reference used (a stimulus scale or another parameter) → a number or a per-unit array.

        Returns
        -------
        float or ndarray
        """
        if self.per is None:
            return self.value
        if self.per not in scales:
            raise KeyError(f"the bound needs {self.per!r}; give it in scales")
        return self.value * scales[self.per]

    def describe(self) -> str:
        """The limit as text, e.g. ``"2 × radius"`` or ``"0"``.

        Returns
        -------
        str
        """
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

        Returns
        -------
        tuple
            ``(low, high)``.
        """
        scales = scales or {}
        low = -math.inf if self.lower is None else self.lower.resolve(scales)
        high = math.inf if self.upper is None else self.upper.resolve(scales)
        return low, high

    def references(self) -> tuple[str, ...]:
        """The stimulus scales and parameters this bound depends on.

        Returns
        -------
        tuple of str
        """
        return tuple(lim.per for lim in (self.lower, self.upper) if lim is not None and lim.per)

    def describe(self, name: str = "value") -> str:
        """The bound as text, e.g. ``"0 < n <= 1"``; ``"unbounded"`` when neither side is.

        Parameters
        ----------
        name : str
            The parameter's name in the text.

        Returns
        -------
        str
        """
        parts = []
        if self.lower is not None:
            parts.append(f"{self.lower.describe()} {'<=' if self.lower.inclusive else '<'}")
        parts.append(name)
        if self.upper is not None:
            parts.append(f"{'<=' if self.upper.inclusive else '<'} {self.upper.describe()}")
        return " ".join(parts) if len(parts) > 1 else "unbounded"


UNBOUNDED = Bound()
