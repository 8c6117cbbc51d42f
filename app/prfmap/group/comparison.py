"""The group level's model comparison: the share of participants, and of vertices, each model wins.

The participant level writes, where it fits several models, ``..._model-best_desc-winner`` maps: the
model that wins each vertex on held-out runs, as a code its sidecar's ``Levels`` name. Here, in every
template space that all participants have them in:

- per vertex, the share of the participants whose winner is each model (a participant with several
  sessions votes once, split between the models its sessions pick), NaN where no participant has a
  winner: ``group/task-<t>_hemi-<H>_space-<s>[_den-<d>]_model-best_stat-<model>share_desc-winner``
  maps, with ``stat-count_desc-winner`` (participants with a winner) and one sidecar per hemisphere
  (``..._model-best_desc-winner_boldmap.json``, each statistic under ``Statistics``);
- per region (the visual areas of :func:`prfmap.report.atlas.visual_areas` per hemisphere, where an
  atlas reaches the mesh, and ``all``: every vertex), the share of its compared vertices each model
  wins, per participant and for the group (the mean of the participants' shares):
  ``group/task-<t>_space-<s>[_den-<d>]_model-best_shares.tsv`` and its JSON sidecar.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bids.layout import parse_file_entities

from prfmap import __version__
from prfmap.derivatives import MAP_SUFFIX, OutputKey, sidecar_of
from prfmap.derivatives.comparison import COMPARISON_MODEL
from prfmap.engine import catalog
from prfmap.errors import BadDataError
from prfmap.group.maps import HEMIS, PYBIDS_CONFIGS, TEMPLATE_SPACES, FitKey, read_cifti_maps, read_gifti_map
from prfmap.group.sidecars import parameter_sidecar
from prfmap.io.atomic import write_json_atomic, write_text_atomic
from prfmap.io.geometry import GiftiGeometry
from prfmap.io.naming import bids_name
from prfmap.io.references import spatial_reference
from prfmap.io.spaces import CIFTI_MESH_DENSITY
from prfmap.report.atlas import visual_areas
from prfmap.report.group import GroupComparison
from prfmap.report.meshes import find_meshes

logger = logging.getLogger(__name__)

WINNER = "winner"
"""The ``desc`` label of the participants' winner maps and of the group's share maps."""
COUNT_STAT = "count"
SHARES_SUFFIX = "shares"
ALL_REGION = "all"
GROUP_ROW = "group"
WINNER_DESCRIPTION = (
    "the model that wins the vertex on held-out runs (the participant level's model-best_desc-winner "
    "maps), summarised over the participants"
)
SHARE_DESCRIPTION = (
    "share of the participants whose winning model at the vertex is {model} (a participant with "
    "several sessions counts once, as the share of its sessions {model} wins); NaN where no "
    "participant has a winner"
)
COUNT_DESCRIPTION = "participants with a winner at the vertex (a comparison was made there)"
DEFINITION = (
    "Each participant's winner at a vertex is the model with the best cross-validated variance "
    "explained there that passes the participant level's test against the Gaussian. A region's share "
    "of a model is the fraction of its compared vertices (those with a winner) the model wins: per "
    "participant, then the mean of the participants' shares (each participant weighs the same, "
    "whatever its number of compared vertices); 'all' is every compared vertex of both hemispheres."
)


@dataclass
class WinnerMaps:
    """One participant's (and session's) ``model-best_desc-winner`` maps in one space.

    Attributes
    ----------
    key : OutputKey
        The entities of the maps (``model`` ``best``).
    files : list of Path
        The files read.
    winner : dict
        Hemisphere → (vertices,) float codes, NaN where no comparison was made.
    levels : dict
        Code → model, from the maps' sidecar (``Levels``; the catalogue's order without one).
    """

    key: OutputKey
    files: list[Path] = field(default_factory=list)
    winner: dict[str, np.ndarray] = field(default_factory=dict)
    levels: dict[int, str] = field(default_factory=dict)

    @property
    def fit(self) -> FitKey:
        """The comparison this map set belongs to."""
        k = self.key
        return FitKey(k.task, k.space, k.den, k.model)


def _levels(path: Path) -> dict[int, str]:
    """The codes of a winner map, from its sidecar's ``Levels`` (the catalogue's order without it)."""
    try:
        levels = {int(c): str(m) for c, m in json.loads(sidecar_of(path).read_text())["Levels"].items()}
    except (OSError, ValueError, AttributeError, KeyError, TypeError):
        levels = {}
    return levels or dict(enumerate(catalog.MODELS))


def _best_key(entities: dict[str, str]) -> OutputKey | None:
    required = ("subject", "task", "space", "model")
    if any(k not in entities for k in required) or entities["model"] != COMPARISON_MODEL:
        return None
    if "stat" in entities:
        return None
    return OutputKey(
        entities["subject"],
        entities.get("session"),
        entities["task"],
        entities["space"],
        entities.get("den"),
        entities.get("res"),
        COMPARISON_MODEL,
    )


def find_winner_maps(
    output_dir: str | Path, participant_labels: Sequence[str] | None = None
) -> list[WinnerMaps]:
    """Read every participant's ``model-best`` winner maps (GIFTI per hemisphere, or CIFTI).

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder written by the participant level.
    participant_labels : sequence of str, optional
        Only these participants (with or without ``sub-``).

    Returns
    -------
    list of WinnerMaps
        One per (participant, session, task, space, density); files not named as the participant
        level names them are ignored.
    """
    wanted = {p.removeprefix("sub-") for p in participant_labels} if participant_labels else None
    found: dict[OutputKey, WinnerMaps] = {}
    pattern = f"sub-*/**/func/sub-*_model-{COMPARISON_MODEL}_*{MAP_SUFFIX}.*"
    for path in sorted(Path(output_dir).glob(pattern)):
        entities = {k: str(v) for k, v in parse_file_entities(str(path), config=PYBIDS_CONFIGS).items()}
        key = _best_key(entities)
        if key is None or (wanted is not None and key.subject not in wanted):
            continue
        ext = entities.get("extension", "")
        if ext == ".func.gii" and entities.get("param") == WINNER and "hemi" in entities:
            hemi = entities["hemi"]
            if f"{key.stem(hemi=hemi, param=WINNER)}_{MAP_SUFFIX}{ext}" != path.name:
                continue
            values = {hemi: read_gifti_map(path)}
        elif ext == ".dscalar.nii" and "param" not in entities:
            if f"{key.stem()}_{MAP_SUFFIX}{ext}" != path.name:
                continue
            values = read_cifti_maps(path).get(WINNER, {})
        else:
            continue
        entry = found.setdefault(key, WinnerMaps(key))
        entry.winner.update(values)
        entry.files.append(path)
        entry.levels.update(_levels(path))
    return [m for m in found.values() if all(h in m.winner for h in HEMIS)]


def _models(members: Sequence[WinnerMaps]) -> list[str]:
    """Every model some participant compared, in the catalogue's order."""
    named = {m for member in members for m in member.levels.values()}
    order = list(catalog.MODELS)
    return sorted(named, key=lambda m: (order.index(m) if m in order else len(order), m))


