"""The participants' maps the group level reads: which fit they belong to, in which template space."""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bids.layout import parse_file_entities

from prfmap.derivatives import MAP_SUFFIX, PYBIDS_CONFIG, OutputKey
from prfmap.derivatives.comparison import COMPARISON_MODEL
from prfmap.errors import BadDataError
from prfmap.io.bold import read_dscalar, read_gifti

logger = logging.getLogger(__name__)

TEMPLATE_SPACES = ("fsaverage", "fsaverage5", "fsaverage6", "fsLR")
HEMIS = ("L", "R")


@dataclass(frozen=True)
class FitKey:
    """What participants must share to be combined: task, template space, density, model."""

    task: str
    space: str
    den: str | None
    model: str

    def __str__(self) -> str:
        den = f" den-{self.den}" if self.den else ""
        return f"task-{self.task} space-{self.space}{den} model-{self.model}"


@dataclass
class ParticipantMaps:
    """One participant's (and session's) maps of one fit, read per hemisphere.

    Attributes
    ----------
    key : OutputKey
        The entities of the fit.
    files : list of Path
        The files the maps come from.
    maps : dict
        Parameter label → hemisphere → (vertices,) float array.
    fov_deg : float or None
        Width of the stimulated field, from the maps' sidecars (``Stimulus.FieldOfViewDeg``).
    stat_maps : dict
        ``(stat, label)`` → hemisphere → (vertices,) values of the participant level's uncertainty
        maps (``stat-se``, ``stat-ci95lower``, ``stat-ci95upper``); empty for outputs without them.
    stat_files : list of Path
        The files ``stat_maps`` come from.
    noise_model : str or None
        The noise model its standard errors assume (``FitSettings.noise_model.option`` of the maps'
        sidecars: ``ols``, ``ar1``...), None where the sidecars do not say.
    """

    key: OutputKey
    files: list[Path] = field(default_factory=list)
    maps: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    fov_deg: float | None = None
    stat_maps: dict[tuple[str, str], dict[str, np.ndarray]] = field(default_factory=dict)
    stat_files: list[Path] = field(default_factory=list)
    noise_model: str | None = None

    @property
    def fit(self) -> FitKey:
        """The fit this map set belongs to."""
        k = self.key
        return FitKey(k.task, k.space, k.den, k.model)


PYBIDS_CONFIGS = ["bids", "derivatives", PYBIDS_CONFIG]


def output_key(entities: dict[str, str]) -> OutputKey | None:
    """The fit a map belongs to, from its file entities; None for a file that is not a prfmap map.

    Parameters
    ----------
    entities : dict
        pybids' entities of a file.

    Returns
    -------
    OutputKey or None
    """
    required = ("subject", "task", "space", "model")
    if any(k not in entities for k in required) or entities["model"] == COMPARISON_MODEL:
        return None  # not a map of a prfmap fit (model-best: a comparison's winners, not a pRF)
    return OutputKey(
        subject=entities["subject"],
        session=entities.get("session"),
        task=entities["task"],
        space=entities["space"],
        den=entities.get("den"),
        res=entities.get("res"),
        model=entities["model"],
    )


def _fov(record: dict) -> float | None:
    fov = (record.get("Stimulus") or {}).get("FieldOfViewDeg")
    return float(fov) if isinstance(fov, int | float) else None


def _noise_model(record: dict) -> str | None:
    option = ((record.get("FitSettings") or {}).get("noise_model") or {}).get("option")
    return option if isinstance(option, str) else None


def _from_sidecar(entry: ParticipantMaps, path: Path) -> None:
    """Fill ``entry``'s field of view and noise model from a map's sidecar, read once, where unknown."""
    if entry.fov_deg is not None and entry.noise_model is not None:
        return
    record = _sidecar(path)
    entry.fov_deg = entry.fov_deg or _fov(record)
    entry.noise_model = entry.noise_model or _noise_model(record)


def _sidecar(path: Path) -> dict:
    """A map's JSON sidecar as a dict (empty where there is none or it is not one JSON object)."""
    try:
        record = json.loads(path.with_name(path.name.split(".")[0] + ".json").read_text())
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def read_gifti_map(path: Path) -> np.ndarray:
    """One map of a GIFTI file as a (vertices,) array.

    Parameters
    ----------
    path : Path
        A ``.func.gii`` with one map.

    Returns
    -------
    ndarray
    """
    values = read_gifti(path)
    if values.ndim != 2 or values.shape[1] != 1:
        raise BadDataError(f"{path} holds {values.shape[1]} maps, not one; re-run the participant level")
    return values[:, 0].astype(np.float64)


def read_cifti_maps(path: Path) -> dict[str, dict[str, np.ndarray]]:
    """The maps of a CIFTI dscalar per label and hemisphere, on the fsLR 32k vertices.

    Parameters
    ----------
    path : Path
        A ``.dscalar.nii``.

    Returns
    -------
    dict
        Label → hemisphere → (vertices,) values.
    """
    maps, geometry = read_dscalar(path)
    surface = geometry.surface()
    return {name: surface.split(values) for name, values in maps.items()}


def stat_map_name(
    key: OutputKey, stat: str, ext: str, hemi: str | None = None, param: str | None = None
) -> str:
    """The participant level's name of an uncertainty map (``stat-se``...) of one fit.

    :meth:`~prfmap.derivatives.OutputKey.stem` with ``stat``, as the participant level's writer
    names them.

    Parameters
    ----------
    key : OutputKey
        The entities of the fit.
    stat : str
        ``se``, ``ci95lower`` or ``ci95upper``.
    ext : str
        ``.func.gii`` (with ``hemi`` and ``param``) or ``.dscalar.nii`` (every parameter in one file).
    hemi, param : str, optional
        Hemisphere and parameter label of a GIFTI map.

    Returns
    -------
    str
        e.g. ``sub-01_task-bar_hemi-L_space-fsaverage5_model-gauss_stat-se_desc-x_boldmap.func.gii``.
    """
    return f"{key.stem(hemi=hemi, param=param, stat=stat)}_{MAP_SUFFIX}{ext}"


