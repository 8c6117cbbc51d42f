"""Report contexts rebuilt from a participant's maps and sidecars on disk (``--reports-only``).

Everything the report shows is read back: the maps (GIFTI per hemisphere and parameter, one CIFTI
``dscalar`` per fit, or NIfTI volumes), the sidecars (runs, TR, stimulus, preprocessing, fit settings,
software, timings), the aperture, and the runs themselves (found again with the same query) for tSNR
and framewise displacement. Saved time series (``--save-predictions``) give the example time courses.
The uncertainty maps (``stat-se``, ``stat-ci95lower``, ``stat-ci95upper``) are read back into
``ReportContext.stat_maps`` where the fit wrote them, never taken for the estimates they describe.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from bids.layout import parse_file_entities

from prfmap.config import Config
from prfmap.derivatives import MAP_SUFFIX, PYBIDS_CONFIG, OutputKey
from prfmap.derivatives.areas import read_fit_areas
from prfmap.derivatives.comparison import COMPARISON_MODEL
from prfmap.derivatives.connective import CFFitOnDisk, read_cf_fits
from prfmap.engine import catalog
from prfmap.engine.catalog.connective import CF_MODEL
from prfmap.engine.catalog.settings import FitSettings
from prfmap.errors import BadDataError, MissingInputError, PrfmapError
from prfmap.io.aperture import load_aperture
from prfmap.io.bids import find_inputs
from prfmap.io.bold import read_dscalar, read_gifti, read_volume_map
from prfmap.io.geometry import SurfaceLayout
from prfmap.io.publish import COMMIT, new_staging, participant_lock, publish_participant, recover_staging
from prfmap.report.comparison import ComparisonContext, read_comparisons
from prfmap.report.context import ReportContext
from prfmap.report.participant import write_participant_report
from prfmap.report.readback import READ_REMEDY, read_unit_maps

log = logging.getLogger(__name__)
FIT_ENTITIES = ("session", "task", "space", "density", "resolution", "model")
CONFIG = ["bids", "derivatives", PYBIDS_CONFIG]
MAP_EXTENSIONS = (".func.gii", ".dscalar.nii", ".nii.gz", ".nii")
REMEDY = READ_REMEDY


def resolve_uri(uri: str, links: Mapping[str, Path], output_dir: Path) -> Path:
    """A file named by a BIDS URI (``bids:<dataset>:<path>``, ``bids::<path>``) or a plain path."""
    if uri.startswith("bids:"):
        name, _, rest = uri[len("bids:") :].partition(":")
        root = output_dir if not name else Path(links.get(name, output_dir))
        return root / rest
    return Path(uri)


def _fit_key(entities: Mapping[str, Any]) -> tuple[str | None, ...]:
    return tuple(entities.get(k) for k in FIT_ENTITIES)


def _maps_by_fit(output_dir: Path, subject: str) -> dict[tuple, list[tuple[Path, dict]]]:
    """The participant's map files by fit.

    Raises
    ------
    MissingInputError
        A map sidecar whose map is gone.
    """
    found: dict[tuple, list[tuple[Path, dict]]] = defaultdict(list)
    sidecars = []
    for path in sorted((output_dir / f"sub-{subject}").glob(f"**/func/sub-{subject}_*_{MAP_SUFFIX}.*")):
        if path.name.endswith(".json"):
            sidecars.append(path)
            continue
        entities = parse_file_entities(str(path), config=CONFIG)
        if entities.get("subject") == subject and "model" in entities:
            found[_fit_key(entities)].append((path, entities))
    for sidecar in sidecars:
        stem = sidecar.name.removesuffix(".json")
        if not any(sidecar.with_name(stem + ext).is_file() for ext in MAP_EXTENSIONS):
            fit = found.get(_fit_key(parse_file_entities(str(sidecar), config=CONFIG)), [])
            ext = next((e for e in MAP_EXTENSIONS if fit and fit[0][0].name.endswith(e)), ".*")
            raise MissingInputError(
                f"--reports-only: the map {sidecar.with_name(stem + ext)} is missing (its sidecar "
                f"{sidecar.name} is there); {REMEDY}"
            )
    return found


def _check_maps(maps: Mapping[str, np.ndarray], files: list[tuple[Path, dict]]) -> None:
    """Every map the fit's model reports must have been read back.

    Raises
    ------
    MissingInputError
        Naming the fit and the maps it lacks (a GIFTI map needs both hemispheres).
    """
    path, entities = files[0]
    spec = catalog.MODELS.get(str(entities.get("model")))
    if spec is None:  # a model registered at run time: nothing known to check against
        return
    keys = (*spec.parameters, *catalog.DERIVED)
    missing = [catalog.PARAMETERS[k].label for k in keys if catalog.PARAMETERS[k].label not in maps]
    if missing:
        raise MissingInputError(
            f"--reports-only: the fit of {path.name.split('_desc-')[0].split('_hemi-')[0]} lacks its "
            f"{', '.join(missing)} map(s) in {path.parent}; {REMEDY}"
        )


def _check_stat_maps(
    stat_maps: Mapping[tuple[str, str], np.ndarray],
    files: list[tuple[Path, dict]],
    n_units: int,
    path: Path,
    meta: Mapping[str, Any],
    surface: SurfaceLayout | None,
) -> None:
    """Uncertainty maps must have the fit's units; say so where the sidecar describes maps not on disk.

    Raises
    ------
    BadDataError
        A ``stat`` map (a hemisphere of it, for GIFTI) whose length is not the fit's: corrupt or
        truncated.
    """
    sizes = [
        (p.name, read_gifti(p, REMEDY).shape[0], surface.hemis[str(e["hemi"])])
        for p, e in files
        if surface is not None and p.name.endswith(".func.gii") and str(e.get("hemi")) in surface.hemis
    ]
    sizes += [(f"the stat-{s} map of {label}", v.shape[0], n_units) for (s, label), v in stat_maps.items()]
    for name, found, wanted in sizes:
        if found != wanted:
            raise BadDataError(
                f"--reports-only: {name} has {found} values but the fit has {wanted} units there: it is "
                f"corrupt or truncated; {REMEDY}"
            )
    described = "se" in (meta.get("Statistics") or {})
    if described and not any(stat == "se" for stat, _ in stat_maps):
        log.warning(
            "%s: its sidecar describes stat-se maps that are not in %s; the report leaves out the "
            "uncertainty section (%s)",
            path.name,
            path.parent,
            REMEDY,
        )


def _sidecar(path: Path) -> dict[str, Any]:
    sidecar = path.with_name(path.name.split(".")[0] + ".json")
    try:
        return json.loads(sidecar.read_text())
    except (OSError, ValueError):
        return {}


def _read_stat_maps(
    files: list[tuple[Path, dict]], surface: SurfaceLayout | None, grid: _Grid | None
) -> dict[tuple[str, str], np.ndarray]:
    """The uncertainty maps (``stat-se``, ``stat-ci95*``) by (stat, parameter): :func:`read_unit_maps`."""
    mask = grid.mask if grid is not None else None
    return read_unit_maps(files, surface, mask, lambda entities, label: (str(entities["stat"]), label))


def _read_surface(
    files: list[tuple[Path, dict]],
) -> tuple[dict[str, np.ndarray], SurfaceLayout | None, Any]:
    cifti = [p for p, _ in files if p.name.endswith(".dscalar.nii")]
    if cifti:
        maps, geometry = read_dscalar(cifti[0])
        return maps, geometry.surface(), None
    per: dict[str, dict[str, np.ndarray]] = defaultdict(dict)
    for path, entities in files:
        if path.name.endswith(".func.gii") and "param" in entities and "hemi" in entities:
            per[entities["param"]][entities["hemi"]] = read_gifti(path, REMEDY)[:, 0]
    hemis = {h: next(iter(per.values()))[h].size for h in ("L", "R") if per and h in next(iter(per.values()))}
    maps = {label: np.concatenate([v[h] for h in hemis]) for label, v in per.items() if set(v) == set(hemis)}
    return maps, SurfaceLayout(hemis=hemis), None


class _Grid:
    """The voxels of volume maps: those where the r² map is finite, in C order."""

    def __init__(self, mask: np.ndarray, affine: np.ndarray) -> None:
        self.mask, self.affine = mask, affine


def _read_volume(files: list[tuple[Path, dict]]) -> tuple[dict[str, np.ndarray], None, _Grid]:
    images = {
        e["param"]: read_volume_map(p)
        for p, e in files
        if p.name.endswith((".nii.gz", ".nii")) and "param" in e
    }
    reference, affine = images.get("r2") or next(iter(images.values()))
    mask = np.isfinite(reference)
    maps = {label: data[mask] for label, (data, _) in images.items() if data.shape == mask.shape}
    return maps, None, _Grid(mask, affine)


def _space_query(entities: Mapping[str, Any]) -> str:
    space = entities["space"]
    if entities.get("density") and not (space == "fsLR" and entities["density"] == "91k"):
        return f"{space}:den-{entities['density']}"
    if entities.get("resolution"):
        return f"{space}:res-{entities['resolution']}"
    return space


def _runs(
    bids_dir: Path, derivatives: Mapping[str, Path], subject: str, entities: Mapping, names: list
) -> list:
    try:
        runs = find_inputs(
            bids_dir,
            derivatives=dict(derivatives),
            participant_labels=[subject],
            session_labels=[entities["session"]] if entities.get("session") else None,
            tasks=[entities["task"]],
            space=_space_query(entities),
        )
    except PrfmapError as err:
        log.warning(
            "sub-%s: the runs were not found again (%s); no tSNR or motion in the report", subject, err
        )
        return []
    return [r for r in runs if not names or r.name in names]


def _design(meta: Mapping[str, Any], tr: float | None, links: Mapping[str, Path], output_dir: Path) -> Any:
    files = (meta.get("Stimulus") or {}).get("Files") or []
    if not files or tr is None:
        return None
    path = resolve_uri(str(files[0]), links, output_dir)
    try:
        return load_aperture(path, tr=tr, fov_deg=(meta.get("Stimulus") or {}).get("FieldOfViewDeg")).design
    except PrfmapError:
        return None


def _settings(meta: Mapping[str, Any], path: Path) -> FitSettings | None:
    """The fit settings a map's sidecar records; None (with a warning) when it holds none or others."""
    try:
        return FitSettings.from_dict(meta["FitSettings"])
    except (KeyError, TypeError, ValueError) as err:
        log.warning("%s: no fit settings in its sidecar (%s); the report leaves them out", path.name, err)
        return None


