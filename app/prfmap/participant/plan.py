"""Which runs are fitted together (:class:`FitPlan`), and where a participant's fits keep their work.

Runs are grouped per (participant, session, task, space, format); both hemispheres of a surface
space are fitted together.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from prfmap.config import Config
from prfmap.derivatives import (
    OutputKey,
)
from prfmap.io.runs import RunInput


@dataclass(frozen=True)
class FitPlan:
    """Runs fitted together: one participant, session, task and space (both hemispheres).

    Attributes
    ----------
    key : OutputKey
        The entities of every output of the fit.
    runs : tuple of RunInput
        The runs, in the order the query found them.
    """

    key: OutputKey
    runs: tuple[RunInput, ...]

    @property
    def name(self) -> str:
        """The fit's name in logs and checkpoint folders, e.g. ``task-prf_space-T1w_model-gauss``."""
        return self.key.stem().removeprefix(f"sub-{self.key.subject}_")


def replaced_by(keys: Sequence[OutputKey]) -> Callable[[Path], bool]:
    """Which earlier outputs a new set replaces: the files of its fits and the report's figures.

    A file belongs to a fit when the entities of its name (all but hemi, desc and model) are the
    fit's and its model (the ``model`` entity, or the ``desc-<model>prediction`` of a series) is the
    fit's or none (``desc-preproc``); outputs of the participant's other fits (another task, space
    or model) are kept.

    Parameters
    ----------
    keys : sequence of OutputKey
        The fits of the new set.

    Returns
    -------
    callable
        ``replaced(relative_path) -> bool``.
    """
    fits = {_fit_entities(key.stem()) for key in keys}

    def replaced(rel: Path) -> bool:
        entities, model = _fit_entities(rel.name)
        return "figures" in rel.parts or any(
            entities == fit and model in (None, fit_model) for fit, fit_model in fits
        )

    return replaced


def _fit_entities(name: str) -> tuple[frozenset[tuple[str, str]], str | None]:
    """The entities of a file name that identify its fit, and its model."""
    pairs = dict(part.split("-", 1) for part in name.split(".", 1)[0].split("_") if "-" in part)
    desc = pairs.get("desc", "")
    model = pairs.get("model") or (desc.removesuffix("prediction") if desc.endswith("prediction") else None)
    return frozenset((k, v) for k, v in pairs.items() if k not in ("hemi", "param", "desc", "model")), model


def plan_fits(runs: Sequence[RunInput], model: str) -> list[FitPlan]:
    """Group runs by participant, session, task, space and format, in the order found.

    Parameters
    ----------
    runs : sequence of RunInput
        A participant's runs.
    model : str
        The model fitted.

    Returns
    -------
    list of FitPlan
    """
    groups: dict[tuple[OutputKey, str], list[RunInput]] = {}
    for run in runs:
        res = run.entities.get("res")
        key = OutputKey(run.subject, run.session, run.task, run.space, run.den, res, model)
        groups.setdefault((key, run.kind), []).append(run)
    return [FitPlan(key, tuple(members)) for (key, _), members in groups.items()]


def checkpoint_dir(config: Config, subject: str) -> Path:
    """Where a participant's checkpoints live: ``<work dir or output_dir/.prfmap-work>/checkpoints``.

    Parameters
    ----------
    config : Config
        The run's configuration.
    subject : str
        The participant's label.

    Returns
    -------
    Path
    """
    work_dir = config.execution.work_dir
    root = work_dir if work_dir is not None else config.outputs.output_dir / ".prfmap-work"
    return root / "checkpoints" / f"sub-{subject}"


def how_to_resume(config: Config) -> str:
    """The sentence telling a stopped run how to continue.

    Parameters
    ----------
    config : Config
        The run's configuration.

    Returns
    -------
    str
    """
    same = " with the same --work-dir" if config.execution.work_dir is not None else ""
    return f"run the same command again{same} to resume from the saved chunks"
