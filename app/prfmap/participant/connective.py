"""The participant level of ``--model cf``: connective fields from a source area to target areas.

Each run is loaded and preprocessed as for a pRF fit (high-pass, confounds, dummy scans, smoothing)
but needs no aperture; the runs are kept apart, not averaged: a resting-state run shares no signal
with another. Per hemisphere, every target unit (``--roi``, by default every other area of the
atlas) is fitted to the source area of its own hemisphere (:func:`prfmap.engine.connective.fit_cf`)
on the runs concatenated, and, with two or more runs, once per left-out run for its cross-validated
r². When the participant has a pRF fit of the same space on disk, each CF also carries the visual
field position and size its source vertices' pRFs give it. The maps are published beside the
participant's other fits, which they leave as they are.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from bids.layout import parse_file_entities

from prfmap import __version__
from prfmap.config import Config
from prfmap.derivatives import relative_link, sidecar_of, source_datasets, write_dataset_files
from prfmap.derivatives.areas import (
    SUMMARY_DESC,
    UnitAreas,
    write_area_files,
    write_area_summary,
    write_atlas_description,
)
from prfmap.derivatives.connective import CF_SUMMARY_COLUMNS, cf_area_rows, read_cf_fits
from prfmap.derivatives.dataset import bids_uri
from prfmap.derivatives.naming import MAP_SUFFIX, PYBIDS_CONFIG, OutputKey
from prfmap.engine import catalog
from prfmap.engine.catalog.connective import CF_CITATION, CF_DESCRIPTION, CF_MAPS, CF_MODEL, CF_STATUS
from prfmap.errors import BadDataError, MissingInputError, UsageError
from prfmap.io.atomic import write_json_atomic
from prfmap.io.bold import load_bold
from prfmap.io.geodesic import geodesic_distances
from prfmap.io.geometry import SurfaceLayout, UnitGeometry
from prfmap.io.meshes import find_midthickness
from prfmap.io.publish import COMMIT, new_staging, publish_participant
from prfmap.io.runs import RunInput
from prfmap.io.smoothing import smoothing_for
from prfmap.participant.areas import fit_areas, roi_units
from prfmap.participant.confounds import run_confounds
from prfmap.participant.load import ProgressFn
from prfmap.participant.plan import FitPlan, plan_fits, replaced_by
from prfmap.participant.preprocess import PreprocessedRun, preprocess_run
from prfmap.report.participant import write_participant_report
from prfmap.report.readback import read_unit_maps
from prfmap.report.rebuild import other_fits
from prfmap.runtime.progress import make_progress

logger = logging.getLogger(__name__)

INHERIT_MIN_WEIGHT = 0.5
"""A CF inherits a visual field position when source vertices with a pRF hold at least this share of
its weight."""


@dataclass(frozen=True)
class SourceHemisphere:
    """One hemisphere's part of the source area.

    Attributes
    ----------
    units : ndarray of int
        The source's units (positions in the fit's unit order) with data in every run.
    vertices : ndarray of int
        Their vertices in the hemisphere's mesh.
    distances : ndarray, shape (n, n)
        Geodesic distances between them (mm).
    """

    units: np.ndarray
    vertices: np.ndarray
    distances: np.ndarray


@dataclass(frozen=True)
class LoadedCF:
    """A CF fit's runs, source and targets.

    Attributes
    ----------
    plan : FitPlan
        The runs of the fit.
    geometry : UnitGeometry
        How the units lie on the meshes.
    runs : tuple of PreprocessedRun
        Every run, preprocessed, in the plan's order.
    tr : float
        Repetition time, seconds.
    source : dict of str to SourceHemisphere
        The source area per hemisphere.
    source_name : str
        ``--cf-source`` as the outputs show it.
    targets : ndarray of bool, shape (units,)
        The units fitted.
    unit_hemi : ndarray of str, shape (units,)
        Each unit's hemisphere.
    areas_note, meshes_note : str
        Which atlas gave the areas, and which surfaces gave the distances, in words.
    seconds : float
        Time the loading took.
    atlas : object, optional
        The atlas of the areas (:class:`prfmap.io.atlases.AtlasSource`), when one gave them.
    """

    plan: FitPlan
    geometry: UnitGeometry
    runs: tuple[PreprocessedRun, ...]
    tr: float
    source: dict[str, SourceHemisphere]
    source_name: str
    targets: np.ndarray
    unit_hemi: np.ndarray
    areas_note: str
    meshes_note: str
    seconds: float
    areas: UnitAreas | None = None


@dataclass(frozen=True)
class CFOutcome:
    """A CF fit's maps and what the sidecars and the log say of it.

    Attributes
    ----------
    loaded : LoadedCF
        What was fitted.
    maps : dict of str to ndarray
        ``desc`` label (:data:`prfmap.engine.catalog.connective.CF_MAPS`) to (units,) values.
    settings : dict
        The fit's settings, for the sidecars (``CFSettings``).
    inherited_from : str
        The pRF fit the visual field maps come from, or why there are none.
    seconds : float
        Time the fit and cross-validation took.
    """

    loaded: LoadedCF
    maps: dict[str, np.ndarray]
    settings: dict
    inherited_from: str
    seconds: float
    timings: dict[str, float] = field(default_factory=dict)


def run_connective_participant(
    config: Config,
    subject: str,
    runs: Sequence[RunInput],
    command: Sequence[str] = (),
    of: tuple[int, int] = (1, 1),
) -> list[Path]:
    """Fit, write and publish every CF fit of one participant.

    Parameters
    ----------
    config : Config
        The run's configuration (``--model cf``).
    subject : str
        The participant's label.
    runs : sequence of RunInput
        Its runs (they need no apertures).
    command : sequence of str
        The command line, shown in the report.
    of : tuple of int
        This participant's place among those of the run, and their number.

    Returns
    -------
    list of Path
        The files published.
    """
    start = time.perf_counter()
    plans = plan_fits(runs, CF_MODEL)
    logger.info(
        "sub-%s: %d run(s) in %d connective-field fit(s): %s",
        subject,
        len(runs),
        len(plans),
        ", ".join(p.name for p in plans),
    )
    outcomes = []
    with make_progress(title=f"sub-{subject}", fits=len(plans)) as progress:
        for plan in plans:
            outcomes.append(fit_connective(load_cf(plan, config, progress), config, progress))
        progress.finishing("writing the outputs")
        output_dir = config.outputs.output_dir
        stage = new_staging(output_dir, subject)
        try:
            for outcome in outcomes:
                write_cf_maps(outcome, config, stage)
            replaced = replaced_by([o.loaded.plan.key for o in outcomes])
            if config.outputs.report:
                _stage_report(config, subject, stage, command)
            published = publish_participant(
                stage,
                output_dir,
                subject,
                # without a new page, the earlier page and its figures stay
                replaced=replaced
                if config.outputs.report
                else lambda rel: "figures" not in rel.parts and replaced(rel),
                remove_page=False,
            )
        except BaseException:
            if not (stage / COMMIT).exists():
                shutil.rmtree(stage, ignore_errors=True)
            raise
    links = config.inputs.dataset_links
    write_dataset_files(
        output_dir, source_datasets(links), {n: relative_link(p, output_dir) for n, p in links.items()}
    )
    atlases = {
        o.loaded.areas.labels.atlas.name: o.loaded.areas.labels.atlas for o in outcomes if o.loaded.areas
    }
    for atlas in atlases.values():
        write_atlas_description(output_dir, atlas)
    logger.info(
        "sub-%s (participant %d of %d): published %d files under %s in %.0f s",
        subject,
        *of,
        len(published),
        output_dir,
        time.perf_counter() - start,
    )
    return published


def _stage_report(config: Config, subject: str, stage: Path, command: Sequence[str]) -> Path:
    """The participant's page in ``stage``: its pRF fits on disk, then every connective-field fit."""
    output_dir = config.outputs.output_dir
    contexts, comparisons = other_fits(config, subject, [], list(command))
    new = read_cf_fits(stage, subject)
    earlier = [fit for fit in read_cf_fits(output_dir, subject) if fit.key not in {f.key for f in new}]
    shown = (config.outputs.r2_threshold, config.inputs.fmriprep_dir)
    path = write_participant_report(stage, subject, contexts, comparisons, new + earlier, shown)
    logger.info("sub-%s: report %s", subject, output_dir / path.relative_to(stage))
    return path