def _context(
    files: list[tuple[Path, dict]],
    subject: str,
    links: Mapping[str, Path],
    output_dir: Path,
    r2_threshold: float,
    command: list[str] | None,
) -> ReportContext:
    """The report context of one fit's files."""
    stat_files = [(p, e) for p, e in files if e.get("stat")]
    map_files = [(p, e) for p, e in files if not e.get("stat")]
    if not map_files:
        raise MissingInputError(
            f"--reports-only: {files[0][0].parent} holds the uncertainty maps of a fit "
            f"({files[0][0].name}) but not its parameter maps; {REMEDY}"
        )
    path, entities = map_files[0]
    volume = path.name.endswith((".nii.gz", ".nii")) and not path.name.endswith(".dscalar.nii")
    maps, surface, grid = _read_volume(map_files) if volume else _read_surface(map_files)
    _check_maps(maps, map_files)
    stat_maps = _read_stat_maps(stat_files, surface, grid)
    meta = _sidecar(path)
    _check_stat_maps(stat_maps, stat_files, len(next(iter(maps.values()))), path, meta, surface)
    tr = meta.get("RepetitionTime")
    names = list(meta.get("Runs") or [])
    pre = dict(meta.get("Preprocessing") or {})
    dummy = pre.get("DummyScans") or 0
    bids_dir = Path(links["raw"])
    key = OutputKey(
        subject,
        entities.get("session"),
        entities.get("task"),
        entities["space"],
        entities.get("density"),
        entities.get("resolution"),
        entities["model"],
    )
    areas = read_fit_areas(path.parent, key, surface)
    return ReportContext(
        subject=subject,
        space=entities["space"],
        maps=maps,
        model=entities["model"],
        session=entities.get("session"),
        task=entities.get("task"),
        den=entities.get("density"),
        inputs=[str(resolve_uri(s, links, output_dir)) for s in meta.get("Sources") or []],
        runs=[n.removeprefix(f"sub-{subject}_") for n in names],
        tr=tr,
        dummy_scans=max(dummy) if isinstance(dummy, list) and dummy else int(dummy or 0),
        design=_design(meta, tr, links, output_dir),
        fov_deg=(meta.get("Stimulus") or {}).get("FieldOfViewDeg"),
        settings=_settings(meta, path),
        extra_settings={
            key: meta[name]
            for key, name in (
                ("slice_time_reference", "SliceTimeReference"),
                ("variance_explained", "VarianceExplained"),
            )
            if name in meta
        },
        backend=dict(meta.get("Software") or {}),
        timings=dict(meta.get("Timings") or {}),
        surface=surface,
        fmriprep_dir=links.get("fmriprep", bids_dir / "derivatives" / "fmriprep"),
        r2_threshold=r2_threshold,
        outputs=[p.relative_to(output_dir).as_posix() for p, _ in files],
        dataset_dir=bids_dir,
        command=command,
        preprocessing=pre,
        run_inputs=_runs(bids_dir, links, subject, entities, names),
        volume=grid,
        stat_maps=stat_maps,
        areas=areas,
        areas_note=areas.describe() if areas is not None else "",
    )


