"""The files of a synthetic dataset: raw stand-ins, fMRIPrep-like BOLD and confounds, ground truth."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np

from prfmap import __version__
from prfmap.io.atomic import atomic_path, write_json_atomic, write_text_atomic
from prfmap.io.geometry import CiftiGeometry, GiftiGeometry, VolumeGeometry
from prfmap.synth.config import (
    CF_ATLAS,
    CF_FIELDS,
    CYCLES,
    MODEL_FIELDS,
    PRF_MODELS,
    WEDGE_DEG,
    SynthConfig,
    Timing,
    acquisition_timing,
)
from prfmap.synth.connective import CF_TRUTH_LABELS, CF_TRUTH_META, cf_description
from prfmap.synth.layout import Layout
from prfmap.synth.model import (
    AR1,
)

TRUTH_LABELS = (
    "x",
    "y",
    "sigma",
    "amplitude",
    "baseline",
    "polarangle",
    "eccentricity",
    "hrfdelay",
    "hrfdispersion",
    "sampletime",
)
MODEL_TRUTH_LABELS = ("truemodel", "n", "sigmasurround", "amplitudesurround")
"""Ground-truth maps written besides :data:`TRUTH_LABELS` when the pRF models go beyond the
Gaussian (``SynthConfig.beyond_gauss``): each pRF unit's model code (:data:`MODEL_LEVELS`), the
CSS exponent, the DoG surround size (deg) and surround amplitude (percent, as ``amplitude``); NaN
where no pRF or where the unit's model has no such parameter."""
MODEL_LEVELS = {str(code): name for code, name in enumerate(PRF_MODELS)}
"""``Levels`` of the ``desc-truemodel`` map's sidecar: code → model."""
TRUEMODEL_DESCRIPTION = (
    "prfmap-synth ground truth: the pRF model of each unit, as its code (Levels name the models); "
    "NaN where no pRF"
)
TRUTH_MASKS = {"mask": "prf", "noise": "noise"}
"""Ground-truth masks (``load_truth`` key → ``desc`` label): units with a pRF; units with signal
but no pRF (drifts and noise only)."""
CF_TRUTH_MASKS = {"cfsource": "cfsource", "cftarget": "cftarget"}
"""Ground-truth masks of datasets with connective fields (``load_truth`` key → ``desc`` label): the
source area's vertices; the target vertices, null ones (noise only) included."""
FMRIPREP_BIDSIGNORE = (
    "*.html",
    "logs/",
    "figures/",
    "*_xfm.*",
    "*.surf.gii",
    "*_boldref.nii.gz",
    "*_bold.func.gii",
    "*_mixing.tsv",
    "*_AROMAnoiseICs.csv",
    "*_timeseries.tsv",
    "*_bold.dtseries.nii",
    "*hemi-*bold.json",
    "*den-*bold.json",
    "*.shape.gii",
)
"""fMRIPrep's own .bidsignore (what the specification does not cover yet), plus the surface and
CIFTI series and the fsnative surface shapes (sulcal depth) the current validator does not know
either, with their sidecars."""
TRUTH_BIDSIGNORE = ("*_boldmap.*", "*_mask.func.gii", "truth.json")
RAW_BOLD_SHAPE = (2, 2)
"""Voxels per slice of the raw BOLD stand-ins (one plane per acquisition slice, so that
``SliceTiming`` matches them): the raw dataset is valid BIDS; prfmap reads derivatives."""
SPHERE_URI = (
    "https://templateflow.s3.amazonaws.com/tpl-fsaverage/tpl-fsaverage_hemi-{}_den-10k_sphere.surf.gii"
)

DESIGN_TEXT = {
    "bars": "Bar sweeps",
    "multiwidth": "Bar sweeps of two widths",
    "hcp": "A wedge, a ring and bar sweeps (HCP-like)",
}
"""How the README and the stimulus sidecar name each stimulus design."""


