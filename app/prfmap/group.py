"""The group level: participants' maps in a shared template space combined vertex by vertex."""

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
from scipy.stats import circmean

from prfmap import __version__
from prfmap.derivatives import MAP_SUFFIX, PYBIDS_CONFIG, OutputKey
from prfmap.engine import catalog
from prfmap.errors import BadDataError, MissingInputError
from prfmap.io.atomic import write_json_atomic
from prfmap.io.bold import read_dscalar, read_gifti
from prfmap.io.geometry import GiftiGeometry
from prfmap.io.naming import bids_name
from prfmap.io.references import spatial_reference
from prfmap.io.spaces import CIFTI_MESH_DENSITY
from prfmap.report.group import GroupFit, participant_row, write_group_report

logger = logging.getLogger(__name__)

TEMPLATE_SPACES = ("fsaverage", "fsaverage5", "fsaverage6", "fsLR")
HEMIS = ("L", "R")
STATISTICS = {
    "polarangle": ("circmean", "deg", "circular mean of the polar angle"),
    "eccentricity": ("median", "deg", "median eccentricity"),
    "sigma": ("median", "deg", "median pRF size (sigma)"),
    "r2": ("mean", "1", "mean variance explained over all participants with a finite r2"),
}
COUNT_DESCRIPTION = (
    "participants contributing at the vertex: finite maps, {on} >= threshold and an estimate not "
    "flagged doubtful in the status map (bits 4, 8, 16, 64) (a participant with several sessions "
    "is first combined over them with the same statistics)"
)
THRESHOLD_MAPS = ("r2", "cvr2")
"""What the group level may threshold on: r2 (the fitted data) or cvr2 (held-out runs)."""
CVR2_STATISTIC = (
    "mean",
    "1",
    "mean cross-validated variance explained over all participants with a finite cvr2",
)


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
    """

    key: OutputKey
    files: list[Path] = field(default_factory=list)
    maps: dict[str, dict[str, np.ndarray]] = field(default_factory=dict)
    fov_deg: float | None = None

    @property
    def fit(self) -> FitKey:
        """The fit this map set belongs to."""
        k = self.key
        return FitKey(k.task, k.space, k.den, k.model)


PYBIDS_CONFIGS = ["bids", "derivatives", PYBIDS_CONFIG]


def _output_key(entities: dict[str, str]) -> OutputKey | None:
    required = ("subject", "task", "space", "model")
    if any(k not in entities for k in required):
        return None
    return OutputKey(
        subject=entities["subject"],
        session=entities.get("session"),
        task=entities["task"],
        space=entities["space"],
        den=entities.get("den"),
        res=entities.get("res"),
        model=entities["model"],
    )


def _sidecar_fov(path: Path) -> float | None:
    sidecar = path.with_name(path.name.split(".")[0] + ".json")
    try:
        fov = json.loads(sidecar.read_text()).get("Stimulus", {}).get("FieldOfViewDeg")
    except (OSError, ValueError, AttributeError):
        return None
    return float(fov) if isinstance(fov, int | float) else None


def _read_gifti_map(path: Path) -> np.ndarray:
    values = read_gifti(path)
    if values.ndim != 2 or values.shape[1] != 1:
        raise BadDataError(f"{path} holds {values.shape[1]} maps, not one; re-run the participant level")
    return values[:, 0].astype(np.float64)


def _read_cifti_maps(path: Path) -> dict[str, dict[str, np.ndarray]]:
    maps, geometry = read_dscalar(path)
    surface = geometry.surface()
    return {name: surface.split(values) for name, values in maps.items()}


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
        ignored.
    """
    wanted = {p.removeprefix("sub-") for p in participant_labels} if participant_labels else None
    found: dict[OutputKey, ParticipantMaps] = {}
    for path in sorted(Path(output_dir).glob(f"sub-*/**/func/sub-*_{MAP_SUFFIX}.*")):
        entities = {k: str(v) for k, v in parse_file_entities(str(path), config=PYBIDS_CONFIGS).items()}
        ext = entities.get("extension", "")
        key = _output_key(entities)
        if key is None or (wanted is not None and key.subject not in wanted):
            continue
        if ext == ".func.gii" and "hemi" in entities and "param" in entities:
            hemi, param = entities["hemi"], entities["param"]
            if f"{key.stem(hemi=hemi, param=param)}_{MAP_SUFFIX}{ext}" != path.name:
                continue
            entry = found.setdefault(key, ParticipantMaps(key))
            entry.maps.setdefault(param, {})[hemi] = _read_gifti_map(path)
            entry.files.append(path)
            entry.fov_deg = entry.fov_deg or _sidecar_fov(path)
        elif ext == ".dscalar.nii" and "param" not in entities:
            if f"{key.stem()}_{MAP_SUFFIX}{ext}" != path.name:
                continue
            entry = found.setdefault(key, ParticipantMaps(key))
            entry.maps.update(_read_cifti_maps(path))
            entry.files.append(path)
            entry.fov_deg = entry.fov_deg or _sidecar_fov(path)
    return list(found.values())


