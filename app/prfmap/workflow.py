"""The participant level: find runs, load and preprocess them, fit, write derivatives and reports.

Runs are grouped per (participant, session, task, space); both hemispheres of a surface space are
fitted together. Runs that saw the same stimulus are averaged, different stimuli concatenated.
Everything a participant produces is written into a staging folder and published only once all
of it is complete; before that only log files exist.
"""

from __future__ import annotations

import contextlib
import logging
import math
import tempfile
import time
from argparse import Namespace
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from prfmap import __version__
from prfmap.derivatives import (
    OutputKey,
    bids_uri,
    map_sidecar,
    publish,
    staging,
    write_dataset_files,
    write_json,
)
from prfmap.errors import BadDataError, MissingInputError, PrfmapError, UsageError
from prfmap.signals import check_stop, stop_after_chunk

LOGGER = logging.getLogger("prfmap.workflow")


@dataclass
class FitGroup:
    """The runs fitted together, and what came out of the fit."""

    key: OutputKey
    runs: list[Any]
    data: np.ndarray | None = None
    geometry: Any = None
    combined: Any = None
    fov_deg: float | None = None
    source_fov_deg: float | None = None
    pixels: tuple[int, int] | None = None
    source_pixels: tuple[int, int] | None = None
    tr: float | None = None
    dummy_scans: list[int] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    result: Any = None
    timings: dict[str, float] = field(default_factory=dict)
    outputs: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def run_participant_level(opts: Namespace) -> list[Path]:
    """Fit every selected participant and write their derivatives and reports.

    Parameters
    ----------
    opts : argparse.Namespace
        Parsed by :func:`prfmap.cli.parser.build_parser`, with absolute ``bids_dir`` and
        ``output_dir`` and the backend already selected.

    Returns
    -------
    list of Path
        Every derivative file written.
    """
    from prfmap.io.bids import find_inputs
    from prfmap.memory import default_mem_gb

    opts.mem_gb_auto = not opts.mem_gb
    if opts.mem_gb_auto:
        opts.mem_gb = default_mem_gb()
        LOGGER.info("memory budget %.1f GB (--mem-gb; default: half the available memory)", opts.mem_gb)
    with stop_after_chunk(), _work_dir(opts.work_dir) as work_dir:
        runs = find_inputs(
            opts.bids_dir,
            opts.output_dir,
            derivatives=dict(opts.derivatives) if opts.derivatives else None,
            participant_labels=opts.participant_label,
            session_labels=opts.session_label,
            tasks=opts.task,
            runs=opts.run,
            space=opts.space,
            bids_filter=opts.bids_filter_file,
            work_dir=work_dir,
            stimulus=opts.stimulus,
        )
        written: list[Path] = []
        for subject in sorted({r.subject for r in runs}):
            subject_runs = [r for r in runs if r.subject == subject]
            with _participant_log(opts.output_dir, subject):
                try:
                    written += _participant(opts, subject, subject_runs)
                except Exception as err:
                    if not isinstance(err, PrfmapError):
                        LOGGER.error("sub-%s failed", subject, exc_info=True)
                        err.prfmap_logged = True  # type: ignore[attr-defined]
                    raise
        return written


def _participant(opts: Namespace, subject: str, runs: list[Any]) -> list[Path]:
    groups = _group_runs(runs, opts.model)
    LOGGER.info(
        "sub-%s: %d run(s) in %d fit(s): %s",
        subject, len(runs), len(groups), ", ".join(_group_name(g) for g in groups),
    )  # fmt: skip
    progress = _make_progress()
    try:
        for group in groups:
            _load_group(group, opts, progress)
            _fit_group(group, opts, progress)
    finally:
        _close(progress)
    check_stop("after fitting every chunk, before writing outputs", _how_to_resume(opts))
    start = time.perf_counter()
    with staging(opts.output_dir) as stage:
        for group in groups:
            _write_group(group, opts, stage)
        published = publish(stage, opts.output_dir)
    write_dataset_files(opts.output_dir, _source_datasets(opts), _links_as_uris(opts))
    for group in groups:
        group.outputs = [opts.output_dir / p.relative_to(stage) for p in group.outputs]
        group.timings["write"] = time.perf_counter() - start
    LOGGER.info("sub-%s: wrote %d files under %s", subject, len(published), opts.output_dir)
    if not opts.no_report:
        _report(opts, subject, groups)
    from prfmap.checkpoint import remove_checkpoints

    remove_checkpoints(_checkpoint_dir(opts, subject))
    return published


