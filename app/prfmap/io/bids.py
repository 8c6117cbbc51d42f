"""Find the runs to fit: pybids queries over a raw BIDS dataset and its fMRIPrep derivatives."""

from __future__ import annotations

import errno
import json
import logging
import math
import os
import socket
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from bids import BIDSLayout
from bids.layout import BIDSFile, Query

from prfmap.config import InputsConfig
from prfmap.errors import (
    BadDataError,
    MissingInputError,
    NoFilesSelectedError,
    UsageError,
    one_line,
)
from prfmap.io import bids_index
from prfmap.io.bold import header_tr
from prfmap.io.datasets import Derivatives, check_derivatives, inputs_config
from prfmap.io.events import has_stim_file, stimulus_of
from prfmap.io.runs import Kind, RunInput
from prfmap.io.spaces import kind_of, select_space
from prfmap.io.timing import SliceTimeReference, slice_time_reference

logger = logging.getLogger(__name__)

_RUN_ENTITIES = (
    "subject",
    "session",
    "task",
    "acquisition",
    "ceagent",
    "reconstruction",
    "direction",
    "run",
    "echo",
)
_KEPT_ENTITIES = (*_RUN_ENTITIES, "space", "res", "den")
_BOLD_EXTENSIONS = (".func.gii", ".dtseries.nii", ".nii.gz", ".nii")
_QUERY_ARGUMENTS = ("scope", "return_type", "target", "regex_search", "absolute_paths", "invalid_filters")
"""Keywords of ``BIDSLayout.get`` that are not entities: a filter file may not set them."""


def _pybids_filters(inputs: InputsConfig) -> dict[str, Any]:
    """The query's entities as pybids takes them (None → absent, ``"*"`` → any value)."""
    special = {None: Query.NONE, "*": Query.ANY}
    filters = {
        key: special[value] if value is None or value == "*" else value
        for key, value in inputs.bids_filter.items()
    }
    selected = {
        "subject": inputs.participant_labels,
        "session": inputs.session_labels,
        "task": inputs.tasks,
        "run": inputs.runs,
    }
    filters.update({key: list(values) for key, values in selected.items() if values})
    return filters


def _query_values(filters: dict[str, Any], key: str, allowed: Sequence[str]) -> list[str]:
    """The values of ``key`` (``suffix``, ``extension``) prfmap queries, narrowed by a filter's.

    fMRIPrep's filter files often say ``"suffix": "bold"``; a filter's value among ``allowed``
    narrows the query, anything else selects nothing prfmap could read.

    Raises
    ------
    UsageError
        The filter's values share nothing with ``allowed``.
    """
    if key not in filters:
        return list(allowed)
    given = filters.pop(key)
    if given is Query.ANY:
        return list(allowed)
    values = [given] if isinstance(given, str) else list(given) if isinstance(given, list) else [given]
    normal = [f".{v.lstrip('.')}" if key == "extension" and isinstance(v, str) else v for v in values]
    kept = [v for v in allowed if v in normal]
    if not kept:
        raise UsageError(
            f"--bids-filter-file: {key!r} {normal} selects none of the BOLD formats prfmap reads "
            f"({key} {', '.join(allowed)}); remove it, or choose among those"
        )
    return kept


def _check_filter_keys(filters: Mapping[str, Any]) -> None:
    wrong = [k for k in filters if k in _QUERY_ARGUMENTS]
    if wrong:
        raise UsageError(
            f"--bids-filter-file: {wrong[0]!r} is not a BIDS entity but an argument of prfmap's own "
            "query; remove it (filter files hold entities: session, acquisition, run, ...)"
        )


