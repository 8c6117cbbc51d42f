"""prfmap as a brainlife.io App: ``config.json`` → prfmap's command line → brainlife's outputs.

brainlife runs the App's ``main`` in a task folder holding ``config.json`` (the user's settings, the
paths of the input datasets and their ``_inputs`` metadata) and keeps the folders named after the
App's outputs. This script, run by ``main`` inside the prfmap image (or with a local prfmap):

1. reads ``config.json`` and turns it into one ``prfmap <bids> prfmap participant ...`` command
   (``bids``: a BIDS raw dataset, brainlife's ``neuro/bids``; ``fmriprep``: its fMRIPrep
   derivatives, default ``<bids>/derivatives/fmriprep``; the participant label from the config or
   from the inputs' ``meta.subject``);
2. runs the participant level into ``./prfmap`` (the BIDS-Derivatives dataset, kept whole);
3. lays the maps out as brainlife's ``neuro/prf`` datatype under ``./prf`` (``polarAngle``,
   ``eccentricity``, ``rfWidth``, ``r2``: NIfTI volumes for volume spaces, FreeSurfer curvature
   files ``prf_surfaces/{lh,rh}.<measure>`` for surfaces), copies the HTML report to
   ``./html`` (``raw/html``), writes ``product.json`` (messages, tags, the conventions used) and
   removes its work folder.

Exit status: prfmap's own (BIDS-Apps codes), or 64 for a config.json prfmap cannot run.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import nibabel as nib
import numpy as np
from bids.layout import parse_file_entities
from nibabel.freesurfer.io import write_morph_data

from prfmap.cli.run import main as prfmap_main

USAGE_ERROR = 64
OUTPUT_DIR = "prfmap"
PRF_DIR = "prf"
HTML_DIR = "html"
PRF_MEASURES = {"polarangle": "polarAngle", "eccentricity": "eccentricity", "sigma": "rfWidth", "r2": "r2"}
"""prfmap's map label → the file name of brainlife's ``neuro/prf`` datatype."""
HEMI_PREFIX = {"L": "lh", "R": "rh"}
CIFTI_CORTEX = {"CIFTI_STRUCTURE_CORTEX_LEFT": "lh", "CIFTI_STRUCTURE_CORTEX_RIGHT": "rh"}
POLAR_ANGLE_CONVENTION = (
    "degrees, neuropythy's visual convention: 0 = upper vertical meridian, 90 = right horizontal "
    "meridian, -90 = left horizontal meridian, 180 = lower vertical meridian"
)

OPTIONS: dict[str, tuple[str, str]] = {
    "participant_label": ("--participant-label", "list"),
    "session_label": ("--session-label", "list"),
    "task": ("--task", "list"),
    "space": ("--space", "value"),
    "model": ("--model", "list"),
    "refine": ("--refine", "value"),
    "refine_r2_min": ("--refine-r2-min", "value"),
    "fit_hrf": ("--fit-hrf", "flag"),
    "random_seed": ("--random-seed", "value"),
    "high_pass_hz": ("--high-pass-hz", "value"),
    "bold_scale": ("--bold-scale", "value"),
    "smooth_fwhm": ("--smooth-fwhm", "value"),
    "confounds": ("--confounds", "list"),
    "dummy_scans": ("--dummy-scans", "value"),
    "stimulus_fov_deg": ("--stimulus-fov-deg", "value"),
    "r2_threshold": ("--r2-threshold", "value"),
    "save_predictions": ("--save-predictions", "flag"),
    "no_report": ("--no-report", "flag"),
    "nprocs": ("--nprocs", "value"),
    "mem_gb": ("--mem-gb", "value"),
}
"""config.json key → (prfmap option, kind). Empty strings and nulls leave prfmap's default."""


class ConfigError(ValueError):
    """config.json cannot be turned into a prfmap command (exit 64)."""


def _unset(value: Any) -> bool:
    return value is None or value == "" or value == []


def _words(value: Any) -> list[str]:
    """A list option: a JSON list, or one string of values separated by spaces or commas."""
    if isinstance(value, list):
        return [str(v) for v in value if not _unset(v)]
    return str(value).replace(",", " ").split()


def input_subjects(config: Mapping[str, Any]) -> list[str]:
    """The distinct ``meta.subject`` of brainlife's ``_inputs`` (in order), without ``sub-``."""
    subjects: list[str] = []
    for item in config.get("_inputs") or []:
        subject = (item.get("meta") or {}).get("subject")
        if not _unset(subject):
            label = str(subject).removeprefix("sub-")
            if label not in subjects:
                subjects.append(label)
    return subjects