def _group_runs(runs: list[Any], model: str) -> list[FitGroup]:
    groups: dict[tuple, FitGroup] = {}
    for run in runs:
        res = run.entities.get("res")
        key = OutputKey(run.subject, run.session, run.task, run.space, run.den, res, model)
        groups.setdefault((key, run.kind), FitGroup(key=key, runs=[])).runs.append(run)
    return list(groups.values())


def _group_name(group: FitGroup) -> str:
    return group.key.stem().removeprefix(f"sub-{group.key.subject}_")


def _load_group(group: FitGroup, opts: Namespace, progress: Callable) -> None:
    from prfmap.io.aperture import load_aperture
    from prfmap.io.bold import load_bold
    from prfmap.preprocess import combine_runs, preprocess_run

    start = time.perf_counter()
    preprocessed, keys, designs = [], [], {}
    n_units = None
    for i, run in enumerate(group.runs):
        progress("load runs", i, len(group.runs))
        data, geometry = load_bold(run)
        if n_units is None:
            n_units, group.geometry = data.shape[0], geometry
        elif data.shape[0] != n_units:
            raise BadDataError(
                f"{run.name} has {data.shape[0]} units but {group.runs[0].name} has {n_units} "
                f"in space {run.space}; the runs of one space must share their vertices/voxels"
            )
        if group.tr is None:
            group.tr = run.tr
        elif abs(run.tr - group.tr) > 1e-6:
            raise BadDataError(
                f"{run.name} has RepetitionTime {run.tr} s but {group.runs[0].name} {group.tr} s; "
                "fit runs with different TRs separately (--run or --task)"
            )
        if run.stim_file is None:
            raise MissingInputError(f"no stimulus aperture for {run.name}; pass --stimulus")
        aperture = load_aperture(
            run.stim_file, tr=run.tr, fov_deg=opts.stimulus_fov_deg,
            frame_index=run.stim_file_index, resample=True,
        )  # fmt: skip
        grid = (aperture.design.shape[1:], round(aperture.fov_deg, 6))
        if group.fov_deg is None:
            group.fov_deg, group.source_fov_deg = float(aperture.fov_deg), aperture.source_fov_deg
            group.pixels, group.source_pixels = grid[0], aperture.source_shape
            if aperture.resampled:
                LOGGER.info(
                    "aperture %s: %d × %d pixels area-averaged to %d × %d (%.3f° each, the grid's "
                    "smallest pRF size)", Path(run.stim_file).name, *aperture.source_shape,
                    *grid[0], aperture.fov_deg / (grid[0][1] - 1),
                )  # fmt: skip
        elif grid != (group.pixels, round(group.fov_deg, 6)):
            raise BadDataError(
                f"aperture {Path(run.stim_file).name} spans {aperture.source_fov_deg}° in "
                f"{aperture.source_shape[0]} × {aperture.source_shape[1]} pixels but another run's "
                f"{group.source_fov_deg}° in {group.source_pixels[0]} × {group.source_pixels[1]}; "
                "apertures fitted together need one field of view (--stimulus-fov-deg) and size"
            )
        dummy, confounds = _confounds(run, opts, data.shape[1])
        if i == 0:
            _check_memory(group, opts, data.shape[0], data.shape[1] - dummy, aperture.design[0].size)
        frames, volumes = aperture.design.shape[0], data.shape[1] - dummy
        if frames != volumes:
            raise BadDataError(
                f"aperture {Path(run.stim_file).name} has {frames} frames but "
                f"{run.bold_files[0].name} has {volumes} volumes after {dummy} dummy scans "
                f"({data.shape[1]} in all); they must be equal (check the aperture or "
                "--dummy-scans)"
            )
        preprocessed.append(
            preprocess_run(
                data,
                run.tr,
                dummy_scans=dummy,
                high_pass_hz=opts.high_pass_hz,
                confounds=confounds,
            )  # fmt: skip
        )
        key = run.stimulus_key
        keys.append(key)
        designs.setdefault(key, aperture.design)
        group.dummy_scans.append(dummy)
        group.inputs += [str(p) for p in run.bold_files]
        group.inputs += [str(p) for p in (run.mask, run.events, run.confounds) if p is not None]
        group.inputs.append(str(run.stim_file))
    progress("load runs", len(group.runs), len(group.runs))
    group.inputs = list(dict.fromkeys(group.inputs))
    group.combined = combine_runs(preprocessed, keys, designs)
    group.timings["load"] = time.perf_counter() - start
    n_stimuli = len(set(keys))
    LOGGER.info(
        "%s: %d run(s), %d stimulus sequence(s) → %d units × %d frames",
        _group_name(group), len(group.runs), n_stimuli, *group.combined.data.shape,
    )  # fmt: skip


