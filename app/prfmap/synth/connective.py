"""Connective-field targets of a synthetic dataset: their ground truth and their signal.

A connective field (Haak et al., 2013) models a target vertex's time series as a gain times a
Gaussian-weighted mean of a source area's time series. With ``d(c, s)`` the geodesic distance in mm
from the field's centre vertex ``c`` to source vertex ``s`` along the source area's own
midthickness surface (:func:`prfmap.io.geodesic.geodesic_distances`; infinite across gaps in the
area)::

    w_s = exp(-d(c, s)^2 / (2 size^2)) / sum_s' exp(-d(c, s')^2 / (2 size^2))
    target(t) = baseline + gain * sum_s w_s * source_s(t) + noise(t)

``source_s(t)`` is source vertex ``s``'s noise-free signal in percent signal change about its own
noise-free run mean (what its written data say once divided by their run mean), so a target's
noise-free run mean is its S0 and its ``baseline`` is 0 (percent, as the pRF truth's). The target
then gets drifts and noise as every unit does. Sources and targets are per hemisphere, on
fsaverage5, the areas of the benson14 atlas.

Bar runs: the source's signal is its vertices' pRF responses; each target is a vertex of a target
area that the synth gave a pRF, its centre the source vertex (of the same hemisphere) whose pRF
centre is nearest its own, and it keeps no pRF of its own. Resting-state runs: the source's signal
is a random field (:meth:`ConnectiveFields.rest_response`), each target a vertex of a target area
with a uniformly random centre, and every other unit noise only.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from prfmap.io.area_labels import template_labels
from prfmap.io.atlases import ATLASES
from prfmap.io.geodesic import geodesic_distances
from prfmap.io.meshes import find_midthickness
from prfmap.synth.config import CF_ATLAS, SynthConfig, acquisition_timing
from prfmap.synth.layout import Layout
from prfmap.synth.model import HRF_DELAY, convolve_units, unit_kernels

CF_SEED = 34
"""Mixed into ``SynthConfig.seed`` for the connective fields' draws (sizes, null targets, centres
at rest, the random fields), so that the other draws stay those of the dataset without them."""
CF_GAIN = 1.0
"""Every connective field's gain."""
REST_SD = 0.6
"""Percent signal change: the root mean square over the source vertices of each one's temporal
standard deviation of a resting-state run's random field (the default pRF responses' median is 0.53)."""
CF_TRUTH_META = {
    "truecfcenter": (
        "the centre of each target's connective field: the index of the source vertex in its "
        "hemisphere's fsaverage5 mesh; -1 where no connective field (null targets and other vertices)",
        "vertex index",
    ),
    "truecfsize": (
        "the size of each target's connective field: the standard deviation of its Gaussian weights "
        "over geodesic distance along the source area's midthickness surface; NaN where none",
        "mm",
    ),
    "truecfgain": ("the gain of each target's connective field; NaN where none", "1"),
    "truecfbaseline": (
        "the baseline of each target's connective field, percent of its noise-free run mean; NaN where none",
        "percent",
    ),
}
"""Description and unit of each connective-field truth map (its sidecar)."""
CF_TRUTH_LABELS = tuple(CF_TRUTH_META)
"""The connective fields' ground-truth maps (:meth:`ConnectiveFields.truth_maps`)."""