def confounds_tsv(bold: np.ndarray, config: SynthConfig, rng: np.random.Generator) -> str:
    """fMRIPrep-like confounds of a run (motion, its derivatives, non-steady-state columns) as TSV text."""
    n_vol = bold.shape[1]
    cols = {
        "global_signal": bold.mean(axis=0),
        "csf": 400 + rng.normal(0, 2, n_vol),
        "white_matter": 500 + rng.normal(0, 1, n_vol),
    }
    motion = np.cumsum(rng.normal(0, 0.01, (n_vol, 6)), axis=0)
    for i, name in enumerate(("trans_x", "trans_y", "trans_z", "rot_x", "rot_y", "rot_z")):
        cols[name] = motion[:, i]
    fd = np.abs(np.diff(motion, axis=0)).sum(axis=1)
    for d in range(config.dummy_scans):
        cols[f"non_steady_state_outlier{d:02d}"] = (np.arange(n_vol) == d).astype(float)
    lines = ["\t".join([*cols, "framewise_displacement"])]
    for k in range(n_vol):
        row = [f"{cols[c][k]:.6g}" for c in cols]
        lines.append("\t".join([*row, "n/a" if k == 0 else f"{fd[k - 1]:.6g}"]))
    return "\n".join(lines) + "\n"


def bold_name(sub: str, config: SynthConfig, run: int) -> str:
    """The name of a run: ``sub-<s>_task-<t>_run-<r>``."""
    return f"sub-{sub}_task-{config.task}_run-{run}"


def write_bold(
    layout: Layout,
    bold: np.ndarray,
    config: SynthConfig,
    func: Path,
    stem: str,
    rng: np.random.Generator,
) -> list[Path]:
    """Write a run's preprocessed BOLD (and a volume's mask) as fMRIPrep names them; returns the files."""
    geom = layout.geometry
    timing = acquisition_timing(config, layout.n_slices)
    meta = {"RepetitionTime": config.tr, **timing.derivative_sidecar()}
    if isinstance(geom, GiftiGeometry):
        paths = geom.write_series(
            bold, lambda h: func / f"{stem}_hemi-{h}_space-{config.space}_bold.func.gii", config.tr
        )
        for h in "LR":
            write_json_atomic(func / f"{stem}_hemi-{h}_space-{config.space}_bold.json", meta)
        return paths
    if isinstance(geom, CiftiGeometry):
        paths = geom.write_series(
            bold, lambda h: func / f"{stem}_space-fsLR_den-91k_bold.dtseries.nii", config.tr
        )
        write_json_atomic(func / f"{stem}_space-fsLR_den-91k_bold.json", meta)
        return paths
    assert isinstance(geom, VolumeGeometry)
    vol = rng.normal(20, 2, (*geom.mask.shape, bold.shape[1])).astype(np.float32)
    vol[geom.mask] = bold
    img = nib.Nifti1Image(vol, geom.affine)
    img.header.set_xyzt_units("mm", "sec")
    img.header.set_zooms((*img.header.get_zooms()[:3], config.tr))
    path = func / f"{stem}_space-T1w_desc-preproc_bold.nii.gz"
    with atomic_path(path) as tmp:
        nib.save(img, tmp)
    mask = nib.Nifti1Image(geom.mask.astype(np.uint8), geom.affine)
    mask.header.set_xyzt_units("mm")
    with atomic_path(func / f"{stem}_space-T1w_desc-brain_mask.nii.gz") as tmp:
        nib.save(mask, tmp)
    write_json_atomic(func / f"{stem}_space-T1w_desc-preproc_bold.json", meta)
    return [path]


def truth_entities(sub: str, config: SynthConfig) -> tuple[str, str]:
    """The entities of a participant's ground-truth files: the space part and the prefix."""
    space = {
        "fsaverage5": "space-fsaverage5",
        "fsLR": "space-fsLR_den-91k",
        "T1w": "space-T1w",
        "fsnative": "space-fsnative",
    }[config.space]
    return f"sub-{sub}_task-{config.task}", space


def truth_path(func: Path, prefix: str, space: str, tail: str) -> Callable[[str | None], Path]:
    """A ``path_for(hemi)`` naming ground-truth files of one label."""

    def path_for(hemi: str | None) -> Path:
        hemi_part = f"hemi-{hemi}_" if hemi else ""
        ext = ".func.gii" if hemi else ".nii.gz"
        return func / f"{prefix}_{hemi_part}{space}_{tail}{ext}"

    return path_for


