"""The output dataset's own files (``dataset_description.json``, ``.bidsignore``) and its links.

A participant's whole output set is published as one set by :mod:`prfmap.io.publish`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from prfmap import __version__
from prfmap.io.atomic import write_if_absent, write_text_atomic

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
    "*_summary.tsv",
    "*_summary.json",
)
"""What the BIDS specification (and so the validator) does not cover yet: the reports and their
figures, the group level, the logs, the maps (``boldmap``), and surface (GIFTI) and CIFTI time
series with their sidecars (as fMRIPrep's own ``.bidsignore``), and the per-area summary tables."""


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
    """Create ``path`` with ``lines``, or append those it lacks (an output folder written by an older prfmap).

    Concurrent writers compute the same content, each write is atomic.
    """
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
    """A ``DatasetLinks`` value.

    The linked dataset's root relative to the output dataset (``../..`` for ``bids_dir`` from
    ``bids_dir/derivatives/prfmap``), so the link survives moving both together; a ``file://`` URI only where
    no relative path exists (another drive).
    """
    root, output_dir = Path(root).absolute(), Path(output_dir).absolute()
    try:
        return Path(os.path.relpath(root, output_dir)).as_posix()
    except ValueError:
        return root.as_uri()


def source_datasets(links: Mapping[str, Path]) -> list[dict[str, str]]:
    """``SourceDatasets`` of ``dataset_description.json``.

    A BIDS URI per linked dataset, with the version its own description gives (derivatives:
    ``GeneratedBy[0].Version``).
    """
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
