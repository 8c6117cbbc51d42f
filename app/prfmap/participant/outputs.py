"""What a fit gives out: its maps and series with their sidecars, and what the report shows of it."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from prfmap import __version__
from prfmap.config import Config
from prfmap.derivatives import (
    bids_uri,
    write_map_files,
    write_series_files,
)
from prfmap.derivatives.areas import (
    SUMMARY_COLUMNS,
    SUMMARY_DESC,
    area_summary,
    write_area_files,
    write_area_summary,
)
from prfmap.derivatives.comparison import COMPARISON_MODEL, write_comparison_files
from prfmap.engine import backend_info
from prfmap.io.geometry import VolumeGeometry
from prfmap.participant import comparison as compare
from prfmap.participant.crossval import (
    DEFINITION,
)
from prfmap.participant.fit import FitOutcome
from prfmap.participant.load import LoadedFit
from prfmap.report.comparison import ComparisonContext
from prfmap.report.participant import ReportContext


def write_outcome(fitted: FitOutcome, config: Config, folder: Path) -> tuple[Path, ...]:
    """Write a fit's maps (and, with ``--save-predictions``, its time series) under ``folder``.

    Parameters
    ----------
    fitted : FitOutcome
        A fit.
    config : Config
        The run's configuration.
    folder : Path
        The staging folder.

    Returns
    -------
    tuple of Path
        Data files and sidecars.
    """
    loaded, result = fitted.loaded, fitted.result
    key, geometry = loaded.plan.key, loaded.geometry
    maps = {label: np.asarray(v, dtype=np.float32) for label, v in fitted.maps().items()}
    provenance = provenance_of(fitted, config)
    func = key.func_dir(folder)
    reference_dir = config.inputs.fmriprep_dir
    by_stat: dict[str, dict[str, np.ndarray]] = {}
    for (stat, label), values in result.stat_maps().items():
        by_stat.setdefault(stat, {})[label] = np.asarray(values, dtype=np.float32)
    written = write_map_files(
        func, key, geometry, maps, result.settings, provenance, reference_dir, statistics=by_stat
    )
    if loaded.areas is not None:
        written += write_areas(loaded, maps, config, folder)
    if config.outputs.save_predictions and result.predictions is not None:
        series = {
            f"{key.model}prediction": (result.predictions, "fitted model time series"),
            "preproc": (loaded.combined.data, "preprocessed data the model was fitted to"),
        }
        written += write_series_files(func, key, geometry, series, loaded.tr, provenance, reference_dir)
    return tuple(written)


def write_areas(loaded: LoadedFit, maps: dict[str, np.ndarray], config: Config, folder: Path) -> list[Path]:
    """Write a fit's area label maps (``anat``) and its per-area summary (``func``) under ``folder``.

    Parameters
    ----------
    loaded : LoadedFit
        The fit's data, with its ``areas``.
    maps : dict of str to ndarray
        The fit's (units,) maps.
    config : Config
        The run's configuration.
    folder : Path
        The staging folder.

    Returns
    -------
    list of Path
        Data files and sidecars.
    """
    areas, key = loaded.areas, loaded.plan.key
    if areas is None:
        return []
    func = key.func_dir(folder)
    written = write_area_files(
        func.parent / "anat", key, loaded.geometry, areas.labels, config.inputs.fmriprep_dir
    )
    atlas = areas.labels.atlas
    rows = area_summary(maps, areas.codes, atlas.name, config.outputs.r2_threshold, loaded.fov_deg)
    described = {
        "Atlas": atlas.name,
        "AtlasDescription": atlas.title,
        "AtlasMethod": f"the atlas's labels {areas.labels.how}",
        "AreaMaps": [p.name for p in written if not p.name.endswith(".json")],
        "Threshold": f"r2 >= {config.outputs.r2_threshold:g} (--r2-threshold), not doubtful",
        "StimulatedRadiusDeg": loaded.fov_deg / 2,
    }
    stem = key.stem(param=SUMMARY_DESC)
    return written + write_area_summary(func, stem, rows, SUMMARY_COLUMNS, described)


def comparison_described(compared: compare.ComparedFit, config: Config) -> dict[str, Any]:
    """What a comparison's sidecars record: ``Levels``, the models, the ``Comparison``, provenance.

    Parameters
    ----------
    compared : ComparedFit
        A plan's models and their comparison.
    config : Config
        The run's configuration.

    Returns
    -------
    dict
    """
    gauss, comparison = compared.gauss, compared.comparison
    provenance = provenance_of(gauss, config)
    provenance.pop("Timings", None)
    provenance.pop("VarianceExplained", None)
    return {
        "Levels": comparison.levels(),
        "ModelsCompared": list(comparison.models),
        "Comparison": {
            "Definition": compare.DEFINITION,
            "Alpha": compare.ALPHA,
            "ZLimit": round(comparison.z_limit, 4),
            "CSSGaussianExponent": compare.CSS_GAUSSIAN_N,
            "cvr2": DEFINITION,
            "Folds": variance_explained(gauss, config).get("Folds", []),
            "Shares": {m: round(v, 4) for m, v in comparison.shares().items()},
        },
        "ComparedMaps": [outcome.loaded.plan.key.stem(param="cvr2") for outcome in compared.outcomes],
        **provenance,
    }


def write_comparison(compared: compare.ComparedFit, config: Config, folder: Path) -> tuple[Path, ...]:
    """Write the ``model-best`` maps of a comparison of models under ``folder``.

    Parameters
    ----------
    compared : ComparedFit
        A plan's models and their comparison.
    config : Config
        The run's configuration.
    folder : Path
        The staging folder.

    Returns
    -------
    tuple of Path
        Data files and sidecars.
    """
    gauss, comparison = compared.gauss, compared.comparison
    loaded = gauss.loaded
    key = dataclasses.replace(loaded.plan.key, model=COMPARISON_MODEL)
    described = comparison_described(compared, config)
    maps = {"winner": comparison.winner, "cvr2": comparison.cvr2, "deltacvr2": comparison.delta_cvr2}
    return tuple(
        write_comparison_files(
            key.func_dir(folder),
            key,
            loaded.geometry,
            maps,
            comparison.winner_z(),
            described,
            config.inputs.fmriprep_dir,
        )
    )


def comparison_context(
    compared: compare.ComparedFit, gauss: ReportContext, outputs: Sequence[Path], config: Config
) -> ComparisonContext:
    """What the participant report shows of a comparison of models.

    Parameters
    ----------
    compared : ComparedFit
        A plan's models and their comparison.
    gauss : ReportContext
        The report context of its Gaussian fit.
    outputs : sequence of Path
        The comparison's published files.
    config : Config
        The run's configuration.

    Returns
    -------
    ComparisonContext
    """
    comparison = compared.comparison
    return ComparisonContext(
        fit=gauss,
        winner=comparison.winner,
        cvr2=comparison.cvr2,
        delta_cvr2=comparison.delta_cvr2,
        levels=comparison.levels(),
        described=comparison_described(compared, config)["Comparison"],
        outputs=[str(p.relative_to(config.outputs.output_dir)) for p in outputs],
    )


def provenance_of(fitted: FitOutcome, config: Config) -> dict[str, Any]:
    """What every sidecar of a fit records: inputs, stimulus, preprocessing, software, timings.

    Parameters
    ----------
    fitted : FitOutcome
        A fit.
    config : Config
        The run's configuration.

    Returns
    -------
    dict
    """
    loaded = fitted.loaded
    runs = loaded.plan.runs
    info = backend_info()
    return {
        "Sources": [bids_uri(p, config.inputs.dataset_links) for p in loaded.inputs],
        "Runs": [run.name for run in runs],
        "RepetitionTime": loaded.tr,
        "SliceTimeReference": loaded.slice_time.describe(loaded.tr),
        "Stimulus": {
            "Files": sorted({bids_uri(r.stim_file, config.inputs.dataset_links) for r in runs}),
            "FieldOfViewDeg": loaded.source_fov_deg,
            "Pixels": list(loaded.source_pixels),
            "FittedPixels": list(loaded.pixels),
            "FittedPixelDeg": loaded.fov_deg / (loaded.pixels[1] - 1),
            "FramesPerRun": list(loaded.combined.run_lengths),
        },
        "Preprocessing": {
            "DummyScans": list(loaded.dummy_scans),
            "HighPassHz": config.preprocessing.high_pass_hz,
            "Confounds": list(config.preprocessing.confounds),
            "Units": "percent signal change",
            "BOLDScale": config.preprocessing.bold_scale,
            **_smoothing(loaded),
            "RunCombination": "runs with the same stimulus averaged, others concatenated",
            **_left_out(loaded),
        },
        "Software": {"prfmap": __version__, **info},
        "Device": info.get("device"),
        "RandomSeed": config.fit.random_seed,
        "Timings": {**fitted.timings, **dict(fitted.result.timings)},
        "VarianceExplained": variance_explained(fitted, config),
        **({"RegionOfInterest": loaded.roi.record()} if loaded.roi is not None else {}),
    }


def _smoothing(loaded: LoadedFit) -> dict[str, Any]:
    """The sidecar's record of the spatial smoothing (none: nothing)."""
    if loaded.smoothing is None:
        return {}
    return {"SmoothingFWHM": loaded.smoothing.fwhm_mm, "SmoothingMethod": loaded.smoothing.describe()}