def prfmap_arguments(config: Mapping[str, Any], task_dir: Path) -> list[str]:
    """Prfmap's arguments (after the program name) for ``config``, run in ``task_dir``.

    Raises
    ------
    ConfigError
        No ``bids`` input, a folder that does not exist, or an unknown config key's value type.
    """
    if _unset(config.get("bids")):
        raise ConfigError("config.json has no 'bids' input (a BIDS raw dataset folder)")
    bids = (task_dir / str(config["bids"])).resolve()
    if not bids.is_dir():
        raise ConfigError(f"the 'bids' input {config['bids']} is not a folder")
    args = [str(bids), str(task_dir / OUTPUT_DIR), "participant"]
    if not _unset(config.get("fmriprep")):
        fmriprep = (task_dir / str(config["fmriprep"])).resolve()
        if not fmriprep.is_dir():
            raise ConfigError(f"the 'fmriprep' input {config['fmriprep']} is not a folder")
        args += ["--derivatives", f"fmriprep={fmriprep}"]
    settings = dict(config)
    if _unset(settings.get("participant_label")):
        settings["participant_label"] = input_subjects(config)
    for key, (flag, kind) in OPTIONS.items():
        value = settings.get(key)
        if _unset(value) or value is False:
            continue
        if kind == "flag":
            if value is not True:
                raise ConfigError(f"config.json '{key}' must be true or false, not {value!r}")
            args.append(flag)
        elif kind == "list":
            args += [flag, *_words(value)]
        else:
            args += [flag, str(value)]
    args += ["--work-dir", str(task_dir / "work")]
    return args


def neuropythy_polar_angle(degrees: np.ndarray) -> np.ndarray:
    """Prfmap's polar angle (atan2(y, x) in degrees) in neuropythy's visual convention."""
    angle = np.mod(270.0 - np.asarray(degrees, dtype=np.float64), 360.0) - 180.0
    return np.where(angle == -180.0, 180.0, angle).astype(np.float32)  # range (-180, 180]


def _measure(label: str, values: np.ndarray) -> np.ndarray:
    values = np.asarray(values, dtype=np.float32)
    return neuropythy_polar_angle(values) if label == "polarangle" else values


def _map_sets(output_dir: Path) -> dict[tuple, dict[str, dict[str | None, Path]]]:
    """Map files grouped by fit.

    ``{(subject, session, task, space, den, res, model): {label: {hemi: path}}}``; the label is each
    sidecar's ``Parameter`` (CIFTI: ``None`` → all labels).
    """
    sets: dict[tuple, dict[str, dict[str | None, Path]]] = {}
    for sidecar in sorted(output_dir.glob("sub-*/**/func/*_boldmap.json")):
        if "_stat-" in sidecar.name:  # a statistic's maps (written by earlier versions with their own)
            continue
        meta = json.loads(sidecar.read_text())
        if meta.get("Model") == "best":  # a comparison of models: winners, not a pRF fit
            continue
        stem = sidecar.name[: -len(".json")]
        data = next((p for p in sidecar.parent.glob(stem + ".*") if p.suffix != ".json"), None)
        if data is None:
            continue
        ents = parse_file_entities(str(data))
        key = tuple(ents.get(e) for e in ("subject", "session", "task", "space", "den", "res"))
        key += (meta.get("Model"),)
        label = meta.get("Parameter") or "*"
        sets.setdefault(key, {}).setdefault(label, {})[ents.get("hemi")] = data
    return sets


def write_prf_datatype(maps: Mapping[str, Mapping[str | None, Path]], prf_dir: Path) -> list[str]:
    """Write one fit's maps as brainlife's ``neuro/prf``; returns the files written (relative)."""
    written: list[str] = []
    surfaces = prf_dir / "prf_surfaces"
    if "*" in maps:  # CIFTI: one dscalar with every map; cortex split into hemispheres
        (path,) = maps["*"].values()
        img = nib.load(path)
        labels = list(img.header.get_axis(0).name)
        models = img.header.get_axis(1)
        data = np.asarray(img.get_fdata(dtype=np.float32))
        surfaces.mkdir(parents=True, exist_ok=True)
        for structure, slc, model in models.iter_structures():
            hemi = CIFTI_CORTEX.get(structure)
            if hemi is None:
                continue
            for label, name in PRF_MEASURES.items():
                full = np.full(model.nvertices[structure], np.nan, np.float32)
                full[model.vertex] = _measure(label, data[labels.index(label), slc])
                write_morph_data(str(surfaces / f"{hemi}.{name}"), full)
                written.append(f"prf_surfaces/{hemi}.{name}")
        return written
    for label, name in PRF_MEASURES.items():
        for hemi, path in sorted(maps.get(label, {}).items(), key=lambda kv: str(kv[0])):
            img = nib.load(path)
            if hemi is None:  # a volume
                values = _measure(label, np.asarray(img.get_fdata(dtype=np.float32)))
                out = nib.Nifti1Image(values, img.affine, img.header)
                prf_dir.mkdir(parents=True, exist_ok=True)
                nib.save(out, prf_dir / f"{name}.nii.gz")
                written.append(f"{name}.nii.gz")
            else:
                surfaces.mkdir(parents=True, exist_ok=True)
                values = _measure(label, img.darrays[0].data)
                write_morph_data(str(surfaces / f"{HEMI_PREFIX[hemi]}.{name}"), values)
                written.append(f"prf_surfaces/{HEMI_PREFIX[hemi]}.{name}")
    return written