def _check_memory(group: FitGroup, opts: Namespace, units: int, volumes: int, pixels: int) -> None:
    """Refuse a ``--mem-gb`` below what the group must hold (estimated from its first run)."""
    from prfmap.memory import participant_need_gb

    n_stimuli = len({run.stimulus_key for run in group.runs})
    predictions = bool(opts.save_predictions or not opts.no_report)
    need = participant_need_gb(units, volumes * len(group.runs), volumes * n_stimuli, pixels, predictions)
    if need <= opts.mem_gb:
        return
    minimum = math.ceil(need * 100) / 100
    what = (
        f"{_group_name(group)} of sub-{group.key.subject} needs {minimum:g} GB ({units} units × "
        f"{volumes} volumes × {len(group.runs)} run(s){', with predictions' if predictions else ''})"
    )
    if getattr(opts, "mem_gb_auto", False):
        LOGGER.warning("%s, more than the default --mem-gb %.2f GB; it may run out of memory", what,
                       opts.mem_gb)
        return
    raise UsageError(f"--mem-gb {opts.mem_gb:g} is too small: {what}; pass --mem-gb {minimum:g} or more")


def _bold_name(run: Any) -> str:
    return " and ".join(Path(p).name for p in run.bold_files)


def _confounds(run: Any, opts: Namespace, n_volumes: int) -> tuple[int, np.ndarray | None]:
    """Dummy scans and the named confound columns (volumes, k) of a run."""
    from prfmap.preprocess import dummy_scans_from_confounds, read_confounds, select_confounds

    table = None
    if (opts.confounds or opts.dummy_scans is None) and run.confounds is not None:
        table = read_confounds(run.confounds)
        if len(table) != n_volumes:
            raise BadDataError(
                f"{Path(run.confounds).name} has {len(table)} rows but the BOLD has {n_volumes} "
                "volumes; use the confounds of the same run"
            )
    if opts.dummy_scans is not None:
        dummy = opts.dummy_scans
    else:
        dummy = dummy_scans_from_confounds(table) if table is not None else 0
    if dummy >= n_volumes:
        raise BadDataError(f"{dummy} dummy scans leave no volume of {_bold_name(run)}")
    if not opts.confounds:
        return dummy, None
    if table is None:
        raise MissingInputError(f"--confounds given but {run.name} has no desc-confounds_timeseries.tsv")
    return dummy, select_confounds(table, opts.confounds, str(run.confounds))


def _fit_group(group: FitGroup, opts: Namespace, progress: Callable) -> None:
    from prfmap.checkpoint import fit_chunked
    from prfmap.engine import Stimulus
    from prfmap.memory import chunk_units, engine_mem_gb

    combined = group.combined
    stim = Stimulus(combined.design, fov_deg=group.fov_deg, run_lengths=combined.run_lengths)
    start = time.perf_counter()
    group.result = fit_chunked(
        combined.data,
        stim,
        group.tr,
        folder=_checkpoint_dir(opts, group.key.subject) / _group_name(group),
        chunk=chunk_units(opts.mem_gb, combined.data.shape[1]),
        fit_kwargs={
            "model": opts.model,
            "refine": opts.refine,
            "refine_r2_min": opts.refine_r2_min,
            "nuisance": combined.nuisance,
            "fit_hrf": opts.fit_hrf,
            "mem_gb": engine_mem_gb(opts.mem_gb),
            "seed": opts.random_seed,
            "return_predictions": bool(opts.save_predictions or not opts.no_report),
        },
        inputs=group.inputs,
        name=_group_name(group),
        how_to_resume=_how_to_resume(opts),
        progress=progress,
        budget="auto" if getattr(opts, "mem_gb_auto", False) else None,
    )
    group.timings["fit"] = time.perf_counter() - start
    r2 = np.asarray(group.result.r2)
    fitted = np.isfinite(np.asarray(group.result.params["x"]))
    n_bad = int((~fitted).sum())
    if n_bad:
        group.warnings.append(
            f"{n_bad} of {fitted.size} units had no usable signal (NaN or constant: medial "
            "wall, outside the brain) and are NaN in the maps"
        )
    LOGGER.info(
        "%s: fitted %d units in %.1f s, median r² %.3f",
        _group_name(group), int(fitted.sum()), group.timings["fit"],
        float(np.nanmedian(r2[fitted])) if fitted.any() else float("nan"),
    )  # fmt: skip


