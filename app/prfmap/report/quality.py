"""Per-run data quality: temporal SNR of the BOLD and framewise displacement from fMRIPrep's confounds."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from prfmap.errors import PrfmapError
from prfmap.io.bold import load_bold
from prfmap.report.figures import save

FD_LIMIT_MM = 0.5


@dataclass
class RunQuality:
    """Quality measures of one run, after its dummy scans are dropped.

    Attributes
    ----------
    name : str
        The run (``sub-01_task-bar_run-1``).
    volumes : int
        Volumes kept.
    tsnr : ndarray, optional
        (units,) temporal mean over standard deviation, NaN where the unit has no signal.
    mean : ndarray, optional
        (units,) temporal mean (a background image for volume figures).
    fd : ndarray, optional
        Framewise displacement per kept volume (mm), NaN for the first volume.
    problem : str
        Why a measure is missing, if one is.
    """

    name: str
    volumes: int = 0
    tsnr: np.ndarray | None = None
    mean: np.ndarray | None = None
    fd: np.ndarray | None = None
    problem: str = ""

    def summary(self, good: np.ndarray | None) -> dict[str, Any]:
        """Table row: median tSNR (all units with signal; units in ``good``) and FD summaries."""
        row: dict[str, Any] = {"run": self.name, "volumes": self.volumes}
        if self.tsnr is not None:
            finite = np.isfinite(self.tsnr)
            row["tsnr"] = float(np.median(self.tsnr[finite])) if finite.any() else None
            if good is not None and good.shape == self.tsnr.shape and (good & finite).any():
                row["tsnr_good"] = float(np.median(self.tsnr[good & finite]))
        if self.fd is not None and np.isfinite(self.fd).any():
            fd = self.fd[np.isfinite(self.fd)]
            row.update(
                fd_mean=float(fd.mean()), fd_max=float(fd.max()), fd_over=int(np.sum(fd > FD_LIMIT_MM))
            )
        return row


def temporal_snr(data: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Temporal mean and mean / standard deviation of each unit's time series.

    Parameters
    ----------
    data : ndarray
        (units, volumes) raw BOLD.

    Returns
    -------
    tuple of ndarray
        (units,) means and tSNR; tSNR is NaN where the mean is not positive or the series is
        constant.
    """
    data = np.asarray(data, dtype=np.float64)
    mean = data.mean(axis=1)
    std = data.std(axis=1)
    ok = (mean > 0) & (std > 0) & np.isfinite(mean)
    tsnr = np.full(mean.shape, np.nan)
    tsnr[ok] = mean[ok] / std[ok]
    return mean, tsnr


def framewise_displacement(confounds: Path, dummy_scans: int) -> np.ndarray | None:
    """FMRIPrep's ``framewise_displacement`` column, without the dummy scans (``None`` if absent)."""
    table = pd.read_csv(confounds, sep="\t", na_values=["n/a"])
    if "framewise_displacement" not in table:
        return None
    return table["framewise_displacement"].to_numpy(dtype=np.float64)[dummy_scans:]


def run_quality(run: Any, dummy_scans: int = 0) -> RunQuality:
    """Measure one run's tSNR and framewise displacement.

    Parameters
    ----------
    run : prfmap.io.bids.RunInput
        The run as the workflow found it.
    dummy_scans : int
        Volumes dropped at its start.

    Returns
    -------
    RunQuality
        Missing files or columns leave the measure empty and say why in ``problem``.
    """
    quality = RunQuality(run.name)
    problems = []
    try:
        data, _ = load_bold(run)
        quality.volumes = data.shape[1] - dummy_scans
        quality.mean, quality.tsnr = temporal_snr(data[:, dummy_scans:])
    except PrfmapError as err:
        problems.append(f"tSNR not measured ({err})")
    if run.confounds is None:
        problems.append("no fMRIPrep confounds file, so no framewise displacement")
    else:
        try:
            quality.fd = framewise_displacement(Path(run.confounds), dummy_scans)
        except (OSError, ValueError) as err:
            problems.append(f"confounds not readable ({err})")
        if quality.fd is None and not problems:
            problems.append("the confounds have no framewise_displacement column")
    quality.problem = "; ".join(problems)
    return quality


def fd_figure(runs: list[RunQuality], tr: float | None, path: Path) -> Path | None:
    """Framewise displacement of every run over time, with the 0.5 mm line.

    Parameters
    ----------
    runs : list of RunQuality
        The runs; those without FD are left out.
    tr : float, optional
        Repetition time (the axis is in volumes without it).
    path : Path
        Output PNG.

    Returns
    -------
    Path or None
        ``path``, or ``None`` when no run has FD.
    """
    with_fd = [r for r in runs if r.fd is not None]
    if not with_fd:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 2.4), layout="constrained")
    for run in with_fd:
        t = np.arange(run.fd.size) * (tr or 1.0)
        ax.plot(t, run.fd, lw=0.9, label=run.name)
    ax.axhline(FD_LIMIT_MM, color="crimson", ls="--", lw=0.8, label=f"{FD_LIMIT_MM} mm")
    ax.set_xlabel("time (s)" if tr else "volume")
    ax.set_ylabel("framewise displacement (mm)")
    ax.legend(fontsize=7, loc="upper right")
    description = "framewise displacement (mm) against time (s) for each run, fMRIPrep confounds"
    return save(fig, path, {"Title": "framewise displacement (mm)", "Description": description})
