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
DOUBTFUL_TEXT = (
    "an estimate not flagged doubtful in the status map (bits "
    + ", ".join(str(catalog.STATUS_BITS[name]) for name in catalog.DOUBTFUL)
    + ": "
    + ", ".join(catalog.DOUBTFUL)
    + ")"
)
COUNT_DESCRIPTION = (
    "participants contributing at the vertex: finite maps, {on} >= threshold and "
    + DOUBTFUL_TEXT
    + " (a participant with several sessions is first combined over them with the same statistics)"
)
IVW_STAT = "ivwmean"
"""The ``stat`` label of the inverse-variance-weighted group means."""
IVW_COUNT_STAT = "ivwcount"
"""The ``stat`` label of the participants contributing to each inverse-variance-weighted mean."""
IVW_NOT_AVERAGED = ("polarangle", "eccentricity", "r2", "cvr2", "status")
"""Maps not averaged by inverse variance even with a standard error: polar angle is circular, and it
and eccentricity are derived from the weighted centre (``atan2``, ``hypot`` of the weighted x and y)
instead, so that both describe one point; r² and the status are not estimates."""
IVW_DESCRIPTION = (
    "inverse-variance-weighted mean over participants, sum(w * estimate) / sum(w) with w = 1 / se^2 "
    "from each participant's stat-se map, per vertex; a participant contributes where {on} >= "
    "threshold, its polar angle, eccentricity and sigma are finite, " + DOUBTFUL_TEXT + ", and the "
    "estimate and its standard error are finite with se > 0 (the sessions of a participant enter as "
    "separate estimates, and so are combined by inverse variance first). A fixed-effect estimate: it "
    "weighs the most precise participants most and assumes they share the vertex's pRF, which "
    "participants in a template space do only approximately; the median is the robust summary"
)
IVW_DERIVED_DESCRIPTION = {
    "polarangle": (
        "polar angle of the inverse-variance-weighted mean centre: atan2(y, x) of the stat-ivwmean x "
        "and y maps (degrees, (-180, 180]); polar angle itself is circular and is not averaged"
    ),
    "eccentricity": (
        "eccentricity of the inverse-variance-weighted mean centre: hypot(x, y) of the stat-ivwmean x "
        "and y maps (degrees); the participants' eccentricities are not averaged themselves"
    ),
}
IVW_COUNT_DESCRIPTION = (
    "participants contributing to the stat-ivwmean map of the parameter at the vertex: those with a "
    "finite estimate and standard error (se > 0), {on} >= threshold and " + DOUBTFUL_TEXT
)
CVR2_STATISTIC = (
    "mean",
    "1",
    "mean cross-validated variance explained over all participants with a finite cvr2",
)


def contributing(stacks: dict[str, np.ndarray], r2_threshold: float, threshold_on: str = "r2") -> np.ndarray:
    """Where each row (participant or session) contributes to the group maps.

    Parameters
    ----------
    stacks : dict of str to ndarray
        ``polarangle``, ``eccentricity``, ``sigma``, the ``threshold_on`` map and, optionally,
        ``status``, each (rows, vertices).
    r2_threshold : float
        The threshold on ``threshold_on``.
    threshold_on : {"r2", "cvr2"}
        The variance explained thresholded.

    Returns
    -------
    ndarray of bool, shape (rows, vertices)
        The ``threshold_on`` map is at least the threshold, polar angle, eccentricity and sigma are
        finite and, with a ``status`` stack, the estimate is not doubtful (``catalog.doubtful``: no
        bit of ``catalog.DOUBTFUL``, the ``uncertain`` bit included).
    """
    on = stacks[threshold_on]
    ok = np.isfinite(on) & (on >= r2_threshold)
    if "status" in stacks:  # doubtful estimates (catalog.DOUBTFUL) do not contribute
        ok &= ~catalog.doubtful(stacks["status"])
    for label in ("polarangle", "eccentricity", "sigma"):
        ok &= np.isfinite(stacks[label])
    return ok


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
    ok = contributing(stacks, r2_threshold, threshold_on)
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


def ivw_labels(sets: list[ParticipantMaps]) -> list[str]:
    """The parameters averaged by inverse variance: those every map set has with its ``stat-se`` map.

    Parameters
    ----------
    sets : list of ParticipantMaps
        The map sets (participants and sessions) of one fit.

    Returns
    -------
    list of str
        Parameter labels in the catalogue's order (:func:`ordered`), both hemispheres present
        everywhere, without :data:`IVW_NOT_AVERAGED`; empty when some set has no ``stat-se`` map
        (older outputs).
    """
    if not sets:
        return []

    candidates = [
        label for stat, label in sets[0].stat_maps if stat == "se" and label not in IVW_NOT_AVERAGED
    ]
    return ordered([label for label in dict.fromkeys(candidates) if all(has_se(s, label) for s in sets)])


def has_se(maps: ParticipantMaps, label: str) -> bool:
    """Whether a map set has a parameter's map and its ``stat-se`` map in both hemispheres.

    Parameters
    ----------
    maps : ParticipantMaps
        One participant's (and session's) maps.
    label : str
        The parameter.

    Returns
    -------
    bool
    """
    se, values = maps.stat_maps.get(("se", label), {}), maps.maps.get(label, {})
    return all(h in se and h in values for h in ("L", "R"))


def noise_models(sets: list[ParticipantMaps]) -> dict[str, list[str]]:
    """The noise models the map sets' standard errors assume, each with its participants.

    Parameters
    ----------
    sets : list of ParticipantMaps
        The map sets of one fit.

    Returns
    -------
    dict
        Noise model (``ols``, ``ar1``...) → the ``sub-<label>[ ses-<label>]`` of the sets that used it;
        sets whose sidecars do not say are left out.
    """
    out: dict[str, list[str]] = {}
    for s in sets:
        if s.noise_model is not None:
            name = f"sub-{s.key.subject}" + (f" ses-{s.key.session}" if s.key.session else "")
            out.setdefault(s.noise_model, []).append(name)
    return out


