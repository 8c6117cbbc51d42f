"""The datasets a run reads, checked before any query: the BIDS root, the derivatives, the filters.

Each check runs once: the BIDS root and the query options when the configuration is built
(:mod:`prfmap.cli.config`), or when :func:`prfmap.io.bids.find_inputs` is called with raw
arguments (:func:`inputs_config`); the derivatives folders when the query starts
(:func:`prfmap.io.bids.find_runs` calls :func:`check_derivatives`), after the backend was selected.
Nothing here imports pybids, so the command line stays quick to start.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from prfmap.config import InputsConfig
from prfmap.errors import MissingInputError, NotBIDSError, UsageError, one_line, why_missing
from prfmap.io.spaces import parse_space

Derivatives = Mapping[str, Any] | Sequence[Any] | str | os.PathLike | None
FOV_RANGE_DEG = (0.1, 180.0)
"""The plausible full widths of an aperture, in degrees of visual angle: a flat screen subtends less
than 180°, and no pRF mapping stimulus is narrower than a tenth of a degree. A value outside is a
unit or typing error (pixels, a radius in arcmin) that would scale every position and size."""


def check_fov_deg(value: Any, source: str) -> float:
    """A field of view in degrees, checked against :data:`FOV_RANGE_DEG`.

    Parameters
    ----------
    value : Any
        The value as given (a number; strings and booleans are refused).
    source : str
        Where it came from, for the message (``"--stimulus-fov-deg"``, ``"FieldOfViewDeg in
        bars.json"``).

    Returns
    -------
    float
        The field of view, degrees.

    Raises
    ------
    ValueError
        Not a number, or outside the plausible range.
    """
    low, high = FOV_RANGE_DEG
    if isinstance(value, bool) or not isinstance(value, int | float):
        kind = "the string" if isinstance(value, str) else f"a JSON {type(value).__name__}"
        hint = f"; write {value} without quotes" if isinstance(value, str) and _is_number(value) else ""
        raise ValueError(f"{source} is {kind} {value!r}, not a number of degrees{hint}")
    if not low <= value <= high:
        raise ValueError(
            f"{source} is {value:g}°, outside the plausible {low:g}-{high:g}° (the aperture's full "
            "width in degrees of visual angle)"
        )
    return float(value)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def bids_root(path: str | os.PathLike) -> Path:
    """The absolute root of a raw BIDS dataset.

    Parameters
    ----------
    path : path-like
        The dataset's folder (``bids_dir``).

    Returns
    -------
    Path

    Raises
    ------
    NotBIDSError
        ``path`` is missing, not a folder, or has no ``dataset_description.json``.
    """
    root = Path(path).expanduser().absolute()
    if not root.exists():
        raise NotBIDSError(f"bids_dir {root} does not exist; give the root of a BIDS dataset")
    if not root.is_dir():
        raise NotBIDSError(f"bids_dir {root} is not a folder; give the root of a BIDS dataset")
    if not (root / "dataset_description.json").is_file():
        raise NotBIDSError(
            f"{root} is not a BIDS dataset (no dataset_description.json); give the root of a "
            "BIDS dataset as bids_dir"
        )
    return root


def derivative_roots(bids_dir: Path, derivatives: Derivatives = None) -> tuple[tuple[str, Path], ...]:
    """The derivatives datasets to read preprocessed BOLD from, by name (not checked yet).

    Parameters
    ----------
    bids_dir : Path
        The raw dataset's root.
    derivatives : mapping, sequence, path or None
        ``{"fmriprep": path}``, ``[("fmriprep", path)]``, paths (named after their folder), one
        path, or None/empty for ``fmriprep=bids_dir/derivatives/fmriprep``.

    Returns
    -------
    tuple of (str, Path)
        Names and absolute roots; :func:`check_derivatives` checks them.
    """
    if derivatives is None or (isinstance(derivatives, list | tuple | dict) and not derivatives):
        named = [("fmriprep", bids_dir / "derivatives" / "fmriprep")]
    elif isinstance(derivatives, str | os.PathLike):
        named = [(Path(derivatives).name, Path(derivatives))]
    elif isinstance(derivatives, Mapping):
        named = [(str(k), Path(v)) for k, v in derivatives.items()]
    else:
        named = [
            (str(d[0]), Path(d[1])) if isinstance(d, list | tuple) else (Path(d).name, Path(d))
            for d in derivatives
        ]
    return tuple((name, path.expanduser().absolute()) for name, path in named)


def check_derivatives(inputs: InputsConfig) -> None:
    """Check that every derivatives folder exists and is a BIDS-Derivatives dataset.

    Parameters
    ----------
    inputs : InputsConfig
        Its ``derivatives``.

    Raises
    ------
    MissingInputError
        A folder does not exist or has no ``dataset_description.json``.
    """
    default = inputs.bids_dir / "derivatives" / "fmriprep"
    for _, path in inputs.derivatives:
        if not path.is_dir():
            if path == default:
                raise MissingInputError(
                    f"no fMRIPrep derivatives at {default}; run fMRIPrep first or pass "
                    "--derivatives fmriprep=PATH"
                )
            raise MissingInputError(
                f"derivatives folder {path} {why_missing(path, folder=True)}; check --derivatives"
            )
        if not (path / "dataset_description.json").is_file():
            raise MissingInputError(
                f"{path} has no dataset_description.json; point --derivatives at fMRIPrep's output folder"
            )


def read_bids_filter(value: Mapping[str, Any] | str | os.PathLike) -> dict[str, Any]:
    """The entities of a BIDS filter, fMRIPrep-style (``{"bold": {...}}``) or flat.

    Parameters
    ----------
    value : mapping or path-like
        The filter, or a JSON file holding it.

    Returns
    -------
    dict
        Entity → value (None: the entity is absent; ``"*"``: any value).

    Raises
    ------
    ValueError
        The file is missing or not JSON, or the filter is not an object of entities.
    """
    content: Any = value
    if not isinstance(value, Mapping):
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"{value} {why_missing(path)}")
        try:
            content = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"{value} is not valid JSON ({one_line(err)})") from None
        if not isinstance(content, dict):
            raise ValueError(f"{value} must hold a JSON object of BIDS entities")
    entities = content.get("bold", content)
    if not isinstance(entities, Mapping):
        raise ValueError(f"the 'bold' entry of {value} must be an object of entities")
    return dict(entities)


def inputs_config(  # noqa: PLR0913 - its keyword-only options are the command line's
    bids_dir: str | os.PathLike,
    *,
    derivatives: Derivatives = None,
    participant_labels: Iterable[str] | None = None,
    session_labels: Iterable[str] | None = None,
    tasks: Iterable[str] | None = None,
    runs: Iterable[int | str] | None = None,
    space: str | None = None,
    bids_filter: Mapping[str, Any] | str | os.PathLike | None = None,
    stimulus: str | os.PathLike | None = None,
    stimulus_fov_deg: float | None = None,
) -> InputsConfig:
    """Check raw query arguments (as a library caller gives them) and build the inputs section.

    Labels may carry their prefixes (``sub-01``, ``run-2``); see
    :func:`prfmap.io.bids.find_inputs` for the meaning of each argument.

    Parameters
    ----------
    bids_dir : path-like
        The raw dataset.
    derivatives : mapping, sequence or None
        ``[(name, path)]`` as the parser gives them, ``{name: path}``, paths, or None
        (``bids_dir/derivatives/fmriprep``).
    participant_labels, session_labels, tasks : iterable of str, optional
        Labels, with or without their prefixes.
    runs : iterable of int or str, optional
        Run indices.
    space : str, optional
        An fMRIPrep space string (``fsLR:den-32k``).
    bids_filter : mapping or path, optional
        A BIDS filter (``{"bold": {...}}`` or flat) or its JSON file.
    stimulus : path-like, optional
        One aperture file for every run (``--stimulus``).
    stimulus_fov_deg : float, optional
        Its field of view, when its sidecar gives none.

    Returns
    -------
    InputsConfig

    Raises
    ------
    NotBIDSError
        As :func:`bids_root`.
    MissingInputError
        ``stimulus`` does not exist.
    UsageError
        Unknown space or malformed filter.
    """
    root = bids_root(bids_dir)
    if space is not None:
        try:
            space = str(parse_space(space))
        except ValueError as err:
            raise UsageError(f"--space: {one_line(err)}") from None
    entities: dict[str, Any] = {}
    if bids_filter is not None:
        try:
            entities = read_bids_filter(bids_filter)
        except ValueError as err:
            raise UsageError(f"--bids-filter-file: {one_line(err)}") from None
    if stimulus is not None:
        stimulus = Path(stimulus).expanduser().absolute()
        if not stimulus.is_file():
            raise MissingInputError(f"--stimulus {stimulus} {why_missing(stimulus)}")
    return InputsConfig(
        bids_dir=root,
        derivatives=derivative_roots(root, derivatives),
        participant_labels=_labels(participant_labels, "sub-"),
        session_labels=_labels(session_labels, "ses-"),
        tasks=_labels(tasks, "task-"),
        runs=tuple(int(str(r).removeprefix("run-")) for r in runs or ()),
        space=space,
        bids_filter=entities,
        stimulus=stimulus,
        stimulus_fov_deg=stimulus_fov_deg,
    )


def _labels(labels: Iterable[str] | None, prefix: str) -> tuple[str, ...]:
    return tuple(str(label).removeprefix(prefix) for label in labels or ())