def _left_out(loaded: LoadedFit) -> dict[str, Any]:
    """What the sidecar says about runs and voxels that were left out of the fit (none: nothing)."""
    out: dict[str, Any] = {}
    if loaded.left_out:
        out["RunsLeftOut"] = dict(loaded.left_out)
    if loaded.mask_voxels_left_out:
        out["BrainMask"] = {
            "Combination": "the runs' brain masks differ: the voxels inside every run's mask are fitted",
            "VoxelsLeftOut": dict(loaded.mask_voxels_left_out),
        }
    return out


def variance_explained(fitted: FitOutcome, config: Config) -> dict[str, Any]:
    """What the sidecars and the report say about r2, cvr2 and the threshold.

    Parameters
    ----------
    fitted : FitOutcome
        A fit.
    config : Config
        The run's configuration.

    Returns
    -------
    dict
    """
    names = [run.name for run in fitted.loaded.plan.runs]
    out: dict[str, Any] = {
        "r2": "variance explained in the data that were fitted (after nuisance projection)",
        "Threshold": f"{config.outputs.threshold_on} >= {config.outputs.r2_threshold:g} "
        "(--threshold-on, --r2-threshold)",
    }
    if fitted.cv is None:
        out["cvr2"] = "not computed: " + (
            "--no-cvr2" if not config.outputs.cvr2 else "it needs two or more runs"
        )
        return out
    out["cvr2"] = DEFINITION
    out["Folds"] = [
        {"HeldOut": names[f.held_out], "Fitted": [names[i] for i in f.training], "Seconds": round(t, 3)}
        for f, t in zip(fitted.cv.folds, fitted.cv.seconds, strict=True)
    ]
    if fitted.cv.retest is not None:
        out["TestRetest"] = fitted.cv.retest
    return out