def _unit_places(layout: SurfaceLayout) -> tuple[np.ndarray, np.ndarray]:
    """Each cortical unit's hemisphere and mesh vertex."""
    hemis, vertices = [], []
    for hemi, count in layout.hemis.items():
        hemis.append(np.full(count, hemi))
        vertices.append(layout.vertices[hemi] if layout.vertices is not None else np.arange(count))
    return np.concatenate(hemis), np.concatenate(vertices).astype(np.int64)


def load_cf(plan: FitPlan, config: Config, progress: ProgressFn) -> LoadedCF:
    """Load and preprocess a CF fit's runs, and find its source and targets.

    Parameters
    ----------
    plan : FitPlan
        The runs fitted together.
    config : Config
        The run's configuration.
    progress : callable
        ``progress(stage, done, total)``.

    Returns
    -------
    LoadedCF

    Raises
    ------
    UsageError
        A volume space, or no target areas (no atlas and no ``--roi``).
    MissingInputError
        No midthickness surface of the space on disk.
    BadDataError
        The runs differ in units or TR, or the source has no vertex with data in a hemisphere with targets.
    """
    start = time.perf_counter()
    key, first = plan.key, plan.runs[0]
    if first.kind == "volume":
        raise UsageError(
            f"--model cf: connective fields are measured along the cortical surface, and space {key.space} "
            "is a volume; fit a surface space (fsnative, fsaverage, fsLR)"
        )
    smoothing = smoothing_for(first, config.preprocessing.smooth_fwhm, config.inputs.fmriprep_dir)
    runs, geometry = [], None
    for i, run in enumerate(plan.runs):
        progress("load runs", i, len(plan.runs))
        data, this = load_bold(run, smoothing)
        if geometry is not None and (this.n_units != geometry.n_units or run.tr != first.tr):
            raise BadDataError(
                f"{run.name} differs from {first.name} in units ({this.n_units} vs "
                f"{geometry.n_units}) or TR; the runs of a CF fit must share both"
            )
        geometry = this
        prep = config.preprocessing
        dummy, confounds = run_confounds(
            run.confounds,
            data.shape[1],
            columns=prep.confounds,
            dummy_scans=prep.dummy_scans,
            run=run.name,
            bold=" and ".join(p.name for p in run.bold_files),
        )
        runs.append(
            preprocess_run(
                data,
                run.tr,
                dummy_scans=dummy,
                high_pass_hz=prep.high_pass_hz,
                confounds=confounds,
                source=run.bold_files[0].name,
                bold_scale=prep.bold_scale,
            )
        )
    progress("load runs", len(plan.runs), len(plan.runs))
    assert geometry is not None
    layout = geometry.surface()
    assert layout is not None
    areas, areas_note = fit_areas(
        config.outputs.atlas, key.space, key.den, geometry, key.subject, config.inputs.fmriprep_dir
    )
    source_name = " ".join(Path(a).name for a in config.fit.cf_source)
    source_roi = roi_units(config.fit.cf_source, areas, areas_note, geometry, key.space)
    assert source_roi is not None
    if config.inputs.roi:
        target_roi = roi_units(config.inputs.roi, areas, areas_note, geometry, key.space)
        targets = target_roi.units.copy() if target_roi is not None else np.zeros(geometry.n_units, bool)
    elif areas is not None:
        targets = areas.codes > 0
    else:
        raise UsageError(
            f"--model cf needs target areas: {areas_note} Name them with --roi (areas of --atlas, "
            "or label files)"
        )
    targets &= ~source_roi.units
    if not targets.any():
        raise BadDataError(
            f"--model cf: no target unit outside the source {source_name} in space {key.space}"
        )
    unit_hemi, unit_vertex = _unit_places(layout)
    meshes, meshes_note = find_midthickness(key.subject, key.space, key.den, config.inputs.fmriprep_dir)
    if not meshes:
        raise MissingInputError(
            f"--model cf needs the midthickness surfaces of space {key.space}: {meshes_note}"
        )
    n_cortex = len(unit_hemi)
    with_data = np.logical_and.reduce([np.isfinite(run.data).all(axis=1) for run in runs])
    source: dict[str, SourceHemisphere] = {}
    for hemi in layout.hemis:
        in_hemi = unit_hemi == hemi
        if not (targets[:n_cortex] & in_hemi).any():
            continue
        units = np.flatnonzero(source_roi.units[:n_cortex] & with_data[:n_cortex] & in_hemi)
        if units.size == 0:
            logger.warning(
                "%s: the source %s has no vertex in hemisphere %s: its targets there are not fitted",
                plan.name,
                source_name,
                hemi,
            )
            targets[:n_cortex] &= ~in_hemi
            continue
        source[hemi] = _source_hemisphere(units, unit_vertex[units], meshes[hemi], f"{source_name} {hemi}")
    targets[n_cortex:] = False
    logger.info(
        "%s: connective fields from %s (%s source vertices) to %d target units; distances along %s",
        plan.name,
        source_name,
        " + ".join(f"{len(s.units)} {h}" for h, s in source.items()),
        int(targets.sum()),
        meshes_note,
    )
    return LoadedCF(
        plan=plan,
        geometry=geometry,
        runs=tuple(runs),
        tr=first.tr,
        source=source,
        source_name=source_name,
        targets=targets,
        unit_hemi=np.concatenate([unit_hemi, np.full(geometry.n_units - n_cortex, "")]),
        areas_note=areas_note,
        meshes_note=meshes_note,
        seconds=time.perf_counter() - start,
        areas=areas,
    )