def participant_contexts(
    output_dir: Path,
    subject: str,
    *,
    bids_dir: Path,
    derivatives: Mapping[str, Path],
    r2_threshold: float,
    command: list[str] | None = None,
) -> list[ReportContext]:
    """One :class:`ReportContext` per fit of ``subject`` found under ``output_dir``.

    Parameters
    ----------
    output_dir : Path
        prfmap's output folder.
    subject : str
        Label without ``sub-``.
    bids_dir : Path
        The raw dataset (``bids:raw:`` URIs, the runs' query).
    derivatives : mapping
        Dataset name → folder (``fmriprep``).
    r2_threshold : float
        Threshold of the maps shown.
    command : list of str, optional
        The command line that rebuilds the report.

    Returns
    -------
    list of ReportContext

    Raises
    ------
    MissingInputError
        No maps of ``subject`` under ``output_dir``.
    """
    links = {"raw": Path(bids_dir), **{k: Path(v) for k, v in derivatives.items()}}
    fits = _maps_by_fit(output_dir, subject)
    if not fits:
        raise MissingInputError(
            f"no maps of sub-{subject} under {output_dir}; "
            "run the participant level without --reports-only first"
        )
    return [
        _context(files, subject, links, output_dir, r2_threshold, command)
        for key, files in fits.items()
        # a comparison is shown with its models (read_comparisons); connective fields have no report yet
        if key[-1] not in (COMPARISON_MODEL, CF_MODEL)
    ]


