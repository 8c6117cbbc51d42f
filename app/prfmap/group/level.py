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
from prfmap.engine import catalog
from prfmap.engine.catalog.connective import CF_MODEL
from prfmap.errors import BadDataError, MissingInputError
from prfmap.group.areas import GroupAreas, group_areas, write_group_areas
from prfmap.group.combine import (
    COUNT_DESCRIPTION,
    IVW_COUNT_DESCRIPTION,
    IVW_COUNT_STAT,
    IVW_DERIVED_DESCRIPTION,
    IVW_DESCRIPTION,
    IVW_NOT_AVERAGED,
    IVW_STAT,
    combine,
    has_se,
    ivw_labels,
    ivw_maps,
    noise_models,
    ordered,
    per_subject,
    stack,
    statistics_for,
)
from prfmap.group.comparison import run_group_comparisons
from prfmap.group.maps import (
    HEMIS,
    TEMPLATE_SPACES,
    FitKey,
    ParticipantMaps,
    find_participant_maps,
    volume_map_spaces,
)
from prfmap.group.sidecars import parameter_sidecar
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


def _volume_message(output_dir: Path, volume: dict[str, set[str]], subjects: Sequence[str]) -> str:
    listing = "; ".join(f"sub-{sub}: {', '.join(sorted(volume[sub]))}" for sub in subjects)
    return (
        f"the maps of {', '.join('sub-' + s for s in subjects)} under {output_dir} are in volume "
        f"spaces only ({listing}): the group level combines surface maps in a template space "
        f"({', '.join(TEMPLATE_SPACES)}), not volumes; fit runs fMRIPrep resampled to one "
        "(fMRIPrep --output-spaces fsaverage5 or --cifti-output) to combine participants"
    )


def _group_name(
    key: OutputKey, hemi: str, param: str | None, stat: str | None, extension: str = ".func.gii"
) -> str:
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
    return bids_name(entities, MAP_SUFFIX, extension)


@dataclass
class GroupResult:
    """What one fit's group maps hold, for the group report.

    ``maps`` is hemisphere → label → (vertices,) group map (and ``count``); ``ivw`` the
    inverse-variance-weighted means (``stat-ivwmean``) and ``ivw_count`` their participants, by
    hemisphere and label, both empty when the participants have no ``stat-se`` maps.
    """

    fit: FitKey
    subjects: list[str]
    maps: dict[str, dict[str, np.ndarray]]
    files: list[Path]
    r2_threshold: float
    fov_deg: float | None = None
    threshold_on: str = "r2"
    ivw: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    ivw_count: dict[str, dict[str, np.ndarray]] = dataclasses.field(default_factory=dict)
    areas: GroupAreas | None = None


