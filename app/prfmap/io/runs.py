"""One preprocessed BOLD run to fit, as the BIDS query finds it and the readers load it."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from prfmap.io.naming import bids_name
from prfmap.io.timing import SliceTimeReference

Kind = Literal["gifti", "cifti", "volume"]


@dataclass(frozen=True)
class RunInput:
    """One preprocessed BOLD run and everything needed to fit it.

    Attributes
    ----------
    subject, session, task : str, str or None, str
        BIDS labels (without ``sub-``/``ses-``/``task-``).
    run : int or None
        Run index.
    space : str
        Space as in the file name (``fsaverage5``, ``fsLR``, ``T1w``, ``MNI152NLin2009cAsym``).
    den : str or None
        Density entity (``32k``, ``91k``), if any.
    kind : {"gifti", "cifti", "volume"}
        File format family.
    bold : dict or pathlib.Path
        GIFTI: ``{"L": path, "R": path}``; otherwise one path.
    mask : pathlib.Path or None
        Brain mask of a volume run (``desc-brain_mask``).
    tr : float
        Repetition time in seconds.
    events : pathlib.Path or None
        The raw dataset's ``events.tsv``.
    confounds : pathlib.Path or None
        fMRIPrep's ``desc-confounds_timeseries.tsv``.
    stim_file : pathlib.Path or None
        The aperture file named by the events (under ``bids_dir/stimuli``), or the override.
    entities : dict
        pybids entities of the BOLD file as strings (``subject``, ``session``, ``task``,
        ``acquisition``, ``run`` (zero padding kept), ``space``, ``res``, ``den``, ...), without
        ``hemi``, ``desc``, ``suffix``, ``extension`` — what output names are built from.
    stim_file_index : tuple of int or None
        0-based frame of ``stim_file`` shown in each volume, when the events give one row per
        volume with a ``stim_file_index`` column (already converted from 1-based if needed).
    slice_time : SliceTimeReference or None
        Where within each TR the volumes sample the signal, from the sidecars
        (:func:`prfmap.io.timing.slice_time_reference`); None when not read.
    """

    subject: str
    session: str | None
    task: str
    run: int | None
    space: str
    den: str | None
    kind: Kind
    bold: dict[str, Path] | Path
    mask: Path | None
    tr: float
    events: Path | None
    confounds: Path | None
    stim_file: Path | None
    entities: dict[str, str] = field(default_factory=dict)
    stim_file_index: tuple[int, ...] | None = None
    slice_time: SliceTimeReference | None = None

    @property
    def name(self) -> str:
        """A readable run name, e.g. ``sub-01_ses-a_task-prf_run-1``."""
        return bids_name(
            {
                "sub": self.subject,
                "ses": self.session,
                "task": self.task,
                "acq": self.entities.get("acquisition"),
                "run": self.entities.get("run"),
            }
        )

    @property
    def stimulus_key(self) -> str:
        """Runs with equal keys saw the same stimulus (file and frame order) and are averaged."""
        key = str(self.stim_file)
        if self.stim_file_index is not None:
            key += ":" + ",".join(map(str, self.stim_file_index))
        return key

    def aperture_label(self, frames: int | None = None) -> str:
        """What messages call the run's aperture: its file name, and how the events index it.

        Parameters
        ----------
        frames : int, optional
            The file's own frame count, to tell it from the frames the index selects.

        Returns
        -------
        str
            E.g. ``bars.nii.gz (148 frames) through the 101 stim_file_index rows of ..._events.tsv``.
        """
        name = Path(self.stim_file).name if self.stim_file is not None else "(no aperture)"
        if self.stim_file_index is None:
            return name
        own = f" ({frames} frames)" if frames is not None else ""
        events = f" of {self.events.name}" if self.events is not None else ""
        return f"{name}{own} through the {len(self.stim_file_index)} stim_file_index rows{events}"

    @property
    def bold_files(self) -> list[Path]:
        """The BOLD file(s) of the run, L before R for GIFTI."""
        if isinstance(self.bold, dict):
            return [self.bold[h] for h in sorted(self.bold)]
        return [self.bold]