def write_truth(
    layout: Layout, truth: dict[str, np.ndarray], config: SynthConfig, func: Path, sub: str
) -> list[Path]:
    """Write a participant's ground-truth maps and masks in the BOLD's format; returns the files.

    One file per label (per hemisphere for GIFTI), ``..._model-gauss_desc-<label>_boldmap``, or
    one CIFTI dscalar of every map; the ``desc-truemodel`` map (pRF models beyond the Gaussian
    only) has a JSON sidecar whose ``Levels`` name its codes (CIFTI: the dscalar's sidecar).
    """
    geom = layout.geometry
    prefix, space = truth_entities(sub, config)
    meta = {"Description": "prfmap-synth ground truth"}
    masks = {"mask": layout.prf.astype(np.float32), "noise": layout.noise.astype(np.float32)}
    if isinstance(geom, CiftiGeometry):
        path = func / f"{prefix}_{space}_model-gauss_boldmap.dscalar.nii"
        written = geom.write_maps({**truth, **masks}, lambda h: path, meta)
        if "truemodel" in truth:
            sidecar = {
                "Description": "prfmap-synth ground truth, one map per parameter or mask",
                "MapNames": [*truth, *masks],
                "Parameters": {"truemodel": {"Description": TRUEMODEL_DESCRIPTION}},
                "Levels": MODEL_LEVELS,
            }
            written.append(
                write_json_atomic(path.with_name(path.name.replace(".dscalar.nii", ".json")), sidecar)
            )
        return written
    written: list[Path] = []
    for label, values in truth.items():
        path_for = truth_path(func, prefix, space, f"model-gauss_desc-{label}_boldmap")
        files = geom.write_maps({label: values}, path_for, meta)
        written += files
        if label == "truemodel":
            sidecar = {"Description": TRUEMODEL_DESCRIPTION, "Levels": MODEL_LEVELS}
            for image in files:
                stem = image.name.removesuffix(".func.gii").removesuffix(".nii.gz")
                written.append(write_json_atomic(image.with_name(f"{stem}.json"), sidecar))
    for key, desc in TRUTH_MASKS.items():
        written += geom.write_maps({key: masks[key]}, truth_path(func, prefix, space, f"desc-{desc}_mask"))
    return written


def write_cf_truth(
    layout: Layout,
    maps: dict[str, np.ndarray],
    masks: dict[str, np.ndarray],
    config: SynthConfig,
    func: Path,
    sub: str,
) -> list[Path]:
    """Write a participant's connective-field ground truth; returns the files.

    Per label and hemisphere ``..._model-cf_desc-<label>_boldmap.func.gii`` with a JSON sidecar
    (``Description``, ``Units``, the source area and atlas), and the masks
    ``..._desc-<label>_mask.func.gii`` (:data:`CF_TRUTH_MASKS`).
    """
    geom = layout.geometry
    prefix, space = truth_entities(sub, config)
    written: list[Path] = []
    for label, values in maps.items():
        description, units = CF_TRUTH_META[label]
        files = geom.write_maps(
            {label: values},
            truth_path(func, prefix, space, f"model-cf_desc-{label}_boldmap"),
            {"Description": "prfmap-synth ground truth"},
        )
        sidecar = {
            "Description": f"prfmap-synth ground truth: {description}",
            "Units": units,
            "SourceArea": config.cf_source,
            "TargetAreas": list(config.cf_targets),
            "Atlas": CF_ATLAS,
        }
        for image in files:
            json_path = image.with_name(image.name.replace(".func.gii", ".json"))
            written += [image, write_json_atomic(json_path, sidecar)]
    for label, values in masks.items():
        written += geom.write_maps({label: values}, truth_path(func, prefix, space, f"desc-{label}_mask"))
    return written