def report_context(
    fitted: FitOutcome,
    outputs: Sequence[Path],
    write_seconds: float,
    config: Config,
    command: Sequence[str] = (),
) -> ReportContext:
    """What the participant report shows of one fit.

    Parameters
    ----------
    fitted : FitOutcome
        A fit.
    outputs : sequence of Path
        Its published files.
    write_seconds : float
        Time writing took.
    config : Config
        The run's configuration.
    command : sequence of str
        The command line.

    Returns
    -------
    ReportContext
    """
    loaded, result = fitted.loaded, fitted.result
    plan, key = loaded.plan, loaded.plan.key
    return ReportContext(
        subject=key.subject,
        space=key.space,
        maps=fitted.maps(),
        stat_maps=result.stat_maps(),
        model=key.model,
        session=key.session,
        task=key.task,
        den=key.den,
        inputs=list(loaded.inputs),
        runs=[r.name.removeprefix(f"sub-{key.subject}_") for r in plan.runs],
        tr=loaded.tr,
        dummy_scans=max(loaded.dummy_scans, default=0),
        design=loaded.combined.design,
        fov_deg=loaded.fov_deg,
        settings=result.settings,
        extra_settings={
            "slice_time_reference": loaded.slice_time.describe(loaded.tr),
            "variance_explained": variance_explained(fitted, config),
        },
        backend=backend_info(),
        timings={**fitted.timings, "write": write_seconds, **dict(result.timings)},
        warnings=list(fitted.warnings),
        surface=loaded.geometry.surface(),
        fmriprep_dir=config.inputs.fmriprep_dir,
        data=loaded.combined.data,
        predictions=result.predictions,
        r2_threshold=config.outputs.r2_threshold,
        outputs=[str(p.relative_to(config.outputs.output_dir)) for p in outputs],
        dataset_dir=config.inputs.bids_dir,
        command=list(command) or None,
        preprocessing=provenance_of(fitted, config)["Preprocessing"],
        run_inputs=list(plan.runs),
        volume=loaded.geometry if isinstance(loaded.geometry, VolumeGeometry) else None,
        areas=loaded.areas,
        areas_note=loaded.areas_note,
    )