def run_group(
    output_dir: str | Path,
    *,
    participant_labels: Sequence[str] | None = None,
    r2_threshold: float = 0.1,
    report: bool = True,
    threshold_on: str = "r2",
    bids_dir: str | Path | None = None,
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
    bids_dir : str or Path, optional
        The raw dataset: its participants without maps (never fitted) are named in the log.

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
        participant's spaces), maps that do not line up, or (selected) participants whose maps
        are all in volume spaces (T1w, MNI…), which the group level does not combine.
    """
    output_dir = Path(output_dir)
    # the group level combines pRF fits; connective-field maps stay per participant
    sets = [m for m in find_participant_maps(output_dir, participant_labels) if m.key.model != CF_MODEL]
    subjects = sorted({s.key.subject for s in sets})
    volume = volume_map_spaces(output_dir, participant_labels)
    volume_only = {sub: spaces for sub, spaces in volume.items() if sub not in subjects}
    if volume_only and (participant_labels or not subjects):
        raise BadDataError(_volume_message(output_dir, volume_only, sorted(volume_only)))
    for sub in sorted(volume_only):
        logger.warning(
            "sub-%s left out of the group: its maps are in volume spaces only (%s), which the group "
            "level does not combine",
            sub,
            ", ".join(sorted(volume_only[sub])),
        )
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
    _log_unfitted(bids_dir, output_dir, participant_labels, set(subjects) | set(volume_only))
    if len(subjects) == 1:
        logger.warning(
            "the group has one participant (sub-%s): its group maps are that participant's maps",
            subjects[0],
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
    _log_skipped(sets, by_fit, shared, subjects)
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
    comparisons = run_group_comparisons(output_dir, participant_labels, subjects)
    if report:
        fits = [_report_fit(output_dir, r, by_fit[r.fit]) for r in results]
        write_group_report(output_dir, fits, comparisons)
    return results


def _log_unfitted(
    bids_dir: str | Path | None, output_dir: Path, participant_labels: Sequence[str] | None, have: set[str]
) -> None:
    """A warning naming the raw dataset's participants that have no maps (never fitted)."""
    if bids_dir is None or participant_labels:
        return
    raw = {p.name.removeprefix("sub-") for p in Path(bids_dir).glob("sub-*") if p.is_dir()}
    unfitted = sorted(raw - have)
    if unfitted:
        logger.warning(
            "%s of bids_dir %s no participant maps under %s and %s not in the group; run the "
            "participant level for %s first",
            ", ".join(f"sub-{s}" for s in unfitted),
            "has" if len(unfitted) == 1 else "have",
            output_dir,
            "is" if len(unfitted) == 1 else "are",
            "it" if len(unfitted) == 1 else "them",
        )


def _log_skipped(
    sets: list[ParticipantMaps],
    by_fit: dict[FitKey, list[ParticipantMaps]],
    shared: dict[FitKey, list[ParticipantMaps]],
    subjects: list[str],
) -> None:
    """One log line per fit the group level leaves out: not every participant has it, or not in a template."""
    for fit, members in sorted(by_fit.items(), key=lambda item: str(item[0])):
        if fit not in shared:
            have = sorted({m.key.subject for m in members})
            logger.warning(
                "%s left out of the group: only %d of the %d participants have it (%s; missing: %s)",
                fit,
                len(have),
                len(subjects),
                ", ".join(f"sub-{s}" for s in have),
                ", ".join(f"sub-{s}" for s in subjects if s not in have),
            )
    others = ", ".join(sorted({s.key.space for s in sets if s.key.space not in TEMPLATE_SPACES}))
    if others:
        logger.info(
            "maps in %s left out of the group: not a template space (%s)", others, ", ".join(TEMPLATE_SPACES)
        )


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
        ivw=result.ivw,
        contributes=f"{'cvr2' if result.threshold_on == 'cvr2' else 'r²'} ≥ {result.r2_threshold:g}"
        + (", not doubtful" if all("status" in m.maps for m in members) else ""),
        areas=result.areas,
    )


