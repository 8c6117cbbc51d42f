"""Writing what ``prfmap-stimulus`` made: the aperture, its sidecar, the QC sheet and the events.

Every file is written to a temporary name in its folder first and all are renamed only once every
one is complete (:func:`prfmap.io.atomic.atomic_path` inside one :class:`contextlib.ExitStack`), so a
failure leaves none of them. The aperture follows prfmap's convention (NIfTI rows × columns × 1 ×
volumes, row 0 = top, values in [0, 1]) and reads back with :func:`prfmap.io.aperture.load_aperture`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import nibabel as nib
import numpy as np
import pandas as pd

from prfmap import __version__
from prfmap.errors import BadDataError, UsageError, one_line
from prfmap.io.aperture import sidecar_path
from prfmap.io.atomic import atomic_path, jsonable
from prfmap.stimulus.pipeline import StimulusResult
from prfmap.stimulus.qc import render_page, write_sheet

APERTURE_SUFFIXES = (".nii.gz", ".nii")


def qc_paths(output: Path, qc: Path | None) -> tuple[Path, Path]:
    """The QC sheet (PNG) and its page (HTML): ``qc`` or ``<output stem>_qc.png``, and the same with .html."""
    if qc is None:
        stem = output.name[: -len(next(s for s in APERTURE_SUFFIXES if output.name.endswith(s)))]
        qc = output.with_name(f"{stem}_qc.png")
    return qc, qc.with_suffix(".html")


def check_output(output: Path, overwrite: bool) -> None:
    """Refuse an output name prfmap cannot read back, or one that exists without ``overwrite``."""
    if not output.name.endswith(APERTURE_SUFFIXES):
        raise UsageError(f"--output {output} must end in .nii.gz or .nii (prfmap's aperture format)")
    if output.exists() and not overwrite:
        raise UsageError(f"--output {output} exists; choose another name or pass --overwrite")
    if output.parent.exists() and not output.parent.is_dir():
        raise UsageError(f"--output {output}: {output.parent} is not a folder")


def sidecar(result: StimulusResult, command: str) -> dict:
    """The aperture's JSON sidecar: what :func:`load_aperture` reads, and how the file was made."""
    screen, bg, source = result.options.screen, result.detector.background, result.source
    rows, cols = source.source_shape
    meta: dict = {
        "FieldOfViewDeg": round(result.fov_deg, 6),
        "Description": (
            "Stimulus apertures made by prfmap-stimulus: axis 0 rows top to bottom, axis 1 columns left "
            "to right, axis 2 singleton, axis 3 volumes; each value is the share of the pixel that was "
            "stimulus during the volume (0 = background or fixation mark)"
        ),
        "StimulatedWidthDeg": round(result.width_deg, 6),
        "Source": source.description,
        "SourceFiles": [Path(p).name for p in source.sources],
        "ScreenSizePx": [cols, rows],
        "CropPx": result.crop.scaled(source.scale),
        "BackgroundColor": list(bg.rgb255),
        "BackgroundGiven": bg.given,
        "DifferenceThreshold": round(bg.threshold * 255, 2),
        "FillPx": result.detector.fill_px * source.scale,
        "FixationMaskPx": int(result.fixation.sum()) * source.scale**2,
        "FramesRead": result.frames_read,
        "BlankVolumes": [v + 1 for v in result.blank_volumes],
        "FloodedFrames": [f + 1 for f in result.flooded_frames],
        "DistinctApertures": result.distinct_apertures,
        "GeneratedBy": [
            {"Name": "prfmap-stimulus", "Version": __version__, "CodeURL": "https://github.com/prfmap/prfmap"}
        ],
        "CommandLine": command,
    }
    if result.options.tr is not None:
        meta = {"FieldOfViewDeg": meta.pop("FieldOfViewDeg"), "RepetitionTime": result.options.tr, **meta}
    if screen.size_cm is not None:
        meta["ScreenSizeCm"] = list(screen.size_cm)
        meta["ScreenDistanceCm"] = screen.distance_cm
    return meta


def write_nifti(design: np.ndarray, path: Path) -> None:
    """(volumes, rows, cols) → NIfTI rows × cols × 1 × volumes, float32."""
    volume = np.ascontiguousarray(np.transpose(design, (1, 2, 0))[:, :, None, :], dtype=np.float32)
    nib.save(nib.Nifti1Image(volume, np.eye(4)), str(path))


@dataclass(frozen=True)
class EventsUpdate:
    """An events file to write: its path, its new text, and what to say about it."""

    path: Path
    text: str
    notes: tuple[str, ...]


def dataset_root(events: Path) -> Path:
    """The BIDS dataset an events file belongs to (the nearest folder above with dataset_description.json)."""
    for folder in events.resolve().parents:
        if (folder / "dataset_description.json").is_file():
            return folder
    raise UsageError(f"--events {events}: no dataset_description.json above it; name a BIDS run's events.tsv")