def truth_description(config: SynthConfig) -> dict[str, Any]:
    """``truth.json``: the settings, units and forward model of the ground truth."""
    settings = asdict(config)
    if not config.beyond_gauss:  # the Gaussian-only data stay as they were before prf_models
        settings = {k: v for k, v in settings.items() if k not in MODEL_FIELDS}
    if not config.bar_widths:  # one sweep sequence of the default width: as before bar_widths
        del settings["bar_widths"]
    if config.stimulus_design == "bars":  # the default design: as before stimulus_design
        del settings["stimulus_design"]
    if config.sweep_order == "same":  # every run the first's apertures: as before sweep_order
        del settings["sweep_order"]
    if not config.connective:  # no connective fields: as before cf_source
        settings = {k: v for k, v in settings.items() if k not in CF_FIELDS}
    out = {
        "Settings": settings,
        "Model": "gauss",
        "Units": {
            "x": "deg",
            "y": "deg",
            "sigma": "deg",
            "amplitude": "percent",
            "baseline": "percent",
            "polarangle": "deg",
            "eccentricity": "deg",
            "hrfdelay": "s",
            "hrfdispersion": "1",
            "sampletime": "s",
        },
        "ForwardModel": (
            "bold = S0 * (1 + (response + drift + noise) / 100); response = amplitude * "
            "(HRF * overlap)(t), the HRF integrated over each TR and read at the unit's sample "
            "time (sampletime: its slice's acquisition time, or the slice-timing correction's "
            "StartTime); overlap = fraction of the Gaussian's volume inside the aperture; HRF = "
            "SPM two-gamma of unit integral with peak delay hrfdelay (undershoot delay moved "
            "alike) and peak dispersion hrfdispersion; amplitude and baseline stored relative to "
            "the noise-free run mean; noise units (desc-noise_mask) carry drift and noise only"
        ),
        "NoiseModel": config.noise_model,
        "NoiseAR1": AR1,
        "PolarAngleConvention": "atan2(y, x), 0 = right horizontal meridian, counter-clockwise",
    }
    if config.bar_widths or config.stimulus_design != "bars":
        out["BarWidthsDeg"] = list(config.sweep_widths)
        out["BarSweeps"] = (
            "the eight-sweep sequence (blank periods included) repeated once per width of "
            "BarWidthsDeg, in that order, each repetition with bars of that width"
        )
    if config.stimulus_design == "hcp":
        out["WedgeRing"] = (
            f"before the bar sweeps: a {WEDGE_DEG:g} degree wedge turning counter-clockwise from the "
            f"right horizontal meridian, {CYCLES} cycles of {2 * config.steps_per_sweep} frames, a "
            f"blank period, a ring of {config.fov_deg / 8:g} degrees expanding from fixation to the "
            f"edge, {CYCLES} cycles of {2 * config.steps_per_sweep} frames, a blank period"
        )
    if config.beyond_gauss:
        out.update(model_description(config))
        out["Units"].update(
            {"truemodel": "1", "n": "1", "sigmasurround": "deg", "amplitudesurround": "percent"}
        )
    if config.connective:
        out["ConnectiveFields"] = cf_description(config)
        out["Units"].update({label: CF_TRUTH_META[label][1] for label in CF_TRUTH_LABELS})
    return out


def model_description(config: SynthConfig) -> dict[str, Any]:
    """What ``truth.json`` says about pRF models beyond the Gaussian (``SynthConfig.prf_models``)."""
    n_lo, n_hi = config.css_exponent
    s_lo, s_hi = config.dog_surround_scale
    r_lo, r_hi = config.dog_surround_ratio
    ranges = {
        "gauss": {},
        "css": {"n": {"Distribution": "uniform", "Range": [n_lo, n_hi]}},
        "dog": {
            "sigmasurround": {"Distribution": "sigma times uniform", "ScaleRange": [s_lo, s_hi]},
            "surroundratio": {
                "Distribution": "uniform",
                "Range": [r_lo, r_hi],
                "Description": "surround integral over centre integral (amplitudesurround / amplitude)",
            },
        },
    }
    return {
        "PrfModels": list(config.prf_models),
        "PrfModelAssignment": (
            "each pRF unit follows one of PrfModels drawn uniformly at random (its code in "
            "desc-truemodel; Levels); the truth maps keep the model-gauss entity in their names"
        ),
        "Levels": MODEL_LEVELS,
        "PrfModelParameters": {m: ranges[m] for m in config.prf_models},
        "PrfModelDefinitions": {
            "gauss": "overlap = g(sigma)",
            "css": "overlap = g(sigma) ** n (compressive spatial summation, Kay et al. 2013)",
            "dog": (
                "overlap = g(sigma) - surroundratio * g(sigmasurround) (difference of Gaussians, "
                "Zuiderbaan et al. 2012); amplitudesurround = surroundratio * amplitude"
            ),
            "g(s)": "fraction of a unit-integral isotropic Gaussian of size s at (x, y) inside the aperture",
        },
    }