def _read_stat_map(
    path: Path, key: OutputKey, entities: dict[str, str]
) -> dict[tuple[str, str], dict[str, np.ndarray]]:
    """The uncertainty maps of one ``stat-`` file; empty when it is not named as prfmap names them."""
    stat, ext = entities["stat"], entities.get("extension", "")
    if ext == ".func.gii" and "hemi" in entities and "param" in entities:
        hemi, param = entities["hemi"], entities["param"]
        if stat_map_name(key, stat, ext, hemi, param) != path.name:
            return {}
        return {(stat, param): {hemi: read_gifti_map(path)}}
    if ext == ".dscalar.nii" and "param" not in entities:
        if stat_map_name(key, stat, ext) != path.name:
            return {}
        return {(stat, label): per_hemi for label, per_hemi in read_cifti_maps(path).items()}
    return {}


def _attach_stat_maps(
    found: dict[OutputKey, ParticipantMaps],
    stats: dict[OutputKey, list[tuple[Path, dict[tuple[str, str], dict[str, np.ndarray]]]]],
) -> None:
    """Add each fit's uncertainty maps to its :class:`ParticipantMaps` (only beside its own maps)."""
    for key, read in stats.items():
        if key not in found:
            logger.warning("uncertainty maps of %s without its parameter maps are ignored", key.stem())
            continue
        for path, maps in read:
            for stat_label, per_hemi in maps.items():
                found[key].stat_maps.setdefault(stat_label, {}).update(per_hemi)
            found[key].stat_files.append(path)


def find_participant_maps(
    output_dir: str | Path, participant_labels: Sequence[str] | None = None
) -> list[ParticipantMaps]:
    """Read every participant's surface maps under ``output_dir``.

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder written by the participant level.
    participant_labels : sequence of str, optional
        Only these participants (with or without ``sub-``).

    Returns
    -------
    list of ParticipantMaps
        One per (participant, session, task, space, density, model), GIFTI (one file per
        parameter and hemisphere) and CIFTI (one ``dscalar`` per fit, cortex only).
        File names are parsed by pybids with prfmap's config (``param``) and checked against the
        participant level's naming (:meth:`prfmap.derivatives.OutputKey.stem`); other files are
        ignored. The participant level's uncertainty maps (``stat-se``..., named as
        :func:`stat_map_name` names them) go into ``stat_maps`` of the fit they belong to.
    """
    wanted = {p.removeprefix("sub-") for p in participant_labels} if participant_labels else None
    found: dict[OutputKey, ParticipantMaps] = {}
    stats: dict[OutputKey, list[tuple[Path, dict[tuple[str, str], dict[str, np.ndarray]]]]] = {}
    for path in sorted(Path(output_dir).glob(f"sub-*/**/func/sub-*_{MAP_SUFFIX}.*")):
        entities = {k: str(v) for k, v in parse_file_entities(str(path), config=PYBIDS_CONFIGS).items()}
        ext = entities.get("extension", "")
        key = output_key(entities)
        if key is None or (wanted is not None and key.subject not in wanted):
            continue
        if "stat" in entities:
            read = _read_stat_map(path, key, entities)
            if read:
                stats.setdefault(key, []).append((path, read))
            continue
        if ext == ".func.gii" and "hemi" in entities and "param" in entities:
            hemi, param = entities["hemi"], entities["param"]
            if f"{key.stem(hemi=hemi, param=param)}_{MAP_SUFFIX}{ext}" != path.name:
                continue
            entry = found.setdefault(key, ParticipantMaps(key))
            entry.maps.setdefault(param, {})[hemi] = read_gifti_map(path)
            entry.files.append(path)
            _from_sidecar(entry, path)
        elif ext == ".dscalar.nii" and "param" not in entities:
            if f"{key.stem()}_{MAP_SUFFIX}{ext}" != path.name:
                continue
            entry = found.setdefault(key, ParticipantMaps(key))
            entry.maps.update(read_cifti_maps(path))
            entry.files.append(path)
            _from_sidecar(entry, path)
    _attach_stat_maps(found, stats)
    return list(found.values())


def volume_map_spaces(
    output_dir: str | Path, participant_labels: Sequence[str] | None = None
) -> dict[str, set[str]]:
    """The volume spaces (T1w, MNI…) in which each participant has maps: the group level combines none.

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder written by the participant level.
    participant_labels : sequence of str, optional
        Only these participants (with or without ``sub-``).

    Returns
    -------
    dict
        Participant label → the spaces of its ``*_boldmap.nii[.gz]`` maps; participants without
        any are absent.
    """
    wanted = {p.removeprefix("sub-") for p in participant_labels} if participant_labels else None
    spaces: dict[str, set[str]] = {}
    for path in sorted(Path(output_dir).glob(f"sub-*/**/func/sub-*_{MAP_SUFFIX}.nii*")):
        entities = parse_file_entities(str(path), config=PYBIDS_CONFIGS)
        subject, space = entities.get("subject"), entities.get("space")
        if subject and space and (wanted is None or str(subject) in wanted):
            spaces.setdefault(str(subject), set()).add(str(space))
    return spaces