def participant_votes(
    members: Sequence[WinnerMaps], subjects: Sequence[str], models: Sequence[str], hemi: str
) -> np.ndarray:
    """Each participant's vote per model and vertex: the share of its sessions the model wins.

    Parameters
    ----------
    members : sequence of WinnerMaps
        The map sets of one comparison (one per participant and session).
    subjects : sequence of str
        The participants, in the order of the result's first axis.
    models : sequence of str
        The models, in the order of its second axis.
    hemi : str
        ``L`` or ``R``.

    Returns
    -------
    ndarray, shape (participants, models, vertices)
        In [0, 1], summing to 1 over the models; NaN where none of the participant's sessions has a
        winner.

    Raises
    ------
    BadDataError
        Maps with different numbers of vertices.
    """
    sizes = {m.winner[hemi].size for m in members}
    if len(sizes) != 1:
        raise BadDataError(
            f"the model-best winner maps of hemi-{hemi} do not line up ({sorted(sizes)} vertices): "
            "re-run the participant level in one space"
        )
    votes = np.zeros((len(subjects), len(models), sizes.pop()))
    sessions = np.zeros((len(subjects), votes.shape[2]))
    for member in members:
        p = list(subjects).index(member.key.subject)
        codes = member.winner[hemi]
        sessions[p] += np.isfinite(codes)
        for j, model in enumerate(models):
            here = [c for c, name in member.levels.items() if name == model]
            votes[p, j] += np.isin(codes, here)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(sessions[:, None, :] > 0, votes / sessions[:, None, :], np.nan)


