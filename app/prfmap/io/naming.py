"""BIDS file names: the one place that orders entities into a name and reads a name back.

Entities follow the order of the BIDS specification's entity table (``sub``, ``ses``, ``task``,
``acq``, ``ce``, ``rec``, ``dir``, ``run``, ``echo``, ``hemi``, ``space``, ``res``, ``den``,
``desc``), with the draft entities prfmap writes, ``model`` (BEP016; pybids knows it) and ``stat``
(group maps), placed before ``desc``, which BIDS puts last.
"""

from __future__ import annotations

from collections.abc import Mapping

ENTITY_ORDER = (
    "sub",
    "ses",
    "task",
    "acq",
    "ce",
    "rec",
    "dir",
    "run",
    "echo",
    "hemi",
    "space",
    "atlas",
    "res",
    "den",
    "model",
    "stat",
    "desc",
)
LONG_NAMES = {
    "subject": "sub",
    "session": "ses",
    "acquisition": "acq",
    "ceagent": "ce",
    "reconstruction": "rec",
    "direction": "dir",
}
"""pybids' long entity names → the keys used in file names."""


def bids_name(
    entities: Mapping[str, str | int | None], suffix: str | None = None, extension: str = ""
) -> str:
    """A BIDS file name (or stem) from its entities, in the specification's order.

    Parameters
    ----------
    entities : mapping
        Entity key (``sub``, ``ses``, ``task``... or pybids' long names ``subject``,
        ``session``, ``acquisition``...) → label. None or empty labels are left out.
    suffix : str, optional
        ``bold``, ``boldmap``...; None gives the stem without a suffix.
    extension : str
        Appended as is (``.func.gii``, ``.json``).

    Returns
    -------
    str
        e.g. ``sub-01_task-prf_hemi-L_space-fsaverage5_model-gauss_desc-r2_boldmap.func.gii``.

    Raises
    ------
    ValueError
        An entity prfmap does not know how to place.
    """
    labels = {LONG_NAMES.get(k, k): v for k, v in entities.items() if v not in (None, "")}
    unknown = sorted(set(labels) - set(ENTITY_ORDER))
    if unknown:
        raise ValueError(f"unknown BIDS entities {unknown}; known: {', '.join(ENTITY_ORDER)}")
    parts = [f"{key}-{labels[key]}" for key in ENTITY_ORDER if key in labels]
    if suffix:
        parts.append(suffix)
    return "_".join(parts) + extension