def _log_ivw(members: list[ParticipantMaps], labels: list[str], fit: FitKey) -> None:
    """A warning where some map sets have standard errors of a parameter and others do not."""
    offered = dict.fromkeys(
        label
        for m in members
        for stat, label in m.stat_maps
        if stat == "se" and label not in IVW_NOT_AVERAGED
    )
    left = ordered([label for label in offered if label not in labels])
    if left:
        lacking = sorted({m.key.subject for m in members if any(not has_se(m, lab) for lab in left)})
        logger.warning(
            "%s: no stat-%s map of %s: %s lack their stat-se maps (re-run their participant level)",
            fit,
            IVW_STAT,
            ", ".join(left),
            ", ".join(f"sub-{s}" for s in lacking),
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
    averaged = ivw_labels(members)
    _log_ivw(members, averaged, fit)
    models = noise_models(members)
    if averaged and len(models) > 1:
        logger.warning(
            "%s: no stat-%s maps: the participants' standard errors assume different noise models (%s), "
            "whose errors cannot be weighed together (ols's are too small under autocorrelated noise); "
            "run their participant level with one --noise-model",
            fit,
            IVW_STAT,
            "; ".join(f"{model}: {', '.join(names)}" for model, names in sorted(models.items())),
        )
        averaged = []
    per_hemi: dict[str, dict[str, np.ndarray]] = {}
    ivw: dict[str, dict[str, np.ndarray]] = {}
    ivw_count: dict[str, dict[str, np.ndarray]] = {}
    for hemi in HEMIS:
        stacks = {label: stack(members, label, hemi) for label in statistics}
        if all(m.maps.get("status", {}).get(hemi) is not None for m in members):
            stacks["status"] = stack(members, "status", hemi)
        if averaged:
            ivw[hemi], ivw_count[hemi] = ivw_maps(members, stacks, averaged, hemi, r2_threshold, threshold_on)
        stacks = per_subject(stacks, members, r2_threshold, threshold_on)
        per_hemi[hemi] = combine(stacks, r2_threshold, threshold_on)
    geometry = GiftiGeometry(hemis={h: per_hemi[h]["count"].size for h in HEMIS})
    key = members[0].key
    if key.den in CIFTI_MESH_DENSITY:  # CIFTI grayordinates are written as GIFTI on their mesh
        key = dataclasses.replace(key, den=CIFTI_MESH_DENSITY[key.den])
    fovs = [m.fov_deg for m in members if m.fov_deg]
    fov = max(fovs) if fovs else None
    sources = [f"bids::{p.relative_to(output_dir).as_posix()}" for m in members for p in m.files]
    se_sources = [f"bids::{p.relative_to(output_dir).as_posix()}" for m in members for p in m.stat_files]
    common = {
        "Task": fit.task,
        "Space": fit.space,
        "Density": fit.den,
        "Model": fit.model,
        "R2Threshold": r2_threshold,
        "ThresholdOn": threshold_on,
        "StimulusFieldOfViewDeg": fov,
        "Participants": [f"sub-{s}" for s in subjects],
    }
    outputs = [(per_hemi, label, *statistics[label], sources) for label in statistics]
    outputs.append((per_hemi, "count", "count", "1", COUNT_DESCRIPTION.format(on=threshold_on), sources))
    for label in ivw.get(HEMIS[0], {}):
        entry = catalog.parameter_by_label(label)
        units = entry.units if entry is not None else "n/a"
        description = IVW_DERIVED_DESCRIPTION.get(label, IVW_DESCRIPTION).format(on=threshold_on)
        outputs.append((ivw, label, IVW_STAT, units, description, sources + se_sources))
        if label in averaged:
            counted = IVW_COUNT_DESCRIPTION.format(on=threshold_on)
            outputs.append((ivw_count, label, IVW_COUNT_STAT, "1", counted, sources + se_sources))
    by_param: dict[str, list[tuple]] = defaultdict(list)
    for maps, label, *rest in outputs:
        by_param[label].append((maps, *rest))
    written: list[Path] = []
    for label, stats in by_param.items():
        written += _write_parameter(output_dir / "group", key, geometry, label, stats, common)
    areas = group_areas(output_dir, members, {h: per_hemi[h]["count"].size for h in HEMIS})
    written += write_group_areas(output_dir / "group", key, areas, subjects)
    if not areas.rows:
        logger.info("%s: %s", fit, areas.note)
    logger.info("group maps of %s written for %d participants", fit, len(subjects))
    return GroupResult(
        fit, subjects, per_hemi, written, r2_threshold, fov, threshold_on, ivw, ivw_count, areas
    )


def _write_parameter(
    group_dir: Path,
    key: OutputKey,
    geometry: GiftiGeometry,
    label: str,
    stats: list[tuple[dict[str, dict[str, np.ndarray]], str, str, str, list[str]]],
    common: dict,
) -> list[Path]:
    """A parameter's group maps (every statistic, both hemispheres) and one sidecar per hemisphere.

    Parameters
    ----------
    group_dir : Path
        ``<output_dir>/group``.
    key : OutputKey
        The fit's entities (its density that of the mesh for CIFTI inputs).
    geometry : GiftiGeometry
        Both hemispheres' vertex counts.
    label : str
        The parameter (``desc``).
    stats : list of tuple
        One per statistic: (hemisphere → label → values, statistic, units, description of the
        statistic, sources).
    common : dict
        The keys every group sidecar of the fit has (task, threshold, participants...).

    Returns
    -------
    list of Path
        The maps written (not their sidecar: :func:`~prfmap.group.sidecars.parameter_sidecar`,
        named without ``stat``, which pybids hands every statistic's map of the parameter).
    """
    paths: list[Path] = []
    described: dict[str, dict[str, dict]] = {h: {} for h in HEMIS}
    for maps, stat, units, description, sources in stats:
        values = np.concatenate([maps[h][label] for h in HEMIS])
        names = {h: _group_name(key, h, label, stat) for h in HEMIS}
        paths += geometry.write_maps(
            {label: values}, lambda h, n=names: group_dir / n[h], {"Statistic": stat, "Parameter": label}
        )
        for hemi, name in names.items():
            stale = group_dir / name.replace(".func.gii", ".json")
            stale.unlink(missing_ok=True)  # a per-statistic sidecar of an older prfmap
            described[hemi][stat] = {
                "Description": description,
                "Units": units,
                "Sources": sources,
                "Files": [name],
            }
    for hemi in HEMIS:
        own = {
            **common,
            "SpatialReference": spatial_reference(key.space, hemi=hemi, den=key.den),
            "GeneratedBy": {"Name": "prfmap", "Version": __version__},
        }
        sidecar = parameter_sidecar(label, described[hemi], own)
        write_json_atomic(group_dir / _group_name(key, hemi, label, None, ".json"), sidecar)
    return paths