def _layout(bids_dir: Path, derivative_paths: list[Path], databases: Path | None) -> BIDSLayout:
    """The pybids layout of the datasets; its database in ``databases`` (kept there for the next call)."""
    kwargs: dict[str, Any] = {}
    key = ""
    if databases is not None:
        db = Path(databases) / f"{socket.gethostname()}-{os.getpid()}"
        db.mkdir(parents=True, exist_ok=True)
        key = bids_index.dataset_key([bids_dir, *derivative_paths], "validate=False")
        kwargs.update(database_path=db, reset_database=not bids_index.restore(databases, key, db))
    try:
        layout = BIDSLayout(
            bids_dir, validate=False, derivatives=[str(p) for p in derivative_paths], **kwargs
        )
        if kwargs.get("reset_database"):
            bids_index.keep(databases, key, kwargs["database_path"])
        return layout
    except Exception as err:  # noqa: BLE001 - sorted below: a full work disk, or an index failure
        msg = one_line(err)
        full = getattr(err, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or "disk is full" in msg
        if databases is not None and full:
            raise OSError(errno.ENOSPC, "No space left on device", str(kwargs["database_path"])) from None
        bad = _invalid_json(bids_dir, derivative_paths)
        if bad is not None:  # pybids' own message names no file (a TypeError) or wraps the decoder's
            raise BadDataError(
                f"sidecar {bad[0]} is {bad[1]}; every .json file of a BIDS dataset holds one JSON "
                "object {...}: fix or remove it"
            ) from None
        if isinstance(err, TypeError):  # pybids meets a JSON sidecar that is not an object
            raise BadDataError(
                f"pybids cannot index {bids_dir} or its derivatives: a JSON sidecar is not a JSON "
                f"object ({one_line(err)}); every .json sidecar must hold {{...}}"
            ) from None
        if not isinstance(err, (ValueError, OSError)):
            raise
        raise MissingInputError(
            f"pybids cannot index {bids_dir} or its derivatives: {one_line(err)}"
        ) from None


_JSON_TYPES = {
    list: "array",
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    type(None): "null",
}
_NOT_INDEXED = ("derivatives", "code", "sourcedata", "stimuli", "models")
"""Top-level folders of a raw dataset that pybids does not index (nor does it index dot-folders)."""


def _invalid_json(bids_dir: Path, derivative_paths: Sequence[Path]) -> tuple[Path, str] | None:
    """The first ``.json`` file pybids indexes that is not one JSON object, and what is wrong with it.

    Only looked for after pybids failed: it names no file when a sidecar holds a list or a number.
    """
    roots = [(Path(bids_dir), _NOT_INDEXED), *((Path(p), ()) for p in derivative_paths)]
    for root, skipped in roots:
        for path in sorted(root.rglob("*.json")):
            parts = path.relative_to(root).parts
            if parts[0] in skipped or any(part.startswith(".") for part in parts):
                continue
            try:
                content = json.loads(path.read_bytes())
            except json.JSONDecodeError as err:
                return path, f"not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
            except (OSError, UnicodeDecodeError) as err:
                return path, f"unreadable ({one_line(err)})"
            if not isinstance(content, dict):
                kind = _JSON_TYPES.get(type(content), type(content).__name__)
                return path, f"not a JSON object but a JSON {kind} ({one_line(json.dumps(content))[:40]})"
    return None


def _sidecar_chain(layout: BIDSLayout, entities: Mapping[str, Any]) -> dict[str, Any]:
    """Merge the raw dataset's ``*_bold.json`` sidecars that apply to a run (inheritance)."""
    candidates = []
    for f in layout.get(scope="raw", suffix="bold", extension=".json", task=entities["task"]):
        ents = f.get_entities()
        if all(k not in ents or str(ents[k]) == str(entities.get(k)) for k in _RUN_ENTITIES):
            depth = len(Path(f.path).relative_to(layout.root).parts)
            candidates.append((depth, len(ents), f.path))
    meta: dict[str, Any] = {}
    for _, _, path in sorted(candidates):
        try:
            meta.update(json.loads(Path(path).read_text()))
        except (OSError, ValueError) as err:
            raise BadDataError(
                f"sidecar {path} is not valid JSON ({one_line(err)}); fix or remove it"
            ) from None
    return meta


def _bold_metadata(layout: BIDSLayout, bold_path: Path) -> dict[str, Any]:
    """The preprocessed BOLD's own sidecar keys (pybids' inheritance in the derivatives)."""
    try:
        return dict(layout.get_metadata(str(bold_path)))
    except (ValueError, KeyError):
        return {}


def _slice_time(
    layout: BIDSLayout, bold_path: Path, entities: Mapping[str, Any], tr: float, name: str
) -> SliceTimeReference:
    """The run's slice-time reference: fMRIPrep's sidecar keys over the raw sidecars'."""
    meta = {**_sidecar_chain(layout, entities), **_bold_metadata(layout, bold_path)}
    return slice_time_reference(meta, tr, name)


def _repetition_time(layout: BIDSLayout, bold_path: Path, entities: Mapping[str, Any], kind: Kind) -> float:
    """The run's TR: the sidecars' ``RepetitionTime`` (fMRIPrep's over the raw), else the header's.

    The sidecar is BIDS' record of the acquisition and wins over the header, whose time step tools
    often leave at 0 or 1; a header that says otherwise is logged as a warning naming both values.
    """
    meta = _bold_metadata(layout, bold_path)
    tr = meta.get("RepetitionTime")
    if tr is None:
        tr = _sidecar_chain(layout, entities).get("RepetitionTime")
    header = header_tr(bold_path, kind)
    if tr is None:
        tr = header
    elif header is not None and isinstance(tr, int | float) and not math.isclose(header, tr, rel_tol=1e-3):
        logger.warning(
            "%s: its header gives a TR of %g s but its sidecar's RepetitionTime is %g s; prfmap uses "
            "the sidecar's %g s (BIDS metadata) — fix whichever is wrong",
            bold_path.name,
            header,
            tr,
            tr,
        )
    if tr is None:
        raise MissingInputError(
            f"no RepetitionTime for {bold_path.name}; add it to the run's *_bold.json sidecar"
        )
    try:
        tr = float(tr)
    except (TypeError, ValueError):
        raise BadDataError(f"RepetitionTime of {bold_path.name} is not a number: {tr!r}") from None
    if not tr > 0:
        raise BadDataError(f"RepetitionTime of {bold_path.name} must be positive, got {tr}")
    return tr


def _match_raw(layout: BIDSLayout, suffix: str, extension: str, entities: Mapping[str, Any]) -> list[Path]:
    """Files of the raw dataset that apply to a run, most specific first."""
    found = []
    for f in layout.get(scope="raw", suffix=suffix, extension=extension, task=entities["task"]):
        ents = f.get_entities()
        if all(k not in ents or str(ents[k]) == str(entities.get(k)) for k in _RUN_ENTITIES):
            found.append((-len(ents), f.path))
    return [Path(p) for _, p in sorted(found)]


def _match_derivative(layout: BIDSLayout, entities: Mapping[str, Any], **query) -> Path | None:
    exact = {k: entities[k] for k in _RUN_ENTITIES if k in entities}
    for k in _RUN_ENTITIES:
        exact.setdefault(k, Query.NONE)
    files = layout.get(scope="derivatives", return_type="filename", **exact, **query)
    return Path(files[0]) if files else None


def _group_bold(files: list[BIDSFile]) -> dict[tuple, list[BIDSFile]]:
    groups: dict[tuple, list] = {}
    for f in files:
        ents = f.get_entities()
        key = tuple((k, str(ents[k])) for k in sorted(ents) if k not in ("hemi", "extension", "suffix")) + (
            ("extension", ents["extension"]),
        )
        groups.setdefault(key, []).append(f)
    return groups


def find_inputs(  # noqa: PLR0913 - its keyword-only options are the command line's
    bids_dir: str | os.PathLike,
    output_dir: str | os.PathLike | None = None,
    *,
    derivatives: Derivatives = None,
    participant_labels: Sequence[str] | None = None,
    session_labels: Sequence[str] | None = None,
    tasks: Sequence[str] | None = None,
    runs: Sequence[int | str] | None = None,
    space: str | None = None,
    bids_filter: Mapping[str, Any] | str | os.PathLike | None = None,
    work_dir: str | os.PathLike | None = None,
    stimulus: str | os.PathLike | None = None,
) -> list[RunInput]:
    """Find the preprocessed BOLD runs to fit, with their TR, events, confounds and aperture.

    Parameters
    ----------
    bids_dir : path-like
        Root of the raw BIDS dataset (holds ``dataset_description.json``, ``stimuli/``).
    output_dir : path-like, optional
        prfmap's output folder (unused by the query; kept for the BIDS-Apps call signature).
    derivatives : mapping, sequence or path, optional
        fMRIPrep derivatives: ``{"fmriprep": path}``, ``[("fmriprep", path)]``, paths, or one
        path. Default ``bids_dir/derivatives/fmriprep``.
    participant_labels, session_labels : sequence of str, optional
        Labels with or without ``sub-`` / ``ses-``.
    tasks : sequence of str, optional
        Task labels. Default: every task whose events name a ``stim_file`` (all tasks when
        ``stimulus`` is given).
    runs : sequence of int, optional
        Run indices.
    space : str, optional
        fMRIPrep space string (``fsaverage5``, ``fsLR`` = CIFTI 91k, ``fsLR:den-32k`` = GIFTI,
        ``T1w``, ``MNI152NLin2009cAsym:res-2``). Default: the first space present among fsnative,
        fsaverage, fsaverage6, fsaverage5, fsLR 91k, fsLR 32k, then T1w and the templates.
    bids_filter : mapping or path, optional
        Extra pybids filters on the BOLD query, fMRIPrep-style (``{"bold": {...}}``) or flat;
        ``null`` means "entity absent", ``"*"`` "any value".
    work_dir : path-like, optional
        The pybids database goes to ``work_dir/bids_db/<host>-<pid>`` (one per process, so
        participants run at once can share a work dir); a copy is kept and reused while no file
        under the roots changes (:mod:`prfmap.io.bids_index`).
    stimulus : path-like, optional
        An aperture file used for every run instead of the events' ``stim_file``.

    Returns
    -------
    list of RunInput
        Sorted by subject, session, task, run.

    Raises
    ------
    NotBIDSError
        ``bids_dir`` is missing or has no ``dataset_description.json``.
    MissingInputError
        No derivatives folder; a run lacks events, a stim_file, a mask, a TR or a hemisphere.
    NoFilesSelectedError
        The filters select no preprocessed BOLD.
    UsageError
        Unknown space or malformed filter file.
    """
    inputs = inputs_config(
        bids_dir,
        derivatives=derivatives,
        participant_labels=participant_labels,
        session_labels=session_labels,
        tasks=tasks,
        runs=runs,
        space=space,
        bids_filter=bids_filter,
        stimulus=stimulus,
    )
    return find_runs(inputs, work_dir=work_dir)


def find_runs(
    inputs: InputsConfig,
    *,
    work_dir: str | os.PathLike | None = None,
    database_dir: str | os.PathLike | None = None,
) -> list[RunInput]:
    """Find the runs an already checked inputs section selects (see :func:`find_inputs`).

    Parameters
    ----------
    inputs : InputsConfig
        Built by :func:`prfmap.io.datasets.inputs_config` or the command line.
    work_dir : path-like, optional
        The pybids database goes to ``work_dir/bids_db`` (as in :func:`find_inputs`).
    database_dir : path-like, optional
        Where the pybids database goes instead (``--bids-database-dir``).

    Returns
    -------
    list of RunInput
        Sorted by subject, session, task, run.

    Raises
    ------
    MissingInputError, NoFilesSelectedError, UsageError
        As :func:`find_inputs`, for what the query finds (or does not).
    """
    check_derivatives(inputs)
    filters = _pybids_filters(inputs)
    _check_filter_keys(filters)
    narrowed = {key: filters[key] for key in ("extension", "suffix") if key in filters}
    extensions = _query_values(filters, "extension", _BOLD_EXTENSIONS)
    suffixes = _query_values(filters, "suffix", ("bold",))
    roots = [path for _, path in inputs.derivatives]
    databases = Path(database_dir) if database_dir else Path(work_dir) / "bids_db" if work_dir else None
    layout = _layout(inputs.bids_dir, roots, databases)
    try:
        bold = layout.get(scope="derivatives", suffix=suffixes, extension=extensions, **filters)
    except (ValueError, TypeError) as err:
        raise UsageError(f"--bids-filter-file: invalid filter ({one_line(err)})") from None
    bold = [
        f
        for f in bold
        if kind_of(f.get_entities()["extension"]) != "volume" or f.get_entities().get("desc") == "preproc"
    ]
    where = ", ".join(str(p) for p in roots)
    if not bold:
        raise NoFilesSelectedError(_nothing_selected(layout, {**filters, **narrowed}, where))
    selected = select_space(bold, inputs.space, where)
    found: list[RunInput] = []
    skipped_tasks: set[str] = set()
    for files in _group_bold(selected).values():
        run = _make_run(layout, inputs, files)
        if run is None:
            skipped_tasks.add(files[0].get_entities()["task"])
            continue
        found.append(run)
    if not found:
        raise MissingInputError(
            f"no events.tsv with a stim_file column for task(s) {', '.join(sorted(skipped_tasks))}"
            f" in {inputs.bids_dir}: pRF models need the stimulus apertures (name them in the events' "
            "stim_file column or pass --stimulus); --model cf fits runs without them"
        )
    if skipped_tasks:
        logger.info("skipping task(s) without stim_file in their events: %s", sorted(skipped_tasks))
    found.sort(key=lambda r: (r.subject, r.session or "", r.task, r.run or 0, r.name))
    return found


def _nothing_selected(layout: BIDSLayout, filters: Mapping[str, Any], where: str) -> str:
    subjects = layout.get_subjects(scope="derivatives")
    if "subject" in filters and not set(filters["subject"]) & set(subjects):
        return (
            f"participant(s) {', '.join(filters['subject'])} have no preprocessed BOLD under "
            f"{where}; participants present: {', '.join(subjects) or 'none'}"
        )
    shown = {k: v for k, v in filters.items() if isinstance(v, (str, int, list))}
    desc = ", ".join(f"{k}={v}" for k, v in shown.items()) or "no filters"
    return (
        f"no preprocessed BOLD (*_bold.func.gii, *_bold.dtseries.nii, *_desc-preproc_bold.nii.gz) "
        f"under {where} matches {desc}; check the participant, session, task and run options"
    )


def _make_run(layout: BIDSLayout, inputs: InputsConfig, files: list[BIDSFile]) -> RunInput | None:
    """The run of one BOLD file (both hemisphere files for GIFTI).

    None when its task names no aperture and no task was asked for explicitly.
    """
    ents = files[0].get_entities()
    kind = kind_of(ents["extension"])
    path0 = Path(files[0].path)
    bold = _bold_paths(files, kind)
    mask = _brain_mask(layout, ents, path0) if kind == "volume" else None
    events_list = _match_raw(layout, "events", ".tsv", ents)
    events = events_list[0] if events_list else None
    stim_index = None
    if inputs.stimulus is not None:
        stim_file = inputs.stimulus
    elif events is None or not has_stim_file(events):
        if not inputs.apertures:
            stim_file = None
        elif not inputs.tasks:
            return None
        else:
            what = "no events.tsv" if events is None else f"no stim_file column in {Path(events).name}"
            raise MissingInputError(
                f"{what} for {path0.name} in {inputs.bids_dir}: pRF models need the stimulus "
                "apertures (name them in the events' stim_file column or pass --stimulus); "
                "--model cf fits runs without them"
            )
    else:
        stim_file, stim_index = stimulus_of(inputs.bids_dir, events)
    confounds = _match_derivative(layout, ents, suffix="timeseries", desc="confounds", extension=".tsv")
    tr = _repetition_time(layout, path0, ents, kind)
    run = ents.get("run")
    slice_time = _slice_time(layout, path0, ents, tr, path0.name)
    return RunInput(
        subject=str(ents["subject"]),
        session=str(ents["session"]) if "session" in ents else None,
        task=str(ents["task"]),
        run=int(run) if run is not None else None,
        space=str(ents["space"]),
        den=str(ents["den"]) if "den" in ents else None,
        kind=kind,
        bold=bold,
        mask=mask,
        tr=tr,
        events=events,
        confounds=confounds,
        stim_file=stim_file,
        entities={k: str(ents[k]) for k in _KEPT_ENTITIES if k in ents},
        stim_file_index=stim_index,
        slice_time=slice_time,
    )


def _bold_paths(files: list[BIDSFile], kind: Kind) -> dict[str, Path] | Path:
    """One path, or ``{"L": path, "R": path}`` for GIFTI."""
    path0 = Path(files[0].path)
    if kind != "gifti":
        return path0
    hemis = {str(f.get_entities().get("hemi")): Path(f.path) for f in files}
    missing = [h for h in ("L", "R") if h not in hemis]
    if missing:
        raise MissingInputError(
            f"{path0.name}: no hemi-{missing[0]} file next to it; prfmap needs both "
            "hemispheres (re-run fMRIPrep's surface outputs)"
        )
    return {"L": hemis["L"], "R": hemis["R"]}


def _brain_mask(layout: BIDSLayout, ents: Mapping[str, Any], bold: Path) -> Path:
    mask = _match_derivative(
        layout,
        ents,
        suffix="mask",
        desc="brain",
        space=ents["space"],
        extension=[".nii.gz", ".nii"],
        res=ents.get("res", Query.NONE),
        den=ents.get("den", Query.NONE),
    )
    if mask is None:
        raise MissingInputError(
            f"no brain mask (*_desc-brain_mask.nii.gz) next to {bold.name}; fMRIPrep writes "
            "one per run and space"
        )
    return mask