def cf_weights(distances: np.ndarray, center: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Each connective field's weights over the source vertices.

    Parameters
    ----------
    distances : ndarray, shape (sources, sources)
        Geodesic distances (mm) between the source vertices; ``inf`` across gaps.
    center : ndarray of int, shape (fields,)
        Each field's centre, as a position among the source vertices.
    size : ndarray, shape (fields,)
        Each field's size (mm, the Gaussian's standard deviation).

    Returns
    -------
    ndarray, shape (fields, sources)
        ``exp(-d^2 / (2 size^2))`` normalised to sum 1 over the source vertices.
    """
    d = np.asarray(distances, dtype=np.float64)[np.asarray(center, dtype=np.int64)]
    w = np.exp(-(d**2) / (2 * np.asarray(size, dtype=np.float64)[:, None] ** 2))
    return w / w.sum(axis=1, keepdims=True)


@dataclass(frozen=True)
class HemisphereFields:
    """The connective fields of one hemisphere.

    Attributes
    ----------
    hemi : {"L", "R"}
        The hemisphere.
    offset : int
        Its first unit in the BOLD's unit order.
    source : ndarray of int
        The source area's vertices (indices into the hemisphere's mesh).
    distances : ndarray
        (sources, sources) geodesic distances in mm along the source area's surface.
    targets : ndarray of int
        The target vertices (mesh indices), null ones included.
    center : ndarray of int
        Each target's centre as a position in ``source``; -1 for a null target (noise only).
    size : ndarray
        Each target's size in mm; NaN for a null target.
    """

    hemi: str
    offset: int
    source: np.ndarray
    distances: np.ndarray
    targets: np.ndarray
    center: np.ndarray
    size: np.ndarray

    @property
    def has_field(self) -> np.ndarray:
        """(targets,) bool: targets with a connective field (not null)."""
        return self.center >= 0


@dataclass(frozen=True)
class ConnectiveFields:
    """The connective fields of one participant.

    Attributes
    ----------
    hemis : tuple of HemisphereFields
        Left, then right.
    n_units : int
        Units of the BOLD.
    rest : bool
        Resting-state runs: the source carries :meth:`rest_response`'s random fields.
    mesh : str
        The surfaces the distances were measured on, in words.
    """

    hemis: tuple[HemisphereFields, ...]
    n_units: int
    rest: bool
    mesh: str

    def _units(self, which: str) -> np.ndarray:
        mask = np.zeros(self.n_units, bool)
        for h in self.hemis:
            if which == "source":
                mask[h.offset + h.source] = True
            elif which == "target":
                mask[h.offset + h.targets] = True
            else:
                mask[h.offset + h.targets[h.has_field]] = True
        return mask

    @property
    def source_units(self) -> np.ndarray:
        """(units,) bool: the source area's vertices."""
        return self._units("source")

    @property
    def target_units(self) -> np.ndarray:
        """(units,) bool: the target vertices, null ones included."""
        return self._units("target")

    @property
    def driven(self) -> np.ndarray:
        """(units,) bool: targets with a connective field, and at rest the source's vertices."""
        driven = self._units("field")
        return driven | self.source_units if self.rest else driven

    def drive(self, response: np.ndarray) -> np.ndarray:
        """The targets' noise-free signal from the source's, other units' left as they are.

        Parameters
        ----------
        response : ndarray
            (units, frames) noise-free signal in percent of each unit's S0, the source's included.

        Returns
        -------
        ndarray
            A copy whose target rows are ``CF_GAIN * sum_s w_s * source_s(t)`` (null targets 0),
            ``source_s`` the source's rows in percent about their own run mean.
        """
        out = np.array(response, dtype=np.float64)
        for h in self.hemis:
            signal = out[h.offset + h.source]
            mean = signal.mean(axis=1, keepdims=True)
            source = 100 * (signal - mean) / (100 + mean)
            field = h.has_field
            weights = cf_weights(h.distances, h.center[field], h.size[field])
            out[h.offset + h.targets] = 0.0
            out[h.offset + h.targets[field]] = CF_GAIN * (weights @ source)
        return out

    def rest_response(
        self, layout: Layout, config: SynthConfig, n_frames: int, rng: np.random.Generator
    ) -> np.ndarray:
        """A resting-state run's noise-free signal: a smooth random field on the source, 0 elsewhere.

        Per source vertex, independent Gaussian white noise (one value per TR) is smoothed along
        the source's surface (a Gaussian-weighted mean, as :func:`cf_weights`, of standard
        deviation ``config.cf_source_smoothness`` mm), then convolved with the canonical SPM HRF
        (delay 6 s plus ``config.hrf_delay_shift``) integrated over each TR and read at the
        vertex's sample time; the white noise starts an HRF's length before the run, so the run
        starts in steady state. The field is scaled (one factor per run) to :data:`REST_SD` and
        each vertex's mean over the run removed. Each call draws a new field.

        Parameters
        ----------
        layout : Layout
            The participant's units (slices, hence sample times).
        config : SynthConfig
            TR, slice timing, smoothness, HRF shift.
        n_frames : int
            Volumes of the run (after any dummy scans).
        rng : numpy.random.Generator
            The field's draws.

        Returns
        -------
        ndarray
            (units, frames) in percent of S0, zero-mean over the run on the source's vertices.
        """
        sample_time = acquisition_timing(config, layout.n_slices).sample_times(layout.slices)
        out = np.zeros((self.n_units, n_frames))
        for h in self.hemis:
            units = h.offset + h.source
            n = len(units)
            smooth = cf_weights(h.distances, np.arange(n), np.full(n, config.cf_source_smoothness))
            kernels = unit_kernels(
                config.tr, sample_time[units], np.full(n, HRF_DELAY + config.hrf_delay_shift), np.ones(n)
            )
            lead = kernels.shape[1]
            neural = smooth @ rng.normal(0.0, 1.0, (n, lead + n_frames))
            out[units] = convolve_units(neural, kernels)[:, lead:]
        source = self.source_units
        out[source] -= out[source].mean(axis=1, keepdims=True)
        out[source] *= REST_SD / max(float(np.sqrt(np.mean(out[source].var(axis=1)))), 1e-12)
        return out

    def truth_maps(self) -> dict[str, np.ndarray]:
        """The ground-truth maps, by file label (:data:`CF_TRUTH_LABELS`), as float32 (units,).

        Returns
        -------
        dict
            ``truecfcenter`` (the centre's vertex index in its hemisphere's mesh, -1 where no
            field), ``truecfsize`` (mm), ``truecfgain``, ``truecfbaseline`` (percent; NaN where no
            field).
        """
        center = np.full(self.n_units, -1.0)
        size = np.full(self.n_units, np.nan)
        for h in self.hemis:
            field = h.has_field
            center[h.offset + h.targets[field]] = h.source[h.center[field]]
            size[h.offset + h.targets[field]] = h.size[field]
        has = center >= 0
        maps = {
            "truecfcenter": center,
            "truecfsize": size,
            "truecfgain": np.where(has, CF_GAIN, np.nan),
            "truecfbaseline": np.where(has, 0.0, np.nan),
        }
        return {k: np.asarray(v, dtype=np.float32) for k, v in maps.items()}

    def masks(self) -> dict[str, np.ndarray]:
        """The ground-truth masks by ``desc`` label: ``cfsource`` and ``cftarget`` (null targets included)."""
        return {
            "cfsource": self.source_units.astype(np.float32),
            "cftarget": self.target_units.astype(np.float32),
        }