def events_update(events: Path, output: Path, volumes: int, tr: float | None) -> EventsUpdate:
    """The ``stim_file`` column of a run's events naming ``output`` (written or updated, not saved yet).

    An existing file keeps its rows and columns; every row names the new aperture, and a
    ``stim_file_index`` column (which indexed the old file) is removed. A missing one gets one row
    covering the run (onset 0, duration volumes × TR).

    Raises
    ------
    UsageError
        Not a ``*_events.tsv`` in a BIDS dataset, the aperture not under its ``stimuli/`` folder, no TR
        for a new file.
    BadDataError
        An existing file that is not a readable table.
    """
    if not events.name.endswith("_events.tsv"):
        raise UsageError(f"--events {events} must name a BIDS run's *_events.tsv")
    root = dataset_root(events)
    stimuli = (root / "stimuli").resolve()
    target = output.resolve()
    if not target.is_relative_to(stimuli):
        raise UsageError(f"--events needs --output inside {stimuli} (stim_file names a file under stimuli/)")
    name = target.relative_to(stimuli).as_posix()
    notes: list[str] = []
    if events.is_file():
        try:
            table = pd.read_csv(events, sep="\t", dtype=str, keep_default_na=False)
        except (OSError, ValueError, pd.errors.ParserError) as err:
            raise BadDataError(f"cannot read events file {events} ({one_line(err)[:160]}); fix it") from None
        if table.empty or not {"onset", "duration"} <= set(table.columns):
            raise BadDataError(f"events file {events} has no onset/duration rows; fix it or remove it")
        if "stim_file_index" in table.columns:
            table = table.drop(columns="stim_file_index")
            notes.append("removed its stim_file_index column (it indexed the previous stim_file)")
        table["stim_file"] = name
    else:
        if tr is None:
            raise UsageError(f"--events {events} does not exist; give --tr to write its duration")
        table = pd.DataFrame(
            {
                "onset": ["0"],
                "duration": [f"{volumes * tr:g}"],
                "trial_type": ["stimulus"],
                "stim_file": [name],
            }
        )
    notes.extend(_run_checks(events, volumes, tr))
    return EventsUpdate(events, table.to_csv(sep="\t", index=False, lineterminator="\n"), tuple(notes))


def _run_checks(events: Path, volumes: int, tr: float | None) -> list[str]:
    """Warnings when the run's raw BOLD has another number of volumes or TR than the aperture."""
    stem = events.name[: -len("_events.tsv")]
    notes = []
    for bold in (events.with_name(f"{stem}_bold.nii.gz"), events.with_name(f"{stem}_bold.nii")):
        if bold.is_file():
            try:
                shape = nib.load(bold).shape
            except (OSError, ValueError, nib.filebasedimages.ImageFileError):
                break
            if len(shape) == 4 and shape[3] != volumes:
                notes.append(f"warning: {bold.name} has {shape[3]} volumes, the aperture {volumes}")
            break
    meta_path = events.with_name(f"{stem}_bold.json")
    if tr is not None and meta_path.is_file():
        try:
            run_tr = json.loads(meta_path.read_text()).get("RepetitionTime")
        except (OSError, ValueError, AttributeError):
            run_tr = None
        if isinstance(run_tr, int | float) and abs(run_tr - tr) > 1e-3:
            notes.append(f"warning: {meta_path.name} says RepetitionTime {run_tr:g} s, --tr {tr:g} s")
    return notes


def write_all(
    result: StimulusResult,
    output: Path,
    *,
    command: str,
    qc: tuple[Path, Path] | None,
    events: Sequence[EventsUpdate] = (),
    extra: Mapping | None = None,
) -> list[Path]:
    """Write the aperture, its sidecar, the QC sheet and page, and the events, all or none.

    Returns
    -------
    list of Path
        The files written.
    """
    side = sidecar_path(output)
    written = [output, side, *(qc or ()), *(e.path for e in events)]
    meta = {**sidecar(result, command), **(extra or {})}
    with ExitStack() as stack:
        write_nifti(result.design, stack.enter_context(atomic_path(output)))
        stack.enter_context(atomic_path(side)).write_text(json.dumps(jsonable(meta), indent=2) + "\n")
        if qc is not None:
            png, html = qc
            write_sheet(result, stack.enter_context(atomic_path(png)))
            names = [_relative(p, html.parent) for p in written]
            page = render_page(result, _relative(png, html.parent), names, command)
            stack.enter_context(atomic_path(html)).write_text(page, encoding="utf-8")
        for update in events:
            stack.enter_context(atomic_path(update.path)).write_text(update.text, encoding="utf-8")
    return written


def _relative(path: Path, folder: Path) -> str:
    try:
        return path.resolve().relative_to(folder.resolve()).as_posix()
    except ValueError:
        return str(path)