def _source_hemisphere(
    units: np.ndarray, vertices: np.ndarray, mesh: tuple[np.ndarray, np.ndarray], name: str
) -> SourceHemisphere:
    """A hemisphere's source: its units, their vertices and the distances between them.

    Raises
    ------
    BadDataError
        Fewer than three vertices: no area to take a CF from.
    """
    if units.size < 3:
        raise BadDataError(
            f"--cf-source {name}: {units.size} source vertices with data in every run; a connective "
            "field needs an area"
        )
    return SourceHemisphere(units, vertices, geodesic_distances(mesh[0], mesh[1], vertices))


def _concatenated(runs: Sequence[PreprocessedRun], units: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The runs' data of ``units`` side by side, and the nuisance basis of all of them (block diagonal)."""
    data = np.concatenate([r.data[units] for r in runs], axis=1)
    frames = [r.data.shape[1] for r in runs]
    columns = []
    offset = 0
    for run, n in zip(runs, frames, strict=True):
        block = np.zeros((sum(frames), run.nuisance.shape[1] + 1))
        block[offset : offset + n, 0] = 1.0
        block[offset : offset + n, 1:] = run.nuisance
        columns.append(block)
        offset += n
    return data, np.concatenate(columns, axis=1)


def fit_connective(loaded: LoadedCF, config: Config, progress: ProgressFn) -> CFOutcome:
    """Fit the connective fields of every target, cross-validate them and inherit their pRFs.

    Parameters
    ----------
    loaded : LoadedCF
        From :func:`load_cf`.
    config : Config
        The run's configuration.
    progress : callable
        ``progress(stage, done, total)``.

    Returns
    -------
    CFOutcome
    """
    # Imported here: the engine loads Keras and the backend, which the command line must not before
    # the backend is chosen.
    from prfmap.engine.connective import CFSource, fit_cf

    start = time.perf_counter()
    n = loaded.geometry.n_units
    maps = {
        label: np.full(n, np.nan)
        for label in ("cfcenter", "cfsize", "gain", "baseline", "r2", "cvr2", "status")
    }
    folds = len(loaded.runs) if config.outputs.cvr2 and len(loaded.runs) > 1 else 0
    mem_gb = config.execution.mem_gb
    size_range = [np.inf, 0.0]
    timings: dict[str, float] = {"grid": 0.0, "refine": 0.0, "crossval": 0.0}
    for hemi, part in loaded.source.items():
        units = np.flatnonzero(loaded.targets & (loaded.unit_hemi == hemi))
        data, nuisance = _concatenated(loaded.runs, units)
        series, _ = _concatenated(loaded.runs, part.units)
        progress(f"CF {hemi}", 0, 1 + folds)
        result = fit_cf(data, CFSource(series, part.distances), nuisance=nuisance, mem_gb=mem_gb)
        timings["grid"] += result.timings["grid"]
        timings["refine"] += result.timings["refine"]
        size_range = [min(size_range[0], result.size_range[0]), max(size_range[1], result.size_range[1])]
        fitted = result.fitted
        maps["cfcenter"][units[fitted]] = part.vertices[result.centre[fitted]]
        for label, values in (("cfsize", result.size), ("gain", result.gain), ("baseline", result.baseline)):
            maps[label][units] = values
        maps["r2"][units] = result.r2
        status = result.status.copy()
        t0 = time.perf_counter()
        if folds:
            maps["cvr2"][units] = _cross_validated(loaded, units, part, mem_gb, progress, hemi)
        else:
            status |= catalog.STATUS_BITS["not_cross_validated"]
        timings["crossval"] += time.perf_counter() - t0
        maps["status"][units] = status
        centre_of = np.where(fitted, result.centre, -1)
        maps.setdefault("_centre_" + hemi, centre_of)
    inherited, inherited_from = _inherit(loaded, maps, config)
    for hemi in loaded.source:
        maps.pop("_centre_" + hemi)
    maps |= inherited
    settings = {
        "Model": CF_MODEL,
        "SourceArea": loaded.source_name,
        "SourceVertices": {h: int(len(s.units)) for h, s in loaded.source.items()},
        "TargetUnits": int(loaded.targets.sum()),
        "Distances": (
            f"geodesic distance along {loaded.meshes_note}, within the source's own triangles "
            "(fast marching, potpourri3d)"
        ),
        "SizeRangeMm": [float(size_range[0]), float(size_range[1])] if np.isfinite(size_range[0]) else None,
        "Runs": len(loaded.runs),
        "CrossValidation": "leave one run out" if folds else "none",
        "Areas": loaded.areas_note,
        "InheritedFrom": inherited_from,
        "SoftwareVersion": __version__,
    }
    fitted_units = np.isfinite(maps["cfsize"])
    logger.info(
        "%s: %d of %d targets with a CF, median r2 %.3f%s, median size %.2f mm",
        loaded.plan.name,
        int(fitted_units.sum()),
        int(loaded.targets.sum()),
        float(np.nanmedian(maps["r2"])) if fitted_units.any() else float("nan"),
        f", median cvr2 {np.nanmedian(maps['cvr2']):.3f}" if folds and fitted_units.any() else "",
        float(np.nanmedian(maps["cfsize"])) if fitted_units.any() else float("nan"),
    )
    return CFOutcome(loaded, maps, settings, inherited_from, time.perf_counter() - start, timings)


def _cross_validated(
    loaded: LoadedCF,
    units: np.ndarray,
    part: SourceHemisphere,
    mem_gb: float | None,
    progress: ProgressFn,
    hemi: str,
) -> np.ndarray:
    """Leave-one-run-out cvr2 of ``units``: 1 - Σ residual² / Σ data² over the held-out runs."""
    # Imported here: the engine loads Keras and the backend (see fit_connective).
    from prfmap.engine.connective import CFSource, fit_cf, predict_cf

    residual = np.zeros(len(units))
    total = np.zeros(len(units))
    for held_out, run in enumerate(loaded.runs):
        training = [r for i, r in enumerate(loaded.runs) if i != held_out]
        data, nuisance = _concatenated(training, units)
        series, _ = _concatenated(training, part.units)
        fold = fit_cf(data, CFSource(series, part.distances), nuisance=nuisance, mem_gb=mem_gb)
        source = CFSource(run.data[part.units].astype(np.float64), part.distances)
        prediction = predict_cf(fold.centre, fold.size, fold.gain, source, mem_gb=mem_gb)
        y = run.data[units].astype(np.float64)
        prediction = np.where(np.isfinite(prediction), prediction, 0.0)
        residual += np.sum(np.square(y - prediction), axis=1)
        total += np.sum(np.square(y), axis=1)
        progress(f"CF {hemi}", held_out + 1, 1 + len(loaded.runs))
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(total > 0, 1.0 - residual / total, np.nan)


def prf_maps_on_disk(
    output_dir: Path, key: OutputKey, layout: SurfaceLayout
) -> tuple[dict[str, np.ndarray], str]:
    """A pRF fit of the participant on disk in the same space, as (units,) maps, and its name.

    The Gaussian fit first (then the catalogue's order), of the same task first.

    Parameters
    ----------
    output_dir : Path
        The derivatives folder.
    key : OutputKey
        The CF fit's entities (participant, session, space, density).
    layout : SurfaceLayout
        How the fit's units lie on the hemispheres.

    Returns
    -------
    tuple
        Parameter label to (units,) values (empty when there is no such fit), and the fit's file stem
        or why there is none.
    """
    fits: dict[tuple[str, str], list[tuple[Path, dict]]] = {}
    for path in sorted(key.func_dir(output_dir).glob(f"sub-{key.subject}_*_{MAP_SUFFIX}.*")):
        if path.name.endswith(".json"):
            continue
        entities = parse_file_entities(str(path), config=["bids", "derivatives", PYBIDS_CONFIG])
        same = (entities.get("session"), entities.get("space"), entities.get("density")) == (
            key.session,
            key.space,
            key.den,
        )
        if same and "stat" not in entities and entities.get("model") in catalog.MODELS:
            fits.setdefault((str(entities["model"]), str(entities.get("task"))), []).append((path, entities))
    order = {name: i for i, name in enumerate(catalog.MODELS)}
    for model, task in sorted(fits, key=lambda f: (order[f[0]], f[1] != key.task, f[1])):
        maps = read_unit_maps(fits[model, task], layout, None, lambda entities, label: label)
        if {"x", "y", "sigma"} <= set(maps):
            stem = fits[model, task][0][0].name.split("_desc-")[0].split("_hemi-")[0]
            return maps, f"the model-{model} fit of task {task} ({stem}_*)"
    return {}, f"none: no pRF fit of space {key.space} of this participant on disk"


def _inherit(
    loaded: LoadedCF, maps: dict[str, np.ndarray], config: Config
) -> tuple[dict[str, np.ndarray], str]:
    """The visual field position and size each CF inherits from its source's pRFs, and where from."""
    layout = loaded.geometry.surface()
    assert layout is not None
    prf, inherited_from = prf_maps_on_disk(config.outputs.output_dir, loaded.plan.key, layout)
    n = loaded.geometry.n_units
    if not prf or any(len(prf[p]) < n for p in ("x", "y", "sigma")):
        return {}, inherited_from if not prf else "none: the pRF maps on disk do not match the fit's units"
    out = {label: np.full(n, np.nan) for label in ("x", "y", "sigma")}
    for hemi, part in loaded.source.items():
        x, y, sigma = (np.asarray(prf[p], dtype=np.float64)[part.units] for p in ("x", "y", "sigma"))
        good = np.isfinite(x) & np.isfinite(y) & np.isfinite(sigma)
        if "status" in prf:
            good &= ~catalog.doubtful(np.asarray(prf["status"])[part.units])
        centre = maps["_centre_" + hemi]
        units = np.flatnonzero(loaded.targets & (loaded.unit_hemi == hemi))
        has = centre >= 0
        if not has.any() or not good.any():
            continue
        d = part.distances[centre[has]]
        size = maps["cfsize"][units[has]]
        weights = np.exp(-0.5 * np.square(d / size[:, None]))
        weights /= weights.sum(axis=1, keepdims=True)
        held = weights[:, good].sum(axis=1)
        w = weights[:, good] / np.maximum(held, 1e-12)[:, None]
        mx, my = w @ x[good], w @ y[good]
        spread = w @ (np.square(sigma[good]) + np.square(x[good]) + np.square(y[good])) - mx**2 - my**2
        keep = held >= INHERIT_MIN_WEIGHT
        target = units[has]
        out["x"][target] = np.where(keep, mx, np.nan)
        out["y"][target] = np.where(keep, my, np.nan)
        out["sigma"][target] = np.where(keep, np.sqrt(np.maximum(spread, 0.0)), np.nan)
    polar, eccentricity = catalog.visual_field_polar(out["x"], out["y"])
    return out | {"polarangle": polar, "eccentricity": eccentricity}, inherited_from


def write_cf_maps(outcome: CFOutcome, config: Config, folder: Path) -> list[Path]:
    """Write a CF fit's maps and their sidecars into the staging ``folder``.

    Parameters
    ----------
    outcome : CFOutcome
        The fit.
    config : Config
        The run's configuration.
    folder : Path
        The staging folder.

    Returns
    -------
    list of Path
        Data files and sidecars.
    """
    loaded = outcome.loaded
    key, geometry = loaded.plan.key, loaded.geometry
    func = key.func_dir(folder)
    func.mkdir(parents=True, exist_ok=True)
    maps = {label: np.asarray(v, dtype=np.float32) for label, v in outcome.maps.items()}
    common = {
        "Model": CF_MODEL,
        "ModelDescription": f"{CF_DESCRIPTION} ({CF_CITATION})",
        "CFSettings": outcome.settings,
        "Sources": [bids_uri(p, config.inputs.dataset_links) for r in loaded.plan.runs for p in r.bold_files],
        "RepetitionTime": loaded.tr,
    }
    written: list[Path] = []
    if loaded.areas is not None:
        anat = func.parent / "anat"
        written += write_area_files(anat, key, geometry, loaded.areas.labels, config.inputs.fmriprep_dir)
    if loaded.areas is not None:
        written += _write_summary(outcome, config, func)
    if geometry.kind == "cifti":
        path = func / f"{key.stem()}_{MAP_SUFFIX}.dscalar.nii"
        written += geometry.write_maps(maps, lambda hemi: path, {"Model": CF_MODEL})
        parameters = {label: {"Units": CF_MAPS[label][0], "Description": CF_MAPS[label][1]} for label in maps}
        sidecar = {**common, "MapNames": list(maps), "Parameters": parameters, "Levels": _levels()}
        return written + [write_json_atomic(sidecar_of(path), sidecar)]
    for label, values in maps.items():

        def path_for(hemi: str | None, label: str = label) -> Path:
            return func / f"{key.stem(hemi=hemi, param=label)}_{MAP_SUFFIX}.func.gii"

        files = geometry.write_maps({label: values}, path_for, {"Model": CF_MODEL, "Parameter": label})
        units, description = CF_MAPS[label]
        sidecar = {**common, "Parameter": label, "Units": units, "Description": description}
        if label == "status":
            sidecar["Levels"] = _levels()
        written += files + [write_json_atomic(sidecar_of(p), sidecar) for p in files]
    return written


def _write_summary(outcome: CFOutcome, config: Config, func: Path) -> list[Path]:
    """The fit's ``desc-areas_summary.tsv``: its targets per area."""
    loaded = outcome.loaded
    assert loaded.areas is not None
    atlas = loaded.areas.labels.atlas
    threshold = config.outputs.r2_threshold
    rows = cf_area_rows(outcome.maps, loaded.areas, threshold)
    described = {
        "Atlas": atlas.name,
        "AtlasDescription": atlas.title,
        "AtlasMethod": f"the atlas's labels {loaded.areas.labels.how}",
        "SourceArea": loaded.source_name,
        "Threshold": f"cvr2 (r2 without cross-validation) >= {threshold:g} (--r2-threshold)",
    }
    return write_area_summary(
        func, loaded.plan.key.stem(param=SUMMARY_DESC), rows, CF_SUMMARY_COLUMNS, described
    )


def _levels() -> dict[str, str]:
    return {str(bit): text for bit, text in CF_STATUS.items()}