def connective_fields(
    layout: Layout, config: SynthConfig, rng: np.random.Generator
) -> tuple[Layout, ConnectiveFields]:
    """Draw a participant's connective fields and the layout that carries them.

    Parameters
    ----------
    layout : Layout
        The participant's fsaverage5 units and pRFs (:func:`prfmap.synth.layout.make_layout`).
    config : SynthConfig
        ``cf_source``, ``cf_targets``, ``cf_sizes``, ``cf_null_fraction``, ``rest``.
    rng : numpy.random.Generator
        The fields' own generator (``np.random.default_rng([seed, CF_SEED])``): per hemisphere,
        which targets are null (each with probability ``cf_null_fraction``), every target's size
        (uniform in ``cf_sizes``) and, at rest, every target's centre (uniform over the source).

    Returns
    -------
    layout : Layout
        ``layout`` without pRFs on the targets (at rest: without any pRF), with ``driven`` set.
    fields : ConnectiveFields
        The fields.

    Raises
    ------
    ValueError
        An area with no vertex in a hemisphere, or (bar runs) a source without a pRF.
    """
    atlas = ATLASES[CF_ATLAS]
    (source_code,) = atlas.codes_of([config.cf_source])
    target_codes = atlas.codes_of(list(config.cf_targets))
    meshes, mesh = find_midthickness("", "fsaverage5", None, None)
    prf = np.zeros_like(layout.prf) if config.rest else layout.prf.copy()
    hemis, offset = [], 0
    for hemi, n in layout.geometry.hemis.items():
        labels = template_labels(atlas, hemi)[:n]
        signal = ~layout.empty[offset : offset + n]
        source = np.flatnonzero((labels == source_code) & signal)
        in_targets = np.isin(labels, target_codes) & signal
        if not config.rest:
            in_targets &= layout.prf[offset : offset + n]
        targets = np.flatnonzero(in_targets)
        if not len(source) or not len(targets):
            raise ValueError(f"hemisphere {hemi}: no vertex of {config.cf_source} or of the targets to use")
        null = rng.uniform(size=len(targets)) < config.cf_null_fraction
        size = rng.uniform(*config.cf_sizes, len(targets))
        if config.rest:
            center = rng.integers(0, len(source), len(targets))
        else:
            center = _retinotopic_centers(layout.params, offset + source, offset + targets, layout.prf)
        center[null] = -1
        size[null] = np.nan
        prf[offset + targets] = False
        hemis.append(
            HemisphereFields(
                hemi, offset, source, geodesic_distances(*meshes[hemi], source), targets, center, size
            )
        )
        offset += n
    fields = ConnectiveFields(tuple(hemis), layout.geometry.n_units, config.rest, mesh)
    dropped = layout.prf & ~prf
    params = {k: np.where(dropped, np.nan, v) for k, v in layout.params.items()}
    return replace(layout, prf=prf, params=params, driven=fields.driven), fields


