"""The statistics that combine participants' maps vertex by vertex."""

from __future__ import annotations

import logging

import numpy as np
from scipy.stats import circmean

from prfmap.engine import catalog
from prfmap.errors import BadDataError
from prfmap.group.maps import ParticipantMaps

logger = logging.getLogger(__name__)

STATISTICS = {
    "polarangle": ("circmean", "deg", "circular mean of the polar angle"),
    "eccentricity": ("median", "deg", "median eccentricity"),
    "sigma": ("median", "deg", "median pRF size (sigma)"),
    "r2": ("mean", "1", "mean variance explained over all participants with a finite r2"),
}
COUNT_DESCRIPTION = (
    "participants contributing at the vertex: finite maps, {on} >= threshold and an estimate not "
    "flagged doubtful in the status map (bits 4, 8, 16, 64) (a participant with several sessions "
    "is first combined over them with the same statistics)"
)
THRESHOLD_MAPS = ("r2", "cvr2")
"""What the group level may threshold on: r2 (the fitted data) or cvr2 (held-out runs)."""
CVR2_STATISTIC = (
    "mean",
    "1",
    "mean cross-validated variance explained over all participants with a finite cvr2",
)


def combine(
    stacks: dict[str, np.ndarray], r2_threshold: float, threshold_on: str = "r2"
) -> dict[str, np.ndarray]:
    """Combine (participants, vertices) maps into group maps.

    Parameters
    ----------
    stacks : dict of str to ndarray
        ``polarangle``, ``eccentricity``, ``sigma`` and ``r2`` (and ``cvr2`` to threshold on
        it), each (participants, vertices).
    r2_threshold : float
        A participant contributes at a vertex when its ``threshold_on`` map there is at least
        this, its polar angle, eccentricity and sigma are finite and, with a ``status`` stack, its
        estimate there is not doubtful (no bit of ``catalog.DOUBTFUL``).
    threshold_on : {"r2", "cvr2"}
        The variance explained the threshold applies to; with ``cvr2`` its mean is returned too.

    Returns
    -------
    dict of str to ndarray
        ``polarangle`` (``scipy.stats.circmean``, degrees in (−180, 180]), ``eccentricity`` and ``sigma``
        (medians), ``r2`` (mean over participants with a finite r², thresholded or not) and
        ``count`` (contributing participants); NaN where nobody contributes.
    """
    on = stacks[threshold_on]
    ok = np.isfinite(on) & (on >= r2_threshold)
    if "status" in stacks:  # doubtful estimates (catalog.DOUBTFUL) do not contribute
        ok &= ~catalog.doubtful(stacks["status"])
    for label in ("polarangle", "eccentricity", "sigma"):
        ok &= np.isfinite(stacks[label])
    count = ok.sum(axis=0)
    some = count > 0
    polar = np.full(count.shape, np.nan)
    polar[some] = circmean(
        np.where(ok, stacks["polarangle"], np.nan)[:, some], high=180.0, low=-180.0, axis=0, nan_policy="omit"
    )
    out = {"polarangle": np.where(polar == -180.0, 180.0, polar)}  # range (−180, 180]
    for label in ("eccentricity", "sigma"):
        masked = np.where(ok, stacks[label], np.nan)
        med = np.full(masked.shape[1], np.nan)
        med[some] = np.nanmedian(masked[:, some], axis=0)
        out[label] = med
    for label in ("r2", "cvr2") if threshold_on == "cvr2" else ("r2",):
        finite = np.isfinite(stacks[label])
        n_finite = finite.sum(axis=0)
        total = np.where(finite, stacks[label], 0.0).sum(axis=0)
        out[label] = np.where(n_finite > 0, total / np.maximum(n_finite, 1), np.nan)
    out["count"] = count.astype(np.float64)
    return out


def statistics_for(threshold_on: str) -> dict[str, tuple[str, str, str]]:
    """The group maps written: :data:`STATISTICS`, and the mean cvr2 when thresholding on it.

    Parameters
    ----------
    threshold_on : {"r2", "cvr2"}
        The map thresholded.

    Returns
    -------
    dict
        Label → (statistic, units, description).
    """
    return {**STATISTICS, "cvr2": CVR2_STATISTIC} if threshold_on == "cvr2" else dict(STATISTICS)


def stack(sets: list[ParticipantMaps], label: str, hemi: str) -> np.ndarray:
    """Every participant's (hemisphere's) map of a label as rows, NaN where a participant lacks it.

    Parameters
    ----------
    sets : list of ParticipantMaps
        The participants' maps.
    label : str
        A map label.
    hemi : str
        ``L`` or ``R``.

    Returns
    -------
    ndarray, shape (participants, vertices)
    """
    arrays = []
    for s in sets:
        values = s.maps.get(label, {}).get(hemi)
        if values is None and label == "cvr2":
            raise BadDataError(
                f"sub-{s.key.subject} has no cvr2 map in {s.fit} (it needs two or more runs and "
                "no --no-cvr2 at the participant level); threshold on r2 (--threshold-on r2)"
            )
        if values is None:
            raise BadDataError(
                f"sub-{s.key.subject} has no {label} map for hemisphere {hemi} in "
                f"{s.fit}; re-run its participant level"
            )
        arrays.append(values)
    sizes = {a.size for a in arrays}
    if len(sizes) != 1:
        listing = ", ".join(f"sub-{s.key.subject}: {a.size}" for s, a in zip(sets, arrays, strict=True))
        raise BadDataError(f"hemisphere {hemi} vertex counts differ in {sets[0].fit} ({listing})")
    return np.stack(arrays)


def per_subject(
    stacks: dict[str, np.ndarray],
    members: list[ParticipantMaps],
    r2_threshold: float,
    threshold_on: str = "r2",
) -> dict[str, np.ndarray]:
    """Combine the sessions of each participant first, so each counts once.

    Parameters
    ----------
    stacks : dict
        Label → (sets, vertices) rows, one per participant and session.
    members : list of ParticipantMaps
        Whose rows they are.
    r2_threshold : float
        The threshold.
    threshold_on : {"r2", "cvr2"}
        The map thresholded.

    Returns
    -------
    dict
        Label → (participants, vertices).
    """
    subjects = [m.key.subject for m in members]
    if len(set(subjects)) == len(subjects):
        return stacks
    labels = statistics_for(threshold_on)
    rows: dict[str, list[np.ndarray]] = {label: [] for label in labels}
    for subject in dict.fromkeys(subjects):
        idx = [i for i, s in enumerate(subjects) if s == subject]
        combined = combine({k: v[idx] for k, v in stacks.items()}, r2_threshold, threshold_on)
        for label in labels:
            rows[label].append(combined[label])
    return {label: np.stack(values) for label, values in rows.items()}
