"""The BIDS group level: every fit the participants share, combined, written and reported."""

from __future__ import annotations

import dataclasses
import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from prfmap import __version__
from prfmap.derivatives import MAP_SUFFIX, OutputKey
from prfmap.errors import BadDataError, MissingInputError
from prfmap.group.combine import COUNT_DESCRIPTION, combine, per_subject, stack, statistics_for
from prfmap.group.maps import HEMIS, TEMPLATE_SPACES, FitKey, ParticipantMaps, find_participant_maps
from prfmap.io.atomic import write_json_atomic
from prfmap.io.geometry import GiftiGeometry
from prfmap.io.naming import bids_name
from prfmap.io.references import spatial_reference
from prfmap.io.spaces import CIFTI_MESH_DENSITY
from prfmap.report.group import GroupFit, participant_row, write_group_report

logger = logging.getLogger(__name__)


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
    statistics = statistics_for(threshold_on)
    per_hemi = {}
    for hemi in HEMIS:
        stacks = {label: stack(members, label, hemi) for label in statistics}
        if all(m.maps.get("status", {}).get(hemi) is not None for m in members):
            stacks["status"] = stack(members, "status", hemi)
        stacks = per_subject(stacks, members, r2_threshold, threshold_on)
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