def group_shares(votes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The share of the participants each model wins per vertex, and the participants counted.

    Parameters
    ----------
    votes : ndarray, shape (participants, models, vertices)
        :func:`participant_votes`.

    Returns
    -------
    shares : ndarray, shape (models, vertices)
        Mean vote over the participants with a winner; NaN where none has.
    count : ndarray, shape (vertices,)
        Participants with a winner.
    """
    compared = np.isfinite(votes[:, 0, :])
    count = compared.sum(axis=0).astype(np.float64)
    total = np.where(compared[:, None, :], votes, 0.0).sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(count > 0, total / count, np.nan), count


def _row(region: str, who: str, participants: int, vertices: int, shares: np.ndarray) -> dict:
    return {
        "region": region,
        "participant": who,
        "participants": participants,
        "vertices": vertices,
        "shares": [float(s) for s in shares],
    }


def region_rows(
    votes: dict[str, np.ndarray], subjects: Sequence[str], regions: dict[str, dict[str, np.ndarray]]
) -> list[dict]:
    """The share of each region's compared vertices each model wins, per participant and group.

    Parameters
    ----------
    votes : dict
        Hemisphere → :func:`participant_votes`.
    subjects : sequence of str
        The participants of the votes' first axis.
    regions : dict
        Region name → hemisphere → (vertices,) bool mask of its vertices.

    Returns
    -------
    list of dict
        Per region: one row per participant (``participant`` ``sub-<l>``) then the ``group`` row;
        keys ``region``, ``participant``, ``participants`` (1, or those with a compared vertex in
        the region), ``vertices`` (compared; for the group: with a winner in any participant) and
        ``shares`` (one per model; the group's: the mean of the participants'; NaN without any).
    """
    rows = []
    n_models = next(iter(votes.values())).shape[1]
    for region, masks in regions.items():
        picked = np.concatenate([votes[h][:, :, masks[h]] for h in masks], axis=2)
        compared = np.isfinite(picked[:, 0, :])
        n = compared.sum(axis=1)
        with np.errstate(invalid="ignore"):
            own = np.where(compared[:, None, :], picked, 0.0).sum(axis=2) / n[:, None]
        for p, subject in enumerate(subjects):
            rows.append(_row(region, f"sub-{subject}", 1, int(n[p]), own[p]))
        counted = n > 0
        shares = own[counted].mean(axis=0) if counted.any() else np.full(n_models, np.nan)
        rows.append(_row(region, GROUP_ROW, int(counted.sum()), int(compared.any(axis=0).sum()), shares))
    return rows


def comparison_regions(space: str, den: str | None, sizes: dict[str, int]) -> tuple[dict, str]:
    """The regions of the shares table: ``all``, then each visual area per hemisphere where an atlas is.

    Parameters
    ----------
    space : str
        The template space.
    den : str or None
        Its density (CIFTI densities stand for their meshes).
    sizes : dict
        Hemisphere → vertices of the maps.

    Returns
    -------
    regions : dict
        Region name (``all``, ``L_V1``...) → hemisphere → (vertices,) bool mask.
    note : str
        Which atlas gave the areas, or why there are none.
    """
    regions = {ALL_REGION: {h: np.ones(n, dtype=bool) for h, n in sizes.items()}}
    meshes, source = find_meshes("", space, den, None)
    if not meshes or any(h not in meshes or meshes[h].n_vertices != n for h, n in sizes.items()):
        reason = source if not meshes else "the mesh does not match the maps' vertex count"
        return regions, f"Only every vertex ('all'), no visual areas: no mesh for the atlas ({reason})."
    atlas, note = visual_areas(meshes)
    if atlas is None:
        return regions, f"Only every vertex ('all'), no visual areas. {note}"
    for hemi in HEMIS:
        for k, name in enumerate(atlas.names, start=1):
            regions[f"{hemi}_{name}"] = {hemi: atlas.labels[hemi] == k}
    return regions, f"Visual areas: {', '.join(atlas.names)} per hemisphere, {atlas.source}."


def _group_name(key: OutputKey, hemi: str | None, stat: str | None, suffix: str, ext: str) -> str:
    entities = {"task": key.task, "hemi": hemi, "space": key.space, "den": key.den, "model": COMPARISON_MODEL}
    if suffix == MAP_SUFFIX:
        entities.update(stat=stat, desc=WINNER)
    return bids_name(entities, suffix, ext)


def _write_maps(
    group_dir: Path, key: OutputKey, models: list[str], per_hemi: dict, common: dict, sources: list[str]
) -> list[Path]:
    """The share maps (one statistic per model), the count map and one sidecar per hemisphere."""
    geometry = GiftiGeometry(hemis={h: per_hemi[h][1].size for h in HEMIS})
    stats = {
        f"{m}share": (lambda h, j=j: per_hemi[h][0][j], SHARE_DESCRIPTION.format(model=m))
        for j, m in enumerate(models)
    }
    stats[COUNT_STAT] = (lambda h: per_hemi[h][1], COUNT_DESCRIPTION)
    paths: list[Path] = []
    described: dict[str, dict[str, dict]] = {h: {} for h in HEMIS}
    for stat, (values_of, description) in stats.items():
        names = {h: _group_name(key, h, stat, MAP_SUFFIX, ".func.gii") for h in HEMIS}
        values = np.concatenate([values_of(h) for h in HEMIS])
        meta = {"Statistic": stat, "Parameter": WINNER}
        paths += geometry.write_maps({WINNER: values}, lambda h, n=names: group_dir / n[h], meta)
        for hemi, name in names.items():
            other = next(h for h in HEMIS if h != hemi)
            described[hemi][stat] = {
                "Description": description,
                "Units": "1",
                "Sources": [s for s in sources if f"_hemi-{other}_" not in s],
                "Files": [name],
            }
    for hemi in HEMIS:
        own = {
            **common,
            "Description": WINNER_DESCRIPTION,
            "SpatialReference": spatial_reference(key.space, hemi=hemi, den=key.den),
            "GeneratedBy": {"Name": "prfmap", "Version": __version__},
        }
        sidecar = parameter_sidecar(WINNER, described[hemi], own)
        write_json_atomic(group_dir / _group_name(key, hemi, None, MAP_SUFFIX, ".json"), sidecar)
    return paths


def _cell(value: float | int | str) -> str:
    if isinstance(value, float):
        return "n/a" if not np.isfinite(value) else f"{value:.6g}"
    return str(value)


def _write_table(group_dir: Path, key: OutputKey, models: list[str], rows: list[dict], common: dict) -> Path:
    """The shares TSV and its sidecar describing the columns."""
    columns = ["region", "participant", "participants", "vertices", *models]
    lines = ["\t".join(columns)]
    for row in rows:
        cells = [row["region"], row["participant"], row["participants"], row["vertices"], *row["shares"]]
        lines.append("\t".join(_cell(c) for c in cells))
    path = group_dir / _group_name(key, None, None, SHARES_SUFFIX, ".tsv")
    write_text_atomic(path, "\n".join(lines) + "\n")
    described = {
        "region": {"Description": "'all' (every vertex of both hemispheres) or <hemi>_<visual area>"},
        "participant": {"Description": "sub-<label>, or 'group' for the group's row of the region"},
        "participants": {
            "Description": "1 on a participant's row; on the group's, the participants with a compared "
            "vertex in the region (those its shares average)"
        },
        "vertices": {
            "Description": "vertices of the region with a winner (for the group: in any participant)",
            "Units": "1",
        },
        **{
            m: {
                "Description": f"share of the compared vertices {m} wins (group: the mean of the "
                "participants' shares); n/a without compared vertices",
                "Units": "1",
            }
            for m in models
        },
    }
    sidecar = {
        **described,
        **common,
        "Definition": DEFINITION,
        "GeneratedBy": {"Name": "prfmap", "Version": __version__},
    }
    write_json_atomic(path.with_suffix(".json"), sidecar)
    return path


def write_group_comparison(
    output_dir: Path, fit: FitKey, members: Sequence[WinnerMaps], subjects: Sequence[str]
) -> GroupComparison:
    """Write one comparison's group maps and shares table.

    Parameters
    ----------
    output_dir : Path
        The BIDS-App output folder (maps go under ``group/``).
    fit : FitKey
        The comparison (``model`` ``best``).
    members : sequence of WinnerMaps
        Its map sets, every participant's.
    subjects : sequence of str
        The participants.

    Returns
    -------
    GroupComparison
        What the group report shows of it.
    """
    models = _models(members)
    votes = {h: participant_votes(members, subjects, models, h) for h in HEMIS}
    per_hemi = {h: group_shares(votes[h]) for h in HEMIS}
    regions, atlas_note = comparison_regions(fit.space, fit.den, {h: votes[h].shape[2] for h in HEMIS})
    rows = region_rows(votes, subjects, regions)
    key = members[0].key
    if key.den in CIFTI_MESH_DENSITY:  # CIFTI grayordinates are written as GIFTI on their mesh
        key = dataclasses.replace(key, den=CIFTI_MESH_DENSITY[key.den])
    order = list(catalog.MODELS)
    common = {
        "Task": fit.task,
        "Space": fit.space,
        "Density": fit.den,
        "Model": COMPARISON_MODEL,
        "Levels": {str(order.index(m) if m in order else i): m for i, m in enumerate(models)},
        "ModelsCompared": models,
        "Participants": [f"sub-{s}" for s in subjects],
    }
    sources = [f"bids::{p.relative_to(output_dir).as_posix()}" for m in members for p in m.files]
    group_dir = output_dir / "group"
    files = _write_maps(group_dir, key, models, per_hemi, common, sources)
    table = _write_table(group_dir, key, models, rows, {**common, "Atlas": atlas_note, "Sources": sources})
    logger.info("group model comparison of %s written for %d participants", fit, len(subjects))
    share_maps = {h: {m: per_hemi[h][0][j] for j, m in enumerate(models)} for h in HEMIS}
    return GroupComparison(
        fit.task,
        fit.space,
        fit.den,
        list(subjects),
        models,
        rows,
        [*files, table],
        atlas_note,
        DEFINITION,
        share_maps,
    )


def run_group_comparisons(
    output_dir: Path, participant_labels: Sequence[str] | None, subjects: Sequence[str]
) -> list[GroupComparison]:
    """Every comparison (``model-best`` maps) in a template space that all ``subjects`` have, written.

    Parameters
    ----------
    output_dir : Path
        The BIDS-App output folder.
    participant_labels : sequence of str, optional
        The participants selected (as for :func:`prfmap.group.run_group`).
    subjects : sequence of str
        The participants of the group: a comparison some of them lack is left out, with a log line.

    Returns
    -------
    list of GroupComparison
        One per comparison written.
    """
    by_fit: dict[FitKey, list[WinnerMaps]] = defaultdict(list)
    for maps in find_winner_maps(output_dir, participant_labels):
        if maps.key.space in TEMPLATE_SPACES and maps.key.subject in subjects:
            by_fit[maps.fit].append(maps)
    written = []
    for fit, members in sorted(by_fit.items(), key=lambda item: str(item[0])):
        have = sorted({m.key.subject for m in members})
        if len(have) < len(subjects):
            logger.warning(
                "%s (the model comparison) left out of the group: only %d of the %d participants have "
                "its winner maps (%s; missing: %s)",
                fit,
                len(have),
                len(subjects),
                ", ".join(f"sub-{s}" for s in have),
                ", ".join(f"sub-{s}" for s in subjects if s not in have),
            )
            continue
        members = sorted(members, key=lambda m: (m.key.subject, m.key.session or ""))
        written.append(write_group_comparison(output_dir, fit, members, sorted(subjects)))
    return written
