"""When within each TR a preprocessed BOLD run's volumes sample the signal, from its sidecars.

The model predicts volume ``k`` at ``(k + slice_time_ref) × TR`` (the engine's ``slice_time_ref``,
a fraction of the TR, as nilearn's ``slice_time_ref``). The reference comes from the run's BIDS
metadata, fMRIPrep's derivative sidecar first and the raw sidecars (BIDS inheritance) after it:

1. ``StartTime`` given (fMRIPrep writes it with ``SliceTimingCorrected: true``: the time the
   slices were corrected to, ``first + slice_time_ref × (last - first)`` slice time):
   ``StartTime / RepetitionTime``. The data are resampled to that instant; nilearn's
   ``first_level_from_bids`` reads it the same way.
2. ``SliceTimingCorrected: true`` without ``StartTime`` (fMRIPrep before it wrote the key):
   fMRIPrep's default reference, the middle of the slice acquisition range,
   ``(min + max)(SliceTiming) / 2``, or TR/2 without ``SliceTiming``.
3. Not corrected, with ``SliceTiming``: each slice samples at its own time and one fit serves
   every unit, so prfmap models the mean slice time. Timing errors bias the fitted size about
   linearly, so the mean makes them cancel over units spread across the slices (for regular
   acquisitions it equals the middle of the range, what fMRIPrep would have corrected to).
4. No slice-timing information: the start of the TR (0). BIDS time-stamps a volume at the start
   of its acquisition (events' onsets and ``SliceTiming`` are relative to it); without slice times
   that is the only instant the metadata define, the one simulators sample at, and nilearn's
   default. A warning says so: pass ``--slice-time-ref`` when the acquisition is known.

``--slice-time-ref`` (fMRIPrep's option name: a fraction of the TR in [0, 1], or ``start``,
``middle``) overrides all of these.

``SliceTimingCorrected`` is a JSON boolean. Written as a string or a number, ``"true"``/``"yes"``/``1``
(any case) read as true and ``"false"``/``"no"``/``0`` as false, each with a warning naming the
value; anything else is refused (exit 65).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from prfmap.errors import BadDataError

logger = logging.getLogger(__name__)
RULES = {
    "option": "given with --slice-time-ref",
    "start_time": "StartTime / RepetitionTime (slice-timing corrected data)",
    "corrected_middle": "slice-timing corrected without StartTime: the middle of the slice "
    "acquisition range (fMRIPrep's default reference)",
    "slice_timing_mean": "not slice-timing corrected: the mean of SliceTiming",
    "no_information": "no StartTime nor SliceTiming: the start of the TR (BIDS volume time stamps)",
}
"""How the reference was chosen, by rule key (the sidecars record the text)."""
NAMED = {"start": 0.0, "middle": 0.5}


@dataclass(frozen=True)
class SliceTimeReference:
    """Where within each TR the volumes of a run sample the signal.

    Attributes
    ----------
    fraction : float
        The time as a fraction of the TR, in [0, 1] (the engine's ``slice_time_ref``).
    rule : str
        The key of :data:`RULES` that chose it.
    """

    fraction: float
    rule: str

    def describe(self, tr: float) -> dict[str, Any]:
        """What the map sidecars record: the fraction, the seconds and the rule.

        Parameters
        ----------
        tr : float
            Repetition time, s.

        Returns
        -------
        dict
            ``Fraction``, ``Seconds`` and ``Rule``.
        """
        return {
            "Fraction": round(self.fraction, 6),
            "Seconds": round(self.fraction * tr, 6),
            "Rule": RULES[self.rule],
        }


def parse_slice_time_ref(value: str) -> float:
    """``--slice-time-ref``: a fraction of the TR in [0, 1], or ``start`` (0) or ``middle`` (0.5).

    Parameters
    ----------
    value : str
        The option's text.

    Returns
    -------
    float

    Raises
    ------
    ValueError
        Anything else.
    """
    text = str(value).strip().lower()
    if text in NAMED:
        return NAMED[text]
    try:
        number = float(text)
    except ValueError:
        raise ValueError(f"{value!r} is not a fraction of the TR in [0, 1], start or middle") from None
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{value!r} must lie in [0, 1] (a fraction of the TR), or be start or middle")
    return number


def slice_time_reference(
    metadata: Mapping[str, Any], tr: float, source: str = "the run"
) -> SliceTimeReference:
    """The slice-time reference a run's merged BIDS metadata implies (see the module docstring).

    Parameters
    ----------
    metadata : mapping
        The run's sidecar keys: the preprocessed BOLD's (fMRIPrep) over the raw BOLD's.
    tr : float
        Repetition time, seconds.
    source : str
        The run's name, for messages.

    Returns
    -------
    SliceTimeReference

    Raises
    ------
    BadDataError
        ``StartTime`` or ``SliceTiming`` outside the TR, or not numbers.
    """
    start = metadata.get("StartTime")
    slices = _slice_times(metadata.get("SliceTiming"), tr, source)
    if start is not None:
        seconds = _number(start, "StartTime", source)
        if not 0.0 <= seconds <= tr:
            raise BadDataError(
                f"StartTime {seconds:g} s of {source} lies outside its TR (0-{tr:g} s); fix the "
                "sidecar or pass --slice-time-ref"
            )
        return SliceTimeReference(seconds / tr, "start_time")
    if _flag(metadata.get("SliceTimingCorrected"), "SliceTimingCorrected", source):
        middle = 0.5 if not slices else (min(slices) + max(slices)) / 2 / tr
        return SliceTimeReference(middle, "corrected_middle")
    if slices:
        return SliceTimeReference(sum(slices) / len(slices) / tr, "slice_timing_mean")
    return SliceTimeReference(0.0, "no_information")


_TRUE, _FALSE = ("true", "yes", "1"), ("false", "no", "0")


def _flag(value: Any, key: str, source: str) -> bool:
    """A boolean sidecar key: JSON true/false (absent: false).

    The usual spellings as strings or 0/1 are read with a warning (see the module docstring).
    """
    if value is None or isinstance(value, bool):
        return bool(value)
    text = str(value).strip().lower() if isinstance(value, str | int) else None
    if text not in _TRUE + _FALSE:
        raise BadDataError(
            f"{key} of {source} is {value!r}, not a JSON boolean; write true or false (without quotes)"
        )
    read = text in _TRUE
    logger.warning(
        "%s of %s is %r, not a JSON boolean: read as %s (write %s without quotes)",
        key,
        source,
        value,
        str(read).lower(),
        str(read).lower(),
    )
    return read


def _number(value: Any, key: str, source: str) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise BadDataError(f"{key} of {source} is not a number: {value!r}") from None
    if not math.isfinite(number):
        raise BadDataError(f"{key} of {source} is not a finite number: {value!r}")
    return number


def _slice_times(value: Any, tr: float, source: str) -> list[float]:
    if value is None:
        return []
    if not isinstance(value, list | tuple) or not value:
        raise BadDataError(f"SliceTiming of {source} must be a list of seconds, got {value!r}")
    times = [_number(v, "SliceTiming", source) for v in value]
    if min(times) < 0 or max(times) >= tr:
        raise BadDataError(
            f"SliceTiming of {source} spans {min(times):g}-{max(times):g} s, outside its TR "
            f"(0-{tr:g} s); fix the sidecar or pass --slice-time-ref"
        )
    return times