def combine(
    stacks: dict[str, np.ndarray], r2_threshold: float, threshold_on: str = "r2"
) -> dict[str, np.ndarray]:
    """Combine (participants, vertices) maps into group maps.

    Parameters
    ----------
    stacks : dict of str to ndarray
        ``polarangle``, ``eccentricity``, ``sigma`` and ``r2`` (and ``cvr2`` to threshold on
        it), each (participants, vertices).
    r2_threshold : float
        A participant contributes at a vertex when its ``threshold_on`` map there is at least
        this, its polar angle, eccentricity and sigma are finite and, with a ``status`` stack, its
        estimate there is not doubtful (no bit of ``catalog.DOUBTFUL``).
    threshold_on : {"r2", "cvr2"}
        The variance explained the threshold applies to; with ``cvr2`` its mean is returned too.

    Returns
    -------
    dict of str to ndarray
        ``polarangle`` (``scipy.stats.circmean``, degrees in (−180, 180]), ``eccentricity`` and ``sigma``
        (medians), ``r2`` (mean over participants with a finite r², thresholded or not) and
        ``count`` (contributing participants); NaN where nobody contributes.
    """
    on = stacks[threshold_on]
    ok = np.isfinite(on) & (on >= r2_threshold)
    if "status" in stacks:  # doubtful estimates (catalog.DOUBTFUL) do not contribute
        ok &= ~catalog.doubtful(stacks["status"])
    for label in ("polarangle", "eccentricity", "sigma"):
        ok &= np.isfinite(stacks[label])
    count = ok.sum(axis=0)
    some = count > 0
    polar = np.full(count.shape, np.nan)
    polar[some] = circmean(
        np.where(ok, stacks["polarangle"], np.nan)[:, some], high=180.0, low=-180.0, axis=0, nan_policy="omit"
    )
    out = {"polarangle": np.where(polar == -180.0, 180.0, polar)}  # range (−180, 180]
    for label in ("eccentricity", "sigma"):
        masked = np.where(ok, stacks[label], np.nan)
        med = np.full(masked.shape[1], np.nan)
        med[some] = np.nanmedian(masked[:, some], axis=0)
        out[label] = med
    for label in ("r2", "cvr2") if threshold_on == "cvr2" else ("r2",):
        finite = np.isfinite(stacks[label])
        n_finite = finite.sum(axis=0)
        total = np.where(finite, stacks[label], 0.0).sum(axis=0)
        out[label] = np.where(n_finite > 0, total / np.maximum(n_finite, 1), np.nan)
    out["count"] = count.astype(np.float64)
    return out


def _statistics(threshold_on: str) -> dict[str, tuple[str, str, str]]:
    """The group maps written: :data:`STATISTICS`, and the mean cvr2 when thresholding on it."""
    return {**STATISTICS, "cvr2": CVR2_STATISTIC} if threshold_on == "cvr2" else dict(STATISTICS)


def _spaces_message(sets: list[ParticipantMaps], subjects: list[str]) -> str:
    spaces: dict[str, set[str]] = defaultdict(set)
    for s in sets:
        spaces[s.key.subject].add(s.key.space + (f" den-{s.key.den}" if s.key.den else ""))
    listing = "; ".join(
        f"sub-{sub}: {', '.join(sorted(spaces[sub])) or 'no surface maps'}" for sub in subjects
    )
    return (
        f"no template space ({', '.join(TEMPLATE_SPACES)}) holds maps of every participant "
        f"({listing}); re-run the participant level with a shared --output-space, or select "
        "participants with --participant-label"
    )


def _group_name(key: OutputKey, hemi: str, param: str | None, stat: str) -> str:
    entities = {
        "task": key.task,
        "hemi": hemi,
        "space": key.space,
        "res": key.res,
        "den": key.den,
        "model": key.model,
        "stat": stat,
        "desc": param,
    }
    return bids_name(entities, MAP_SUFFIX, ".func.gii")