def truth_maps(layout: Layout, response: np.ndarray, config: SynthConfig) -> dict[str, np.ndarray]:
    """The ground-truth maps of a participant, by file label."""
    p = layout.params
    scale = 1.0 / (1.0 + response.mean(axis=1) / 100)
    timing = acquisition_timing(config, layout.n_slices)
    signal = ~layout.empty
    truth = {
        "x": p["x"],
        "y": p["y"],
        "sigma": p["sigma"],
        "amplitude": p["amplitude"] * scale,
        "baseline": np.where(layout.prf, 100 * (scale - 1), np.nan),
        "polarangle": np.degrees(np.arctan2(p["y"], p["x"])),
        "eccentricity": np.hypot(p["x"], p["y"]),
        "hrfdelay": p["hrf_delay"],
        "hrfdispersion": p["hrf_dispersion"],
        "sampletime": np.where(signal, timing.sample_times(layout.slices), np.nan),
    }
    if config.beyond_gauss:
        truth.update(
            {
                "truemodel": p["model"],
                "n": p["n"],
                "sigmasurround": p["sigma_surround"],
                "amplitudesurround": p["surround_ratio"] * truth["amplitude"],
            }
        )
    return {k: np.asarray(v, dtype=np.float32) for k, v in truth.items()}


def deriv_description(name: str, description: str, root: Path) -> dict:
    """The dataset_description.json of a derivatives folder, linked to the raw dataset."""
    return {
        "Name": name,
        "BIDSVersion": "1.9.0",
        "DatasetType": "derivative",
        "GeneratedBy": [{"Name": "prfmap-synth", "Version": __version__, "Description": description}],
        "SourceDatasets": [{"URL": "bids:raw:"}],
        "DatasetLinks": {"raw": "../.."},
    }


def write_raw_top(root: Path, config: SynthConfig, design: np.ndarray) -> None:
    """Write the raw dataset's top files: description, participants, README, stimulus, task sidecar.

    Resting-state datasets (``config.rest``) get no stimulus and no events sidecar.
    """
    write_json_atomic(
        root / "dataset_description.json",
        {
            "Name": "prfmap synthetic retinotopy dataset",
            "BIDSVersion": "1.9.0",
            "DatasetType": "raw",
            "GeneratedBy": [{"Name": "prfmap-synth", "Version": __version__}],
            "License": "CC0",
        },
    )
    rows = ["participant_id\tage\tsex"] + [f"sub-{s:02d}\tn/a\tn/a" for s in range(1, config.subjects + 1)]
    write_text_atomic(root / "participants.tsv", "\n".join(rows) + "\n")
    if config.rest:
        write_text_atomic(
            root / "README",
            (
                f"Synthetic resting-state dataset written by prfmap-synth: connective fields from "
                f"{config.cf_source} to {', '.join(config.cf_targets)}, preprocessed BOLD in "
                "derivatives/fmriprep (synthetic, not made by fMRIPrep) and the ground truth in "
                "derivatives/prfsynth.\n"
            ),
        )
        return
    write_text_atomic(
        root / "README",
        (
            f"Synthetic pRF mapping dataset written by prfmap-synth. {DESIGN_TEXT[config.stimulus_design]}"
            f" (stimuli/{config.stimulus_name}.nii.gz), preprocessed BOLD in derivatives/fmriprep "
            "(synthetic, not made by fMRIPrep) and the ground truth in derivatives/prfsynth.\n"
        ),
    )
    write_stimulus(root, config, config.stimulus_name, design)
    write_json_atomic(
        root / f"task-{config.task}_events.json",
        {
            "stim_file": {"Description": "Aperture file under stimuli/ shown during the run"},
        },
    )


def write_stimulus(root: Path, config: SynthConfig, name: str, design: np.ndarray) -> None:
    """Write ``stimuli/<name>.nii.gz`` (the apertures ``design``) and its sidecar."""
    stim = np.moveaxis(design, 0, -1)[:, :, None, :].astype(np.uint8)
    img = nib.Nifti1Image(stim, np.eye(4))
    with atomic_path(root / "stimuli" / f"{name}.nii.gz") as tmp:
        nib.save(img, tmp)
    order = "" if name == config.stimulus_name else ", the bar sweeps in this run's own order"
    write_json_atomic(
        root / "stimuli" / f"{name}.json",
        {
            "FieldOfViewDeg": config.fov_deg,
            "RepetitionTime": config.tr,
            "Description": (
                f"{DESIGN_TEXT[config.stimulus_design]} apertures{order}: axis 0 rows top to bottom, "
                "axis 1 columns left to right, axis 2 singleton, axis 3 frames (one per TR); 1 = stimulus"
            ),
        },
    )