def _provenance(group: FitGroup, opts: Namespace) -> dict[str, Any]:
    from prfmap.engine import backend_info

    return {
        "Sources": [bids_uri(p, _dataset_links(opts)) for p in group.inputs],
        "Runs": [run.name for run in group.runs],
        "RepetitionTime": group.tr,
        "Stimulus": {
            "Files": sorted({str(r.stim_file) for r in group.runs}),
            "FieldOfViewDeg": group.source_fov_deg,
            "Pixels": list(group.source_pixels),
            "FittedPixels": list(group.pixels),
            "FittedPixelDeg": group.fov_deg / (group.pixels[1] - 1),
            "FramesPerRun": list(group.combined.run_lengths),
        },
        "Preprocessing": {
            "DummyScans": group.dummy_scans,
            "HighPassHz": opts.high_pass_hz,
            "Confounds": list(opts.confounds or []),
            "Units": "percent signal change",
            "RunCombination": "runs with the same stimulus averaged, others concatenated",
        },
        "Software": {"prfmap": __version__, **backend_info()},
        "Device": backend_info().get("device"),
        "RandomSeed": opts.random_seed,
        "Timings": {**group.timings, **dict(getattr(group.result, "timings", {}))},
    }


def _write_group(group: FitGroup, opts: Namespace, stage: Path) -> None:
    key, geometry, result = group.key, group.geometry, group.result
    maps = {label: np.asarray(v, dtype=np.float32) for label, v in result.maps().items()}
    settings = dict(result.settings)
    provenance = _provenance(group, opts)
    folder = key.func_dir(stage)
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if geometry.kind == "cifti":
        path = folder / f"{key.stem()}_boldmap.dscalar.nii"
        written += geometry.write_maps(maps, lambda hemi: path, {"Model": key.model})
        sidecar = map_sidecar(None, key.model, settings, {**provenance, "MapNames": list(maps)})
        sidecar["MapNames"] = list(maps)
        written += _sidecar(path, sidecar)
    else:
        extension = ".func.gii" if geometry.kind == "gifti" else ".nii.gz"
        for label, values in maps.items():

            def path_for(hemi: str | None, label: str = label) -> Path:
                return folder / f"{key.stem(hemi=hemi, param=label)}_boldmap{extension}"

            meta = {"Model": key.model, "Parameter": label}
            files = geometry.write_maps({label: values}, path_for, meta)
            written += files
            sidecar = map_sidecar(label, key.model, settings, provenance)
            for path in files:
                written += _sidecar(path, sidecar)
    if opts.save_predictions and result.predictions is not None:
        written += _write_series(group, folder, provenance)
    group.outputs = written


def _write_series(group: FitGroup, folder: Path, provenance: dict) -> list[Path]:
    key, geometry = group.key, group.geometry
    extension = {"gifti": ".func.gii", "cifti": ".dtseries.nii"}.get(geometry.kind, ".nii.gz")
    written: list[Path] = []
    series = {
        "prediction": (group.result.predictions, "fitted model time series"),
        "preproc": (group.combined.data, "preprocessed data the model was fitted to"),
    }
    for desc, (values, description) in series.items():

        def path_for(hemi: str | None, desc: str = desc) -> Path:
            return folder / f"{key.stem(hemi=hemi, desc=desc)}_bold{extension}"

        files = geometry.write_series(np.asarray(values, np.float32), path_for, group.tr)
        sidecar = {
            "Description": f"{description}, after removing the nuisance subspace (DCT "
            "high-pass, confounds, run means) from data and predictions alike",
            "RepetitionTime": group.tr,
            "Model": key.model,
            "Units": "percent signal change",
            **provenance,
        }
        for path in files:
            written += [path, *_sidecar(path, sidecar)]
    return written