def copy_reports(output_dir: Path, html_dir: Path) -> list[str]:
    """Copy each ``sub-<label>.html`` and its figures to ``html_dir`` (brainlife's raw/html)."""
    copied = []
    for page in sorted(output_dir.glob("sub-*.html")):
        html_dir.mkdir(parents=True, exist_ok=True)
        shutil.copy2(page, html_dir / page.name)
        figures = output_dir / page.stem / "figures"
        if figures.is_dir():
            shutil.copytree(figures, html_dir / page.stem / "figures", dirs_exist_ok=True)
        copied.append(page.name)
    if len(copied) == 1:
        shutil.copy2(html_dir / copied[0], html_dir / "index.html")
    return copied


def brainlife_outputs(task_dir: Path) -> dict[str, Any]:
    """Lay prfmap's outputs out for brainlife; returns the content of ``product.json``."""
    output_dir = task_dir / OUTPUT_DIR
    messages: list[dict[str, str]] = []
    product: dict[str, Any] = {"brainlife": messages}
    sets = _map_sets(output_dir)
    if not sets:
        messages.append({"type": "error", "msg": f"prfmap wrote no maps under {OUTPUT_DIR}/"})
        return product
    first, *others = sorted(sets, key=lambda k: tuple(str(x) for x in k))
    subject, session, task, space, den, res, model = first
    files = write_prf_datatype(sets[first], task_dir / PRF_DIR)
    tags = [f"space-{space}", f"model-{model}", f"task-{task}"]
    product[PRF_DIR] = {
        "meta": {
            "subject": subject,
            "session": session,
            "task": task,
            "space": space,
            "den": den,
            "res": res,
            "model": model,
            "files": files,
            "PolarAngleConvention": POLAR_ANGLE_CONVENTION,
            "Units": {
                "polarAngle": "deg",
                "eccentricity": "deg",
                "rfWidth": "deg",
                "r2": "fraction of variance",
            },
        },
        "tags": tags,
        "datatype_tags": ["prfmap"],
    }
    messages.append(
        {
            "type": "success",
            "msg": (
                f"prfmap fitted sub-{subject} task-{task} space-{space} model-{model}; "
                f"{len(files)} files in {PRF_DIR}/"
            ),
        }
    )
    for key in others:
        messages.append(
            {
                "type": "warning",
                "msg": (
                    f"also fitted: sub-{key[0]} ses-{key[1]} task-{key[2]} space-{key[3]}; its maps are in "
                    f"{OUTPUT_DIR}/ only ({PRF_DIR}/ holds one fit)"
                ),
            }
        )
    if copy_reports(output_dir, task_dir / HTML_DIR):
        messages.append({"type": "info", "msg": f"the prfmap report is in {HTML_DIR}/"})
    return product


def main(argv: Sequence[str] | None = None) -> int:
    """Run the App in the current folder: ``prfmap_brainlife.py [config.json]``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    config_path = Path(argv[0] if argv else "config.json").absolute()
    task_dir = config_path.parent
    try:
        config = json.loads(config_path.read_text())
        if not isinstance(config, dict):
            raise ConfigError(f"{config_path} must hold a JSON object")
        args = prfmap_arguments(config, task_dir)
    except (OSError, json.JSONDecodeError, ConfigError) as err:
        sys.stderr.write(f"prfmap-brainlife: error: {' '.join(str(err).split())}\n")
        return USAGE_ERROR
    print("prfmap " + " ".join(args), flush=True)
    code = prfmap_main(args)
    if code != 0:
        return code
    product = brainlife_outputs(task_dir)
    shutil.rmtree(task_dir / "work", ignore_errors=True)
    (task_dir / "product.json").write_text(json.dumps(product, indent=2) + "\n")
    errors = [m["msg"] for m in product["brainlife"] if m["type"] == "error"]
    if errors:
        sys.stderr.write(f"prfmap-brainlife: error: {errors[0]}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
