"""Output-space strings as fMRIPrep's ``--output-spaces`` writes them."""

from __future__ import annotations

import re
from dataclasses import dataclass

NONSTANDARD_SPACES = ("fsnative", "T1w", "anat", "func")
FSAVERAGE_DENSITIES = {"10k": "fsaverage5", "41k": "fsaverage6", "164k": "fsaverage"}
LEGACY_SPACES = ("fsaverage5", "fsaverage6")
_SPACE_RE = re.compile(r"^(?P<name>[A-Za-z0-9]+)(?::(?P<key>den|res)-(?P<value>[A-Za-z0-9]+))?$")


@dataclass(frozen=True)
class Space:
    """A parsed space: template or non-standard name plus an optional density or resolution.

    Attributes
    ----------
    name : str
        Space name as fMRIPrep writes it in file names (``fsaverage5``, ``fsLR``, ``T1w``).
    den : str or None
        Surface density (``32k``, ``91k``), when given.
    res : str or None
        Volume resolution label, when given.
    """

    name: str
    den: str | None = None
    res: str | None = None

    def __str__(self) -> str:
        if self.den:
            return f"{self.name}:den-{self.den}"
        if self.res:
            return f"{self.name}:res-{self.res}"
        return self.name


def known_templates() -> list[str]:
    """Template names that TemplateFlow knows (from its bundled skeleton; no network)."""
    from templateflow import api

    return sorted(api.templates())


def parse_space(value: str) -> Space:
    """Parse ``<name>[:den-<d>|:res-<r>]`` and check the name against TemplateFlow.

    Parameters
    ----------
    value : str
        The space as given on the command line, e.g. ``fsLR:den-32k``, ``fsaverage5``, ``T1w``.

    Returns
    -------
    Space
        The parsed space; fsaverage densities map to fMRIPrep's legacy names (``10k`` →
        ``fsaverage5``, ``41k`` → ``fsaverage6``).

    Raises
    ------
    ValueError
        When the string is malformed or the name is neither a TemplateFlow template nor one of
        ``fsnative``, ``T1w``, ``anat``, ``func``, ``fsaverage5``, ``fsaverage6``.
    """
    match = _SPACE_RE.match(value.strip())
    if match is None:
        raise ValueError(
            f"malformed space {value!r}; write it as fMRIPrep does, e.g. fsaverage5, "
            "fsLR:den-32k or MNI152NLin2009cAsym:res-2"
        )
    name, key, spec = match["name"], match["key"], match["value"]
    if name == "fsaverage" and key == "den" and spec in FSAVERAGE_DENSITIES:
        return Space(FSAVERAGE_DENSITIES[spec])
    templates = known_templates()
    allowed = {*templates, *NONSTANDARD_SPACES, *LEGACY_SPACES}
    if name not in allowed:
        lower = {a.lower(): a for a in allowed}
        hint = f" (did you mean {lower[name.lower()]}?)" if name.lower() in lower else ""
        raise ValueError(
            f"unknown space {name!r}{hint}; use fsnative, fsaverage5, fsaverage6, fsaverage, "
            "fsLR, T1w or a TemplateFlow template such as MNI152NLin2009cAsym"
        )
    if key == "den":
        return Space(name, den=spec)
    if key == "res":
        return Space(name, res=spec)
    return Space(name)