def _sidecar(path: Path, content: dict[str, Any]) -> list[Path]:
    name = path.name
    for ext in (".func.gii", ".dscalar.nii", ".dtseries.nii", ".nii.gz", ".nii"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    json_path = path.with_name(name + ".json")
    write_json(json_path, content)
    return [json_path]


def _dataset_links(opts: Namespace) -> dict[str, Path]:
    links = {"raw": opts.bids_dir}
    derivatives = dict(opts.derivatives or {})
    links.update(derivatives or {"fmriprep": opts.bids_dir / "derivatives" / "fmriprep"})
    return links


def _links_as_uris(opts: Namespace) -> dict[str, str]:
    return {name: Path(path).absolute().as_uri() for name, path in _dataset_links(opts).items()}


def _source_datasets(opts: Namespace) -> list[dict[str, str]]:
    import json

    sources = []
    for name, path in _dataset_links(opts).items():
        entry = {"URL": f"bids:{name}:"}
        try:
            desc = json.loads((Path(path) / "dataset_description.json").read_text())
            generated = (desc.get("GeneratedBy") or [{}])[0] if name != "raw" else {}
            version = generated.get("Version") or desc.get("DatasetDOI")
            if version:
                entry["Version"] = str(version)
        except (OSError, ValueError, AttributeError, IndexError, TypeError):
            pass
        sources.append(entry)
    return sources


def _report(opts: Namespace, subject: str, groups: list[FitGroup]) -> None:
    from prfmap.engine import backend_info
    from prfmap.report.participant import (
        ReportContext,
        SurfaceGeometry,
        write_participant_report,
    )

    contexts = []
    for group in groups:
        geometry, key = group.geometry, group.key
        if geometry.kind == "gifti":
            surface = SurfaceGeometry(hemis=dict(geometry.hemis))
        elif geometry.kind == "cifti":
            surface = SurfaceGeometry.from_cifti(group.runs[0].bold)
        else:
            surface = None
        fmriprep = dict(opts.derivatives or {}).get("fmriprep")
        contexts.append(
            ReportContext(
                subject=subject,
                space=key.space,
                maps=group.result.maps(),
                model=key.model,
                session=key.session,
                task=key.task,
                den=key.den,
                inputs=group.inputs,
                runs=[r.name.removeprefix(f"sub-{subject}_") for r in group.runs],
                tr=group.tr,
                dummy_scans=max(group.dummy_scans, default=0),
                design=group.combined.design,
                fov_deg=group.fov_deg,
                settings=dict(group.result.settings),
                backend=backend_info(),
                timings={**group.timings, **dict(group.result.timings)},
                warnings=group.warnings,
                surface=surface,
                fmriprep_dir=Path(fmriprep) if fmriprep else opts.bids_dir / "derivatives" / "fmriprep",
                data=group.combined.data,
                predictions=group.result.predictions,
                r2_threshold=opts.r2_threshold,
                outputs=[str(p.relative_to(opts.output_dir)) for p in group.outputs],
            )
        )
    path = write_participant_report(opts.output_dir, subject, contexts)
    LOGGER.info("sub-%s: report %s", subject, path)


def _make_progress() -> Callable[[str, int, int], None]:
    try:
        from prfmap.progress import make_progress
    except ImportError:
        return lambda stage, done, total: None
    return make_progress()


def _close(progress: Any) -> None:
    close = getattr(progress, "close", None)
    if callable(close):
        close()


def _checkpoint_dir(opts: Namespace, subject: str) -> Path:
    root = opts.work_dir if opts.work_dir is not None else opts.output_dir / ".prfmap-work"
    return root / "checkpoints" / f"sub-{subject}"


def _how_to_resume(opts: Namespace) -> str:
    same = " with the same --work-dir" if opts.work_dir is not None else ""
    return f"run the same command again{same} to resume from the saved chunks"


@contextlib.contextmanager
def _work_dir(work_dir: Path | None) -> Iterator[Path]:
    if work_dir is not None:
        work_dir.mkdir(parents=True, exist_ok=True)
        yield work_dir
        return
    with tempfile.TemporaryDirectory(prefix="prfmap-work-") as tmp:
        yield Path(tmp)


@contextlib.contextmanager
def _participant_log(output_dir: Path, subject: str) -> Iterator[Path]:
    logs = output_dir / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    path = logs / f"sub-{subject}_{time.strftime('%Y%m%d-%H%M%S')}.log"
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.DEBUG)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s: %(message)s"))
    root = logging.getLogger("prfmap")
    root.addHandler(handler)
    try:
        yield path
    finally:
        root.removeHandler(handler)
        handler.close()