def _stack(sets: list[ParticipantMaps], label: str, hemi: str) -> np.ndarray:
    arrays = []
    for s in sets:
        values = s.maps.get(label, {}).get(hemi)
        if values is None and label == "cvr2":
            raise BadDataError(
                f"sub-{s.key.subject} has no cvr2 map in {s.fit} (it needs two or more runs and "
                "no --no-cvr2 at the participant level); threshold on r2 (--threshold-on r2)"
            )
        if values is None:
            raise BadDataError(
                f"sub-{s.key.subject} has no {label} map for hemisphere {hemi} in "
                f"{s.fit}; re-run its participant level"
            )
        arrays.append(values)
    sizes = {a.size for a in arrays}
    if len(sizes) != 1:
        listing = ", ".join(f"sub-{s.key.subject}: {a.size}" for s, a in zip(sets, arrays, strict=True))
        raise BadDataError(f"hemisphere {hemi} vertex counts differ in {sets[0].fit} ({listing})")
    return np.stack(arrays)


def _per_subject(
    stacks: dict[str, np.ndarray],
    members: list[ParticipantMaps],
    r2_threshold: float,
    threshold_on: str = "r2",
) -> dict[str, np.ndarray]:
    """Combine the sessions of each participant first, so each counts once."""
    subjects = [m.key.subject for m in members]
    if len(set(subjects)) == len(subjects):
        return stacks
    labels = _statistics(threshold_on)
    rows: dict[str, list[np.ndarray]] = {label: [] for label in labels}
    for subject in dict.fromkeys(subjects):
        idx = [i for i, s in enumerate(subjects) if s == subject]
        combined = combine({k: v[idx] for k, v in stacks.items()}, r2_threshold, threshold_on)
        for label in labels:
            rows[label].append(combined[label])
    return {label: np.stack(values) for label, values in rows.items()}


@dataclass
class GroupResult:
    """What one fit's group maps hold, for the group report."""

    fit: FitKey
    subjects: list[str]
    maps: dict[str, dict[str, np.ndarray]]
    files: list[Path]
    r2_threshold: float
    fov_deg: float | None = None
    threshold_on: str = "r2"


def run_group(
    output_dir: str | Path,
    *,
    participant_labels: Sequence[str] | None = None,
    r2_threshold: float = 0.1,
    report: bool = True,
    threshold_on: str = "r2",
) -> list[GroupResult]:
    """Write group maps of every fit that all participants share in a template space.

    Parameters
    ----------
    output_dir : str or Path
        The BIDS-App output folder holding the participants' maps.
    participant_labels : sequence of str, optional
        Only these participants; default: every participant with maps.
    r2_threshold : float
        A participant contributes at a vertex when its ``threshold_on`` map there is at least this.
    report : bool
        Also write ``<output_dir>/group.html``.
    threshold_on : {"r2", "cvr2"}
        Threshold the variance explained in the fitted data (``r2``) or in held-out runs
        (``cvr2``: every participant needs ``cvr2`` maps, i.e. two or more runs; its mean is
        written too).

    Returns
    -------
    list of GroupResult
        One per shared fit (task, space, density, model).

    Raises
    ------
    MissingInputError
        No participant maps under ``output_dir``.
    BadDataError
        No fit in a template space shared by every participant (the message lists each
        participant's spaces), or maps that do not line up.
    """
    output_dir = Path(output_dir)
    sets = find_participant_maps(output_dir, participant_labels)
    subjects = sorted({s.key.subject for s in sets})
    if participant_labels:
        missing = sorted({p.removeprefix("sub-") for p in participant_labels} - set(subjects))
        if missing:
            raise MissingInputError(
                f"no maps of {', '.join('sub-' + m for m in missing)} under {output_dir}; "
                "run the participant level for them first"
            )
    if not subjects:
        raise MissingInputError(
            f"no participant maps (*_{MAP_SUFFIX}.func.gii or .dscalar.nii) under {output_dir}; "
            "run the participant level first"
        )
    by_fit: dict[FitKey, list[ParticipantMaps]] = defaultdict(list)
    for s in sets:
        if s.key.space in TEMPLATE_SPACES:
            by_fit[s.fit].append(s)
    shared = {
        fit: members for fit, members in by_fit.items() if {m.key.subject for m in members} == set(subjects)
    }
    if not shared:
        raise BadDataError(_spaces_message(sets, subjects))
    results = [
        _write_fit(
            output_dir,
            fit,
            sorted(members, key=lambda m: (m.key.subject, m.key.session or "")),
            subjects,
            r2_threshold,
            threshold_on,
        )
        for fit, members in sorted(shared.items(), key=lambda item: str(item[0]))
    ]
    if report:
        fits = [_report_fit(output_dir, r, by_fit[r.fit]) for r in results]
        write_group_report(output_dir, fits)
    return results