def fit_key_of(key: Any) -> tuple[str | None, ...]:
    """An output key's fit, as :data:`FIT_ENTITIES` name it in the file names read back.

    Parameters
    ----------
    key : prfmap.derivatives.naming.OutputKey
        One fit's entities.

    Returns
    -------
    tuple
    """
    return (key.session, key.task, key.space, key.den, key.res, key.model)


def other_fits(
    config: Config, subject: str, fitted: Sequence[tuple[str | None, ...]], command: list[str] | None = None
) -> tuple[list[ReportContext], list[ComparisonContext]]:
    """The participant's fits already on disk that this run does not replace, read back for its report.

    A participant fitted with one model and then another keeps both sets of maps; its report shows
    both. A fit on disk that cannot be read back is left out of the report with a warning.

    Parameters
    ----------
    config : Config
        The run's configuration (the datasets and the r² threshold).
    subject : str
        Label without ``sub-``.
    fitted : sequence of tuple
        :func:`fit_key_of` of each fit of this run.
    command : list of str, optional
        The command line, shown in the reports.

    Returns
    -------
    tuple
        The fits' report contexts, and the comparisons on disk whose Gaussian fit is among them.
    """
    output_dir = config.outputs.output_dir
    links = {"raw": Path(config.inputs.bids_dir), **dict(config.inputs.dataset_links)}
    contexts = []
    for key, files in _maps_by_fit(output_dir, subject).items():
        if key in fitted or key[-1] in (COMPARISON_MODEL, CF_MODEL):
            continue
        try:
            contexts.append(_context(files, subject, links, output_dir, config.outputs.r2_threshold, command))
        except PrfmapError as err:
            log.warning(
                "sub-%s: the report leaves out the earlier fit %s: %s", subject, files[0][0].name, err
            )
    # a comparison is read with its Gaussian fit: one this run fitted again is not among ``contexts``
    return contexts, read_comparisons(output_dir, subject, contexts) if contexts else []