def write_raw_run(
    func: Path, stem: str, config: SynthConfig, n_frames: int, timing: Timing, run: int
) -> None:
    """Write a raw run's events (none at rest) and sidecar (run ``run``, from 1)."""
    if not config.rest:
        onset = config.dummy_scans * config.tr
        name = config.run_stimulus_name(run)
        write_text_atomic(
            func / f"{stem}_events.tsv",
            "onset\tduration\ttrial_type\tstim_file\n"
            f"{onset:g}\t{n_frames * config.tr:g}\t{config.stimulus_name}\t{name}.nii.gz\n",
        )
    meta: dict[str, Any] = {"RepetitionTime": config.tr, "TaskName": config.task}
    if timing.slice_timing is not None:
        meta["SliceTiming"] = [float(t) for t in timing.slice_timing]
    write_json_atomic(func / f"{stem}_bold.json", meta)


def write_raw_bold(
    path: Path, config: SynthConfig, n_volumes: int, n_slices: int, rng: np.random.Generator
) -> None:
    """A raw BOLD stand-in of a few voxels per slice with the run's volumes and TR.

    prfmap reads the fMRIPrep-like derivatives, but a BIDS dataset has the raw data its sidecars describe.
    """
    shape = (*RAW_BOLD_SHAPE, n_slices)
    data = (1000 + rng.integers(-2, 3, (*shape, n_volumes))).astype(np.int16)
    img = nib.Nifti1Image(data, np.diag([3.0, 3.0, 3.0, 1.0]))
    img.header.set_xyzt_units("mm", "sec")
    img.header.set_zooms((3.0, 3.0, 3.0, config.tr))
    with atomic_path(path) as tmp:
        nib.save(img, tmp)


def write_spatial_references(layout: Layout, fmriprep: Path, sub: str, truth_func: Path) -> None:
    """``SpatialReference`` in the sidecars that need one (spaces that are not standard templates).

    The fsaverage5 sphere for GIFTI; for T1w, a preprocessed T1w image in ``anat/`` (the BOLD's grid) that the
    BOLD, its mask and the ground-truth mask refer to.
    """
    func = fmriprep / f"sub-{sub}" / "func"
    geom = layout.geometry
    if isinstance(geom, GiftiGeometry):
        for sidecar in sorted(func.glob("*_hemi-*_space-fsaverage5_bold.json")):
            hemi = "L" if "_hemi-L_" in sidecar.name else "R"
            add_to_json(sidecar, {"SpatialReference": SPHERE_URI.format(hemi)})
        return
    if not isinstance(geom, VolumeGeometry):
        return  # fsLR is a standard template space
    anat = f"sub-{sub}/anat/sub-{sub}_desc-preproc_T1w.nii.gz"
    t1w = nib.Nifti1Image(np.where(geom.mask, 100.0, 10.0).astype(np.float32), geom.affine)
    t1w.header.set_xyzt_units("mm")
    with atomic_path(fmriprep / anat) as tmp:
        nib.save(t1w, tmp)
    add_to_json(fmriprep / anat.replace(".nii.gz", ".json"), {"SkullStripped": False})
    for sidecar in sorted(func.glob("*_space-T1w_desc-preproc_bold.json")):
        add_to_json(sidecar, {"SpatialReference": f"bids::{anat}", "SkullStripped": False})
    for mask in sorted(func.glob("*_space-T1w_desc-brain_mask.nii.gz")):
        add_to_json(
            mask.with_name(mask.name.replace(".nii.gz", ".json")),
            {"SpatialReference": f"bids::{anat}", "Type": "Brain"},
        )
    add_to_json(
        truth_func.parents[1] / "dataset_description.json",
        {"DatasetLinks": {"raw": "../..", "fmriprep": "../fmriprep"}},
    )
    what = {
        "prf": "voxels with a pRF in the ground truth",
        "noise": "voxels with signal but no pRF (drifts and noise only) in the ground truth",
    }
    for desc, description in what.items():
        for mask in sorted(truth_func.glob(f"*_desc-{desc}_mask.nii.gz")):
            add_to_json(
                mask.with_name(mask.name.replace(".nii.gz", ".json")),
                {"SpatialReference": f"bids:fmriprep:{anat}", "Description": description},
            )
    for sidecar in sorted(truth_func.glob("*_desc-truemodel_boldmap.json")):
        add_to_json(sidecar, {"SpatialReference": f"bids:fmriprep:{anat}"})


def add_to_json(path: Path, content: dict) -> None:
    """Add keys to a JSON file (created when absent)."""
    existing = json.loads(path.read_text()) if path.is_file() else {}
    write_json_atomic(path, {**existing, **content})
