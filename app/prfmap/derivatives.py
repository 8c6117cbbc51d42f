"""BIDS-Derivatives naming, sidecars and dataset-level files of prfmap's outputs.

Maps carry the model in the ``model`` entity (BEP016's draft, which pybids knows) and the
parameter in ``desc``, with BEP012's ``boldmap`` suffix, e.g.
``sub-01_task-bar_hemi-L_space-fsaverage5_model-gauss_desc-sigma_boldmap.func.gii``: every map has a
distinct name for plain pybids, so no map is handed another map's sidecar. The time series of
``--save-predictions`` are ``desc-<model>prediction_bold`` and ``desc-preproc_bold``.
Every file is written atomically; a participant's whole output set is published as one set by
:mod:`prfmap.io.publish`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from prfmap import __version__
from prfmap.engine import catalog
from prfmap.io.atomic import write_if_absent, write_json_atomic, write_text_atomic
from prfmap.io.geometry import UnitGeometry
from prfmap.io.naming import bids_name
from prfmap.io.references import spatial_reference

MAP_SUFFIX = "boldmap"
BIDS_VERSION = "1.9.0"
BIDSIGNORE_LINES = (
    "*.html",
    "/sub-*/figures",
    "/group",
    "/logs",
    "*_boldmap.*",
    "*_bold.func.gii",
    "*_bold.dtseries.nii",
    "*hemi-*bold.json",
    "*den-*bold.json",
)
"""What the BIDS specification (and so the validator) does not cover yet: the reports and their
figures, the group level, the logs, the maps (``boldmap``), and surface (GIFTI) and CIFTI time
series with their sidecars (as fMRIPrep's own ``.bidsignore``)."""

PYBIDS_CONFIG: dict[str, Any] = {
    "name": "prfmap",
    "entities": [
        {"name": "param", "pattern": r"[_/\\]+desc-([a-zA-Z0-9]+)_boldmap"},
        {"name": "stat", "pattern": r"[_/\\]+stat-([a-zA-Z0-9]+)"},
    ],
}
"""pybids config of ``param`` (a map's ``desc``) and ``stat`` (group maps): pass
``config=["bids", "derivatives", PYBIDS_CONFIG]`` to ``BIDSLayout`` to query maps by parameter
(``layout.get(param="sigma")``); plain pybids reads each map's own sidecar without it."""

POLAR_ANGLE_CONVENTION = (
    "degrees, atan2(y, x): 0 = right horizontal meridian, counter-clockwise positive, range (-180, 180]"
)
VISUAL_FIELD_CONVENTION = (
    "degrees of visual angle, origin at fixation (the aperture centre), x to the right, y up"
)
FIT_STATUS = (
    "units without signal (status bit 1) are NaN in every map; every other estimate is written and "
    "the status map (desc-status) flags the doubtful ones: a sum of the bits in its Levels; the "
    "refinement keeps each parameter inside its Bounds (FitSettings.bounds gives the numbers used)"
)


@dataclass(frozen=True)
class OutputKey:
    """The entities shared by every output file of one fit.

    Attributes
    ----------
    subject, session, task : str or None
        BIDS labels (no prefixes); session may be None.
    space : str
        Space label as fMRIPrep writes it in file names (``fsaverage5``, ``fsLR``, ``T1w``).
    den, res : str or None
        Density (surfaces, CIFTI) or resolution (volumes) labels, when the inputs had them.
    model : str
        ``gauss``, ``css``, ``dog`` or ``dn``.
    """

    subject: str
    session: str | None
    task: str
    space: str
    den: str | None
    res: str | None
    model: str

    def func_dir(self, output_dir: Path) -> Path:
        """Folder of this participant's (and session's) maps under ``output_dir``."""
        parts = [f"sub-{self.subject}"] + ([f"ses-{self.session}"] if self.session else [])
        return Path(output_dir).joinpath(*parts, "func")

    def stem(self, *, hemi: str | None = None, param: str | None = None, desc: str | None = None) -> str:
        """File-name stem (no suffix, no extension) of one output.

        Parameters
        ----------
        hemi : {"L", "R"}, optional
            Hemisphere, for GIFTI outputs.
        param : str, optional
            Parameter label (``sigma``, ``r2``...) of a map: ``model-<model>_desc-<param>``. None
            for CIFTI maps holding every parameter (``model-<model>``).
        desc : str, optional
            Description label of a time series (``gaussprediction``, ``preproc``); the model,
            which BIDS has no entity for on ``bold`` files, goes into the label.
        """
        entities = {
            "sub": self.subject,
            "ses": self.session,
            "task": self.task,
            "hemi": hemi,
            "space": self.space,
            "res": self.res,
            "den": self.den,
        }
        if desc is None:
            entities.update(model=self.model, desc=param)
        else:
            entities["desc"] = desc
        return bids_name(entities)


def _with_reference(
    sidecar: Mapping[str, Any], key: OutputKey, hemi: str | None, reference_dir: Path | None
) -> dict[str, Any]:
    """``sidecar`` with the ``SpatialReference`` of ``key``'s space (when BIDS asks for one)."""
    reference = spatial_reference(
        key.space,
        hemi=hemi,
        den=key.den,
        subject=key.subject,
        session=key.session,
        fmriprep_dir=reference_dir,
    )
    return {**sidecar, "SpatialReference": reference} if reference else dict(sidecar)


def map_sidecar(
    param: str | None, model: str, settings: Mapping[str, Any], provenance: Mapping[str, Any]
) -> dict[str, Any]:
    """JSON sidecar of one parameter map (or of a CIFTI file holding all of them).

    Parameters
    ----------
    param : str or None
        Parameter label; None for a file holding every parameter (CIFTI dscalar).
    model : str
        Model name.
    settings : mapping
        ``FitResult.settings`` (model, refine, HRF, grid, iterations, dtype, backend, versions,
        device).
    provenance : mapping
        Inputs, preprocessing, stimulus, timings and software versions of the fit; merged
        into the sidecar as is.

    Returns
    -------
    dict
        A JSON-able dictionary.
    """
    sidecar: dict[str, Any] = {
        "Model": model,
        "ModelDescription": catalog.MODELS[model].summary if model in catalog.MODELS else model,
    }
    if param is None:
        sidecar["Parameters"] = {
            p: {"Units": entry.units, "Description": entry.description}
            for p in provenance.get("MapNames", [])
            if (entry := catalog.parameter_by_label(p)) is not None
        }
    else:
        entry = catalog.parameter_by_label(param)
        units, description = (entry.units, entry.description) if entry else ("n/a", param)
        sidecar.update({"Parameter": param, "Units": units, "Description": description})
        if entry is not None and entry.bound != catalog.UNBOUNDED:
            sidecar["Bounds"] = entry.bound.describe(entry.key)
        if entry is not None and entry.key == "status":
            sidecar["Levels"] = {
                str(bit): f"{name}: {text}" for bit, (name, text) in catalog.STATUS_FLAGS.items()
            }
    sidecar["FitStatus"] = FIT_STATUS
    sidecar["VisualFieldCoordinates"] = VISUAL_FIELD_CONVENTION
    sidecar["PolarAngleConvention"] = POLAR_ANGLE_CONVENTION
    sidecar["HRF"] = {
        "Description": settings.get("hrf", "SPM canonical two-gamma (nilearn spm_hrf)"),
        **hrf_record(settings.get("hrf_model")),
    }
    sidecar["FitSettings"] = dict(settings)
    sidecar.update({k: v for k, v in provenance.items() if k != "MapNames"})
    return sidecar


def hrf_record(record: Mapping[str, Any] | None) -> dict[str, Any]:
    """The sidecar's account of a fit's HRF (``FitResult.settings["hrf_model"]``) in BIDS-style keys."""
    if not record:
        return {}
    return {
        "Option": record["option"],
        "PeakDelay": record["delay_s"],
        "PeakDispersion": record["dispersion"],
        "TimeToPeak": record["peak_s"],
        "EstimatedFromUnits": record["units"],
    }


def dataset_description(
    source_datasets: list[dict[str, str]] | None = None,
    dataset_links: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The ``dataset_description.json`` of prfmap's derivatives.

    ``dataset_links`` names the datasets that the sidecars' BIDS URIs
    (``bids:<name>:<path>``) refer to.

    Container information comes from the environment the images set: ``PRFMAP_CONTAINER``
    (``docker`` or ``singularity``), ``PRFMAP_CONTAINER_IMAGE`` and ``PRFMAP_CONTAINER_TAG``.
    """
    generated: dict[str, Any] = {
        "Name": "prfmap",
        "Version": __version__,
        "Description": "population receptive field maps fitted with a Keras 3 engine",
        "CodeURL": "https://github.com/prfmap/prfmap",
    }
    container_type = os.environ.get("PRFMAP_CONTAINER")
    if container_type:
        container = {"Type": container_type}
        if os.environ.get("PRFMAP_CONTAINER_IMAGE"):
            container["URI"] = os.environ["PRFMAP_CONTAINER_IMAGE"]
        if os.environ.get("PRFMAP_CONTAINER_TAG"):
            container["Tag"] = os.environ["PRFMAP_CONTAINER_TAG"]
        generated["Container"] = container
    description: dict[str, Any] = {
        "Name": "prfmap: population receptive field maps",
        "BIDSVersion": BIDS_VERSION,
        "DatasetType": "derivative",
        "GeneratedBy": [generated],
        "HowToAcknowledge": "Please cite prfmap and the pRF model you used (see the map sidecars).",
    }
    if source_datasets:
        description["SourceDatasets"] = source_datasets
    if dataset_links:
        description["DatasetLinks"] = dict(dataset_links)
    return description


def write_dataset_files(
    output_dir: Path,
    source_datasets: list[dict[str, str]] | None,
    dataset_links: Mapping[str, str] | None = None,
) -> None:
    """Create ``dataset_description.json`` and ``.bidsignore`` in ``output_dir`` if absent.

    Safe when several participants are processed at once into the same ``output_dir``.
    """
    output_dir = Path(output_dir)
    description = dataset_description(source_datasets, dataset_links)
    text = json.dumps(description, indent=2) + "\n"
    write_if_absent(output_dir / "dataset_description.json", text)
    ensure_lines(output_dir / ".bidsignore", BIDSIGNORE_LINES)


def ensure_lines(path: Path, lines: Sequence[str]) -> None:
    """Create ``path`` with ``lines``, or append those it lacks (an output folder written by an
    older prfmap); concurrent writers compute the same content, each write is atomic."""
    if write_if_absent(path, "\n".join(lines) + "\n"):
        return
    present = path.read_text().splitlines()
    missing = [line for line in lines if line not in present]
    if missing:
        write_text_atomic(path, "\n".join([*present, *missing]) + "\n")


def bids_uri(path: str | Path, links: Mapping[str, Path]) -> str:
    """A BIDS URI ``bids:<name>:<relative path>`` for a file inside a linked dataset.

    The most specific dataset root containing ``path`` wins (``fmriprep`` inside the raw
    dataset's ``derivatives/``); a file outside every linked dataset keeps its path.
    """
    path = Path(path).absolute()
    best: tuple[int, str] | None = None
    for name, root in links.items():
        root = Path(root).absolute()
        if path.is_relative_to(root) and (best is None or len(root.parts) > best[0]):
            best = (len(root.parts), f"bids:{name}:{path.relative_to(root).as_posix()}")
    return best[1] if best else str(path)


def relative_link(root: str | Path, output_dir: str | Path) -> str:
    """A ``DatasetLinks`` value: the linked dataset's root relative to the output dataset
    (``../..`` for ``bids_dir`` from ``bids_dir/derivatives/prfmap``), so the link survives moving
    both together; a ``file://`` URI only where no relative path exists (another drive)."""
    root, output_dir = Path(root).absolute(), Path(output_dir).absolute()
    try:
        return Path(os.path.relpath(root, output_dir)).as_posix()
    except ValueError:
        return root.as_uri()


def source_datasets(links: Mapping[str, Path]) -> list[dict[str, str]]:
    """``SourceDatasets`` of ``dataset_description.json``: a BIDS URI per linked dataset, with the
    version its own description gives (derivatives: ``GeneratedBy[0].Version``)."""
    sources = []
    for name, path in links.items():
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


def sidecar_of(path: Path) -> Path:
    """The JSON sidecar of a data file (``x_boldmap.func.gii`` → ``x_boldmap.json``)."""
    name = path.name
    for ext in (".func.gii", ".dscalar.nii", ".dtseries.nii", ".nii.gz", ".nii"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return path.with_name(name + ".json")


def write_map_files(
    folder: Path,
    key: OutputKey,
    geometry: UnitGeometry,
    maps: Mapping[str, np.ndarray],
    settings: Mapping[str, Any],
    provenance: Mapping[str, Any],
    reference_dir: Path | None = None,
) -> list[Path]:
    """Write a fit's parameter maps and their sidecars into ``folder``.

    GIFTI and NIfTI: one file per parameter (and hemisphere); CIFTI: one ``dscalar`` holding
    every parameter.

    Parameters
    ----------
    folder : Path
        The participant's ``func`` folder (inside the staging folder).
    key : OutputKey
        The entities of the fit.
    geometry : UnitGeometry
        How the units lie in the BOLD's format.
    maps : mapping
        Parameter label → (units,) float32 values.
    settings : mapping
        ``FitResult.settings``.
    provenance : mapping
        Added to every sidecar (:func:`map_sidecar`).
    reference_dir : Path, optional
        The fMRIPrep dataset, where the ``SpatialReference`` of native spaces is looked up.

    Returns
    -------
    list of Path
        The data files and sidecars written.
    """
    folder.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if geometry.kind == "cifti":
        path = folder / f"{key.stem()}_{MAP_SUFFIX}.dscalar.nii"
        written += geometry.write_maps(maps, lambda hemi: path, {"Model": key.model})
        sidecar = map_sidecar(None, key.model, settings, {**provenance, "MapNames": list(maps)})
        sidecar["MapNames"] = list(maps)
        sidecar = _with_reference(sidecar, key, None, reference_dir)
        return written + [write_json_atomic(sidecar_of(path), sidecar)]
    extension = ".func.gii" if geometry.kind == "gifti" else ".nii.gz"
    hemis: dict[Path, str | None] = {}
    for label, values in maps.items():

        def path_for(hemi: str | None, label: str = label) -> Path:
            path = folder / f"{key.stem(hemi=hemi, param=label)}_{MAP_SUFFIX}{extension}"
            hemis[path] = hemi
            return path

        files = geometry.write_maps({label: values}, path_for, {"Model": key.model, "Parameter": label})
        written += files
        sidecar = map_sidecar(label, key.model, settings, provenance)
        written += [
            write_json_atomic(sidecar_of(path), _with_reference(sidecar, key, hemis.get(path), reference_dir))
            for path in files
        ]
    return written


def write_series_files(
    folder: Path,
    key: OutputKey,
    geometry: UnitGeometry,
    series: Mapping[str, tuple[np.ndarray, str]],
    tr: float,
    provenance: Mapping[str, Any],
    reference_dir: Path | None = None,
) -> list[Path]:
    """Write (units, frames) time series (``desc-<label>_bold``) and their sidecars into ``folder``.

    Parameters
    ----------
    series : mapping
        ``desc`` label → (values, description), e.g. ``{"gaussprediction": (predictions,
        "fitted model time series")}``.
    tr : float
        Seconds between frames.

    Other parameters are those of :func:`write_map_files`.

    Returns
    -------
    list of Path
        The data files and sidecars written.
    """
    extension = {"gifti": ".func.gii", "cifti": ".dtseries.nii"}.get(geometry.kind, ".nii.gz")
    written: list[Path] = []
    hemis: dict[Path, str | None] = {}
    for desc, (values, description) in series.items():

        def path_for(hemi: str | None, desc: str = desc) -> Path:
            path = folder / f"{key.stem(hemi=hemi, desc=desc)}_bold{extension}"
            hemis[path] = hemi
            return path

        files = geometry.write_series(np.asarray(values, np.float32), path_for, tr)
        sidecar = {
            "Description": f"{description}, after removing the nuisance subspace (DCT "
            "high-pass, confounds, run means) from data and predictions alike",
            "RepetitionTime": tr,
            "Model": key.model,
            "Units": "percent signal change",
            **provenance,
        }
        if geometry.kind == "volume":  # only the brain mask's voxels are written (NaN elsewhere)
            sidecar["SkullStripped"] = True
        for path in files:
            own = _with_reference(sidecar, key, hemis.get(path), reference_dir)
            written += [path, write_json_atomic(sidecar_of(path), own)]
    return written