def ordered(labels: list[str]) -> list[str]:
    """Parameter labels in the catalogue's order (x, y, sigma, ...), unknown ones last.

    Parameters
    ----------
    labels : list of str
        Parameter labels.

    Returns
    -------
    list of str
    """
    order = [p.label for p in catalog.PARAMETERS.values()]
    return sorted(labels, key=lambda label: (order.index(label) if label in order else len(order), label))


def stack_se(sets: list[ParticipantMaps], label: str, hemi: str) -> np.ndarray:
    """Every map set's ``stat-se`` map of a label and hemisphere as rows.

    Parameters
    ----------
    sets : list of ParticipantMaps
        Map sets that all have it (:func:`ivw_labels`).
    label : str
        A parameter label.
    hemi : str
        ``L`` or ``R``.

    Returns
    -------
    ndarray, shape (sets, vertices)

    Raises
    ------
    BadDataError
        A standard-error map whose vertex count is not its estimate's.
    """
    rows = []
    for s in sets:
        se, values = s.stat_maps[("se", label)][hemi], s.maps[label][hemi]
        if se.size != values.size:
            raise BadDataError(
                f"sub-{s.key.subject}'s stat-se map of {label} (hemisphere {hemi}) has {se.size} "
                f"vertices, its {label} map {values.size}, in {s.fit}; re-run its participant level"
            )
        rows.append(np.asarray(se, dtype=np.float64))
    return np.stack(rows)


def ivw_mean(
    estimates: np.ndarray, se: np.ndarray, ok: np.ndarray, subjects: list[str]
) -> tuple[np.ndarray, np.ndarray]:
    """Inverse-variance-weighted mean of (rows, vertices) estimates, and who contributes.

    Parameters
    ----------
    estimates, se : ndarray, shape (rows, vertices)
        Each row's (a participant's or session's) estimates and their standard errors.
    ok : ndarray of bool, shape (rows, vertices)
        Where a row may contribute (:func:`contributing`).
    subjects : list of str
        The participant of each row: sessions of one participant count once.

    Returns
    -------
    mean : ndarray, shape (vertices,)
        ``sum(w * estimate) / sum(w)`` with ``w = 1 / se**2`` over the rows that contribute (``ok``,
        finite estimate, finite ``se > 0``); NaN where none does.
    count : ndarray, shape (vertices,)
        Participants contributing.
    """
    valid = ok & np.isfinite(estimates) & np.isfinite(se) & (se > 0)
    weights = np.where(valid, 1.0 / np.where(valid, se, 1.0) ** 2, 0.0)
    total = weights.sum(axis=0)
    weighted = (weights * np.where(valid, estimates, 0.0)).sum(axis=0)
    mean = np.where(total > 0, weighted / np.where(total > 0, total, 1.0), np.nan)
    count = np.zeros(estimates.shape[1])
    for subject in dict.fromkeys(subjects):
        rows = [i for i, s in enumerate(subjects) if s == subject]
        count += valid[rows].any(axis=0)
    return mean, count


def _log_impossible(
    se: np.ndarray, used: np.ndarray, sets: list[ParticipantMaps], label: str, hemi: str
) -> None:
    """Warn of the participants whose standard errors of ``label`` are 0 or below where they contribute.

    No fit gives those, so :func:`ivw_mean` leaves the vertices out; the log says whose they are.
    """
    impossible = used & np.isfinite(se) & (se <= 0)
    rows = np.flatnonzero(impossible.any(axis=1))
    if rows.size:
        logger.warning(
            "stat-ivwmean of %s (hemisphere %s): standard errors of 0 or below left out (%s); a fit "
            "never gives them: re-run their participant level",
            label,
            hemi,
            ", ".join(f"sub-{sets[i].key.subject}: {int(impossible[i].sum())} vertices" for i in rows),
        )


def ivw_maps(
    sets: list[ParticipantMaps],
    stacks: dict[str, np.ndarray],
    labels: list[str],
    hemi: str,
    r2_threshold: float,
    threshold_on: str = "r2",
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One hemisphere's inverse-variance-weighted group means.

    Parameters
    ----------
    sets : list of ParticipantMaps
        The map sets (participants and sessions), in the rows' order.
    stacks : dict
        The (rows, vertices) stacks the group maps are combined from (:func:`stack`), ``status``
        included when every set has one.
    labels : list of str
        The parameters to average (:func:`ivw_labels`).
    hemi : str
        ``L`` or ``R``.
    r2_threshold : float
        The threshold.
    threshold_on : {"r2", "cvr2"}
        The map thresholded.

    Returns
    -------
    means : dict
        Label → (vertices,) weighted mean; with ``x`` and ``y``, ``polarangle`` and
        ``eccentricity`` as well: those of the weighted centre, ``atan2(y, x)`` in (−180, 180]
        and ``hypot(x, y)``.
    counts : dict
        Label → (vertices,) participants contributing (not for the derived maps).
    """
    ok = contributing(stacks, r2_threshold, threshold_on)
    subjects = [s.key.subject for s in sets]
    means, counts = {}, {}
    for label in labels:
        values = stacks[label] if label in stacks else stack(sets, label, hemi)
        se = stack_se(sets, label, hemi)
        _log_impossible(se, ok & np.isfinite(values), sets, label, hemi)
        means[label], counts[label] = ivw_mean(values, se, ok, subjects)
    if "x" in means and "y" in means:
        means["polarangle"], means["eccentricity"] = catalog.visual_field_polar(means["x"], means["y"])
    return means, counts
