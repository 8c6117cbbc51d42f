"""The group maps' sidecars: one per parameter and hemisphere, each statistic under ``Statistics``.

Plain pybids does not know the ``stat`` entity: to it, sidecars whose names differ only in
``stat-`` have the same entities, and it would hand one statistic's map another's sidecar. So the
group level writes one sidecar per parameter (and hemisphere), named without ``stat``
(``task-prf_hemi-L_space-fsaverage5_model-gauss_desc-sigma_boldmap.json``): pybids gives it to
every statistic's map of the parameter, and ``Statistics`` describes each of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prfmap.engine import catalog

PARAMETER_DESCRIPTIONS = {"count": "participants contributing at the vertex"}
"""Descriptions of the group maps' labels that are not catalogue parameters."""
PER_STATISTIC = ("Description", "Files")
"""Keys every statistic's entry has of its own, even where two statistics agree."""


def parameter_description(label: str) -> str:
    """What a group map's parameter is (the catalogue's words), whatever its statistic.

    Parameters
    ----------
    label : str
        The parameter's label (``desc``): ``sigma``, ``count``...

    Returns
    -------
    str
        The catalogue's description, :data:`PARAMETER_DESCRIPTIONS`' or the label itself.
    """
    entry = catalog.parameter_by_label(label)
    return entry.description if entry is not None else PARAMETER_DESCRIPTIONS.get(label, label)


def parameter_sidecar(
    label: str, statistics: Mapping[str, Mapping[str, Any]], common: Mapping[str, Any]
) -> dict[str, Any]:
    """The one sidecar of a parameter's group maps (one hemisphere), every statistic in it.

    Parameters
    ----------
    label : str
        The parameter (``desc``).
    statistics : mapping
        Statistic (``stat``: ``median``, ``ivwmean``...) → what its map's own sidecar would say:
        ``Description`` (of the statistic), ``Files`` (the map files it describes) and any other
        key (``Units``, ``Sources``...).
    common : mapping
        Keys every statistic shares (task, threshold, participants, spatial reference...).

    Returns
    -------
    dict
        ``Parameter``, ``Description`` (of the parameter), the keys of ``statistics`` whose value
        is the same for every statistic, ``common``, and ``Statistics``: statistic → its
        ``Description``, ``Files`` and the keys whose value differs between statistics (the
        ``Units`` of a count beside a mean's).
    """
    entries = list(statistics.values())
    keys = dict.fromkeys(k for entry in entries for k in entry if k not in PER_STATISTIC)
    shared = [k for k in keys if all(k in e and e[k] == entries[0][k] for e in entries)]
    sidecar: dict[str, Any] = {"Parameter": label, "Description": parameter_description(label)}
    sidecar.update({k: entries[0][k] for k in shared})
    sidecar.update(common)
    sidecar["Statistics"] = {
        stat: {k: v for k, v in entry.items() if k not in shared} for stat, entry in statistics.items()
    }
    return sidecar


def statistic_metadata(sidecar: Mapping[str, Any], stat: str) -> dict[str, Any]:
    """What a parameter's sidecar says of one statistic's map, as one flat dictionary.

    Parameters
    ----------
    sidecar : mapping
        A group parameter sidecar (:func:`parameter_sidecar`).
    stat : str
        The statistic (``stat`` entity) of the map.

    Returns
    -------
    dict
        The sidecar's keys but ``Statistics``, ``Statistic`` set to ``stat`` and the statistic's
        own keys over them (its ``Description`` replaces the parameter's, which becomes
        ``ParameterDescription``).

    Raises
    ------
    KeyError
        ``stat`` is not one of the sidecar's statistics.
    """
    flat = {k: v for k, v in sidecar.items() if k != "Statistics"}
    flat["ParameterDescription"] = flat.pop("Description", None)
    return {**flat, "Statistic": stat, **sidecar["Statistics"][stat]}