def _report_fit(output_dir: Path, result: GroupResult, members: list[ParticipantMaps]) -> GroupFit:
    fit = result.fit
    rows = []
    for subject in result.subjects:
        mine = [m for m in members if m.key.subject == subject]
        merged: dict[str, dict[str, np.ndarray]] = {}
        for m in mine:  # sessions side by side: every unit of every session counts
            for label, per_hemi in m.maps.items():
                for hemi, values in per_hemi.items():
                    key = f"{hemi}{m.key.session or ''}"
                    merged.setdefault(label, {})[key] = values
        sessions = sorted(m.key.session for m in mine if m.key.session)
        rows.append(
            participant_row(subject, sessions, merged, result.r2_threshold, result.fov_deg, output_dir)
        )
    return GroupFit(
        task=fit.task,
        space=fit.space,
        den=fit.den,
        model=fit.model,
        subjects=list(result.subjects),
        maps=result.maps,
        files=list(result.files),
        r2_threshold=result.r2_threshold,
        fov_deg=result.fov_deg,
        participants=rows,
    )


def _write_fit(
    output_dir: Path,
    fit: FitKey,
    members: list[ParticipantMaps],
    subjects: list[str],
    r2_threshold: float,
    threshold_on: str = "r2",
) -> GroupResult:
    statistics = _statistics(threshold_on)
    per_hemi = {}
    for hemi in HEMIS:
        stacks = {label: _stack(members, label, hemi) for label in statistics}
        if all(m.maps.get("status", {}).get(hemi) is not None for m in members):
            stacks["status"] = _stack(members, "status", hemi)
        stacks = _per_subject(stacks, members, r2_threshold, threshold_on)
        per_hemi[hemi] = combine(stacks, r2_threshold, threshold_on)
    geometry = GiftiGeometry(hemis={h: per_hemi[h]["count"].size for h in HEMIS})
    key = members[0].key
    if key.den in CIFTI_MESH_DENSITY:  # CIFTI grayordinates are written as GIFTI on their mesh
        key = dataclasses.replace(key, den=CIFTI_MESH_DENSITY[key.den])
    group_dir = output_dir / "group"
    fovs = [m.fov_deg for m in members if m.fov_deg]
    fov = max(fovs) if fovs else None
    sources = [f"bids::{p.relative_to(output_dir).as_posix()}" for m in members for p in m.files]
    written: list[Path] = []
    outputs = [(label, label, *statistics[label]) for label in statistics]
    outputs.append(("count", None, "count", "1", COUNT_DESCRIPTION.format(on=threshold_on)))
    for label, param, stat, units, description in outputs:
        values = np.concatenate([per_hemi[h][label] for h in HEMIS])
        names = {h: _group_name(key, h, param or "count", stat) for h in HEMIS}
        paths = geometry.write_maps(
            {label: values},
            lambda h, n=names: group_dir / n[h],
            {"Statistic": stat, "Parameter": param or "count"},
        )
        for path in paths:
            write_json_atomic(
                path.with_name(path.name.replace(".func.gii", ".json")),
                {
                    "Parameter": param or "count",
                    "Statistic": stat,
                    "Units": units,
                    "Description": description,
                    "Task": fit.task,
                    "Space": fit.space,
                    "Density": fit.den,
                    "Model": fit.model,
                    "R2Threshold": r2_threshold,
                    "ThresholdOn": threshold_on,
                    "StimulusFieldOfViewDeg": fov,
                    "Participants": [f"sub-{s}" for s in subjects],
                    "Sources": sources,
                    "SpatialReference": spatial_reference(
                        key.space, hemi="L" if "_hemi-L_" in path.name else "R", den=key.den
                    ),
                    "GeneratedBy": {"Name": "prfmap", "Version": __version__},
                },
            )
            written.append(path)
    logger.info("group maps of %s written for %d participants", fit, len(subjects))
    return GroupResult(fit, subjects, per_hemi, written, r2_threshold, fov, threshold_on)
