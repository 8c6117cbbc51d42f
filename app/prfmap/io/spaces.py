"""Spaces as fMRIPrep writes them (``--output-spaces``, file names), checked against TemplateFlow."""

from __future__ import annotations

import importlib.resources
import logging
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prfmap.errors import NoFilesSelectedError
from prfmap.io.runs import Kind

if TYPE_CHECKING:  # pybids is imported by the query only, not by the parser
    from bids.layout import BIDSFile

logger = logging.getLogger(__name__)

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


LEGACY_DEN = {"fsaverage5": "10k", "fsaverage6": "41k"}
"""fMRIPrep's legacy names of fsaverage densities (``fsaverage5`` is ``fsaverage:den-10k``)."""


@dataclass(frozen=True)
class SpaceQuery:
    """What a space string asks of a file: its name, density, resolution and format."""

    name: str
    den: str | None
    res: str | None
    kind: Kind | None


def space_query(space: str) -> SpaceQuery:
    """Name, density, resolution and the file kind a (valid) fMRIPrep space string implies.

    Parameters
    ----------
    space : str
        An fMRIPrep space string.

    Returns
    -------
    SpaceQuery
    """
    parsed = parse_space(space)
    name, den, res = parsed.name, parsed.den, parsed.res
    if name == "fsLR":
        den = den or "91k"
        return SpaceQuery(name, den, None, "cifti" if den == "91k" else "gifti")
    if name.startswith("fs"):
        return SpaceQuery(name, den, None, "gifti")
    return SpaceQuery(name, None, res, "volume")


def space_of(entities: Mapping[str, Any]) -> str:
    """The space string of a file, fMRIPrep-style (legacy fsaverage names, fsLR with density).

    Parameters
    ----------
    entities : mapping
        pybids' entities of the file (with ``extension``).

    Returns
    -------
    str
    """
    space, den = str(entities.get("space", "")), entities.get("den")
    if space == "fsaverage" and den:
        legacy = {v: k for k, v in LEGACY_DEN.items()}.get(str(den))
        if legacy:
            return legacy
    if space == "fsLR":
        return f"fsLR:den-{den or ('91k' if entities['extension'] == '.dtseries.nii' else '32k')}"
    if entities.get("res"):
        return f"{space}:res-{entities['res']}"
    return space


def matches_space(entities: Mapping[str, Any], query: SpaceQuery) -> bool:
    """Whether a file is in the queried space.

    Parameters
    ----------
    entities : mapping
        pybids' entities of the file (with ``extension``).
    query : SpaceQuery
        What was asked.

    Returns
    -------
    bool
    """
    space, den, ext = str(entities.get("space")), entities.get("den"), entities["extension"]
    kind = kind_of(ext)
    if query.kind is not None and kind != query.kind:
        return False
    if query.name in LEGACY_DEN:
        return space == query.name or (space == "fsaverage" and den == LEGACY_DEN[query.name])
    if space != query.name:
        return False
    if query.name == "fsaverage" and den not in (None, "164k"):
        return False
    if query.name == "fsLR":
        file_den = den or ("91k" if kind == "cifti" else "32k")
        return file_den == query.den
    if query.den is not None and den != query.den:
        return False
    return query.res is None or str(entities.get("res")) == query.res


def kind_of(extension: str) -> Kind:
    """The format of a BOLD file from its extension.

    Parameters
    ----------
    extension : str
        ``.func.gii``, ``.dtseries.nii``, ``.nii.gz`` or ``.nii``.

    Returns
    -------
    {"gifti", "cifti", "volume"}
    """
    if extension == ".func.gii":
        return "gifti"
    if extension == ".dtseries.nii":
        return "cifti"
    return "volume"


# Default space when none is given: surfaces first, then anatomical, then templates.
PREFERENCE = ("fsnative", "fsaverage", "fsaverage6", "fsaverage5", "fsLR:den-91k", "fsLR:den-32k")


def select_space(bold: list[BIDSFile], space: str | None, where: str) -> list[BIDSFile]:
    """The files of the requested space, or of the first space present in order of preference.

    Parameters
    ----------
    bold : list of BIDSFile
        Preprocessed BOLD files (pybids).
    space : str, optional
        The space asked for (``--space``).
    where : str
        The folder searched, for the message.

    Returns
    -------
    list of BIDSFile

    Raises
    ------
    NoFilesSelectedError
        No file in the space asked for (the message lists those present).
    """
    if space is not None:
        query = space_query(space)
        selected = [f for f in bold if matches_space(f.get_entities(), query)]
        if not selected:
            present = sorted({space_of(f.get_entities()) for f in bold})
            raise NoFilesSelectedError(
                f"no preprocessed BOLD in space {space} under {where}; spaces present: "
                f"{', '.join(present)} (choose one with --space)"
            )
        return selected
    present = {space_of(f.get_entities()) for f in bold}
    chosen = default_space(present)
    logger.info("fitting space %s (of %s); choose with --space", chosen, sorted(present))
    return [f for f in bold if space_of(f.get_entities()) == chosen]


def default_space(present: set[str]) -> str:
    """The space fitted when none is asked for: :data:`PREFERENCE`'s first, else T1w, else a template.

    Parameters
    ----------
    present : set of str
        The spaces of the BOLD files found.

    Returns
    -------
    str
    """
    for name in PREFERENCE:
        if name in present:
            return name
    volumes = sorted(present)
    return next((s for s in volumes if s.split(":")[0] == "T1w"), volumes[0])