def rebuild_reports(config: Config, command: list[str] | None = None) -> list[Path]:
    """Rebuild every selected participant's ``sub-<label>.html`` from the outputs on disk.

    Parameters
    ----------
    config : Config
        The run's configuration (``--reports-only``): the datasets, the participants
        (default: every ``sub-*`` folder of ``output_dir`` holding maps) and the r² threshold.
    command : list of str, optional
        The command line, shown in the reports.

    Returns
    -------
    list of Path
        The reports written.

    Raises
    ------
    MissingInputError
        A selected participant (or, without a selection, every participant) has no maps.
    """
    output_dir = config.outputs.output_dir
    subjects = list(config.inputs.participant_labels) or sorted(
        p.name.removeprefix("sub-") for p in output_dir.glob("sub-*") if p.is_dir()
    )
    if not subjects:
        raise MissingInputError(f"no participant outputs under {output_dir}; run the participant level first")
    written = []
    for subject in subjects:
        with participant_lock(output_dir, subject):
            recover_staging(output_dir, subject)
            contexts = participant_contexts(
                output_dir,
                subject,
                bids_dir=config.inputs.bids_dir,
                derivatives=config.inputs.dataset_links,
                r2_threshold=config.outputs.r2_threshold,
                command=command,
            )
            comparisons = read_comparisons(output_dir, subject, contexts)
            connective = read_cf_fits(output_dir, subject)
            cf_shown = (config.outputs.r2_threshold, config.inputs.fmriprep_dir)
            written.append(
                _publish_report(output_dir, subject, contexts, comparisons, (connective, cf_shown))
            )
        log.info("sub-%s: report rebuilt from the maps on disk: %s", subject, written[-1])
    return written


def _publish_report(
    output_dir: Path,
    subject: str,
    contexts: list[ReportContext],
    comparisons: list[ComparisonContext],
    connective: tuple[list[CFFitOnDisk], tuple[float, Path | None]] = ([], (0.1, None)),
) -> Path:
    """Write the page and figures into a staging folder and publish them with the participant's files.

    Figures the new page does not draw go with the earlier set (``io.publish``).
    """
    stage = new_staging(output_dir, subject)
    try:
        write_participant_report(stage, subject, contexts, comparisons, *connective)
        publish_participant(stage, output_dir, subject, replaced=lambda rel: rel.parts[1:2] == ("figures",))
    except BaseException:
        if not (stage / COMMIT).exists():  # nothing was published: the earlier report stands
            shutil.rmtree(stage, ignore_errors=True)
        raise
    return output_dir / f"sub-{subject}.html"
