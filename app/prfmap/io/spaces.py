"""Spaces as fMRIPrep writes them (``--output-spaces``, file names), checked against TemplateFlow."""

from __future__ import annotations

import importlib.resources
import re
import zipfile
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

NONSTANDARD_SPACES = ("fsnative", "T1w", "anat", "func")
FSAVERAGE_DENSITIES = {"10k": "fsaverage5", "41k": "fsaverage6", "164k": "fsaverage"}
LEGACY_SPACES = ("fsaverage5", "fsaverage6")
COMMON_TEMPLATES = ("fsaverage", "fsLR", "MNI152NLin2009cAsym", "MNI152NLin6Asym")
CIFTI_MESH_DENSITY = {"91k": "32k", "170k": "59k"}
"""CIFTI grayordinate densities → the density of their fsLR cortical meshes."""
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


@lru_cache(maxsize=1)
def known_templates() -> tuple[str, ...]:
    """Template names that TemplateFlow knows, without network access.

    The names are those of TemplateFlow's bundled skeleton (what ``templateflow.api.templates()``
    lists offline) plus any ``tpl-*`` folder in ``TEMPLATEFLOW_HOME``; read directly, because
    ``api.templates()`` indexes the whole TemplateFlow home with pybids (about ten seconds).

    Returns
    -------
    tuple of str
    """
    # Deferred: importing templateflow.conf creates TEMPLATEFLOW_HOME when it does not exist.
    from templateflow.conf import TF_HOME

    names: set[str] = set()
    skeleton = importlib.resources.files("templateflow.conf") / "templateflow-skel.zip"
    with skeleton.open("rb") as fh, zipfile.ZipFile(fh) as archive:
        names.update(n.split("/")[0][4:] for n in archive.namelist() if n.startswith("tpl-"))
    home = Path(TF_HOME)
    if home.is_dir():
        names.update(p.name[4:] for p in home.glob("tpl-*") if p.is_dir())
    return tuple(sorted(names))


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
    allowed = {*COMMON_TEMPLATES, *NONSTANDARD_SPACES, *LEGACY_SPACES}
    if name not in allowed:
        allowed.update(known_templates())
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