def _retinotopic_centers(
    params: dict[str, np.ndarray], source: np.ndarray, targets: np.ndarray, prf: np.ndarray
) -> np.ndarray:
    """Per target unit, the position in ``source`` of the source pRF whose centre is nearest its own."""
    candidates = np.flatnonzero(prf[source])
    if not len(candidates):
        raise ValueError("no vertex of the connective-field source has a pRF to take its signal from")
    sx, sy = params["x"][source[candidates]], params["y"][source[candidates]]
    tx, ty = params["x"][targets], params["y"][targets]
    d2 = (tx[:, None] - sx[None]) ** 2 + (ty[:, None] - sy[None]) ** 2
    return candidates[np.argmin(d2, axis=1)]


def cf_description(config: SynthConfig) -> dict[str, Any]:
    """What ``truth.json`` says about the connective fields.

    Parameters
    ----------
    config : SynthConfig
        The settings.

    Returns
    -------
    dict
    """
    out: dict[str, Any] = {
        "Atlas": CF_ATLAS,
        "Source": config.cf_source,
        "Targets": list(config.cf_targets),
        "Definition": (
            "target(t) = baseline + gain * sum_s w_s * source_s(t) + noise(t), w_s = exp(-d(c, s)^2 / "
            "(2 size^2)) / sum_s' exp(-d(c, s')^2 / (2 size^2)); d: geodesic distance (mm) along the "
            "source area's own midthickness surface (infinite across gaps in it) from the centre vertex "
            "c; source_s: source vertex s's noise-free signal in percent signal change about its own "
            "noise-free run mean; baseline and gain relative to the target's noise-free run mean; "
            "source and target in the same hemisphere; the target then gets drifts and noise as every "
            "unit does"
        ),
        "SizeDistribution": "uniform",
        "SizeRangeMm": list(config.cf_sizes),
        "Gain": CF_GAIN,
        "Baseline": 0.0,
        "NullFraction": config.cf_null_fraction,
        "NullTargets": (
            "each target vertex (desc-cftarget_mask) is noise only with probability NullFraction: "
            "truecfcenter -1, truecfsize, truecfgain and truecfbaseline NaN"
        ),
        "Maps": {label: description for label, (description, _) in CF_TRUTH_META.items()},
        "Masks": {
            "cfsource": "the source area's vertices",
            "cftarget": "the target vertices, null ones included",
        },
    }
    out["Mesh"] = find_midthickness("", "fsaverage5", None, None)[1]
    if config.rest:
        out["SourceSignal"] = (
            "resting state: per run an independent random field on the source vertices: Gaussian white "
            "noise per vertex and TR, smoothed along the source's surface by a Gaussian-weighted mean "
            f"of standard deviation SourceSmoothnessMm, convolved with the canonical SPM HRF (delay "
            f"{HRF_DELAY:g} s plus hrf_delay_shift) integrated over each TR and read at the vertex's "
            f"sample time, scaled to RestSignalSD (root mean square over the source vertices of their "
            f"temporal standard deviations) and made zero-mean per vertex; plus drifts and noise"
        )
        out["SourceSmoothnessMm"] = config.cf_source_smoothness
        out["RestSignalSD"] = REST_SD
        out["Centers"] = "uniformly random source vertex of the target's hemisphere"
        out["OtherUnits"] = "every vertex outside the source and targets: drifts and noise only (no pRF)"
    else:
        out["SourceSignal"] = "the source vertices' pRF responses (0 where a source vertex has no pRF)"
        out["Centers"] = (
            "the source vertex of the target's hemisphere whose pRF centre is nearest the target's own "
            "drawn pRF centre; the targets (vertices of the target areas with a drawn pRF) keep no pRF "
            "in the ground truth"
        )
    return out
