"""The configuration of one prfmap run: typed, frozen, built once, written to the logs.

The command line (:func:`prfmap.cli.config.build_config`) validates the options once and builds a
:class:`Config`; every stage reads the section it needs and nothing changes it afterwards. Its
JSON form (:meth:`Config.to_dict`) is written next to the run log, ``output_dir/logs/
prfmap_<time>_<pid>_config.json``, as fMRIPrep writes its ``config.toml``, and reads back with
:meth:`Config.from_dict`.

Sections: ``inputs`` (what to read), ``preprocessing`` (what is removed from the data), ``fit``
(everything that determines the fitted parameters; the checkpoint key hashes it), ``outputs``
(what is written where) and ``execution`` (how and where the work runs).

This module imports nothing but the standard library, so every layer may read a configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

SECTIONS = ("inputs", "preprocessing", "fit", "outputs", "execution")
_PATHS = ("bids_dir", "stimulus", "output_dir", "work_dir", "bids_database_dir")
MAX_SMOOTH_FWHM_MM = 20.0
"""The widest ``--smooth-fwhm``: wider kernels average over whole visual areas (and take hours on a
fine mesh: the surface smoothing's iterations grow with the square of the width)."""


def _frozen_mapping(value: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(value or {}))


@dataclass(frozen=True)
class InputsConfig:
    """What to read: the datasets and the BIDS query of the runs to fit.

    Attributes
    ----------
    bids_dir : Path
        Root of the raw BIDS dataset (absolute).
    derivatives : tuple of (str, Path)
        Preprocessed derivatives to read the BOLD from, by dataset name (default
        ``fmriprep=bids_dir/derivatives/fmriprep``); absolute paths.
    participant_labels, session_labels, tasks : tuple of str
        Labels without prefixes; empty selects all.
    runs : tuple of int
        Run indices; empty selects all.
    space : str or None
        The fMRIPrep space string to fit (``fsaverage5``, ``fsLR``, ``T1w``...); None picks the
        first present, surfaces first.
    bids_filter : mapping
        Extra pybids filters on the BOLD query (entity → value; None = absent, ``"*"`` = any).
    stimulus : Path or None
        One aperture file for every run, instead of the events' ``stim_file``.
    stimulus_fov_deg : float or None
        Full width of the aperture in degrees, overriding its sidecar.
    validate : bool
        Run the BIDS validator on ``bids_dir`` before reading it (``--skip-bids-validation``
        turns it off).
    roi : tuple of str
        Visual areas of ``--atlas`` whose units alone are fitted (``--roi``); empty fits every unit.
        With ``--model cf``, the connective fields' targets.
    apertures : bool
        The fit needs each run's stimulus apertures (every pRF model; ``--model cf`` does not).
    """

    bids_dir: Path
    derivatives: tuple[tuple[str, Path], ...] = ()
    participant_labels: tuple[str, ...] = ()
    session_labels: tuple[str, ...] = ()
    tasks: tuple[str, ...] = ()
    runs: tuple[int, ...] = ()
    space: str | None = None
    bids_filter: Mapping[str, Any] = field(default_factory=_frozen_mapping)
    stimulus: Path | None = None
    stimulus_fov_deg: float | None = None
    validate: bool = True
    roi: tuple[str, ...] = ()
    apertures: bool = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "bids_filter", _frozen_mapping(self.bids_filter))
        for name in ("derivatives", "participant_labels", "session_labels", "tasks", "runs"):
            object.__setattr__(self, name, tuple(getattr(self, name)))

    @property
    def dataset_links(self) -> dict[str, Path]:
        """Dataset name → root.

        ``raw`` (``bids_dir``), each derivatives dataset and, for a ``--stimulus`` outside them, its folder
        (``stimulus``).
        """
        links = {"raw": self.bids_dir}
        links.update(dict(self.derivatives) or {"fmriprep": self.bids_dir / "derivatives" / "fmriprep"})
        if self.stimulus is not None and not any(
            Path(self.stimulus).is_relative_to(root) for root in links.values()
        ):
            links["stimulus"] = Path(self.stimulus).parent  # so its sidecars cite it by BIDS URI
        return links

    @property
    def fmriprep_dir(self) -> Path:
        """The derivatives dataset named ``fmriprep`` (default ``bids_dir/derivatives/fmriprep``)."""
        return self.dataset_links.get("fmriprep", self.bids_dir / "derivatives" / "fmriprep")


@dataclass(frozen=True)
class PreprocessingConfig:
    """What is removed from the data before the fit (and from the model predictions alike).

    Attributes
    ----------
    dummy_scans : int or None
        Initial volumes to drop; None takes fMRIPrep's ``non_steady_state_outlier`` columns.
    high_pass_hz : float
        DCT high-pass cut-off in Hz (0 disables it).
    confounds : tuple of str
        Confound columns (names or fnmatch patterns) to regress out.
    bold_scale : {"raw", "percent"}
        What the series are: BOLD as acquired (converted to percent signal change of its mean), or
        already percent signal change (fitted as given).
    smooth_fwhm : float or None
        FWHM (mm) of the spatial smoothing applied as the runs are read (:mod:`prfmap.io.smoothing`),
        at most :data:`MAX_SMOOTH_FWHM_MM`; None for none.
    """

    dummy_scans: int | None = None
    high_pass_hz: float = 0.01
    confounds: tuple[str, ...] = ()
    bold_scale: str = "raw"
    smooth_fwhm: float | None = None


@dataclass(frozen=True)
class FitConfig:
    """Everything that determines the fitted parameters besides the data.

    Attributes
    ----------
    model : str
        pRF model (``gauss``, ``css``, ``dog``, ``dn``), or ``cf``: connective fields
        (:mod:`prfmap.participant.connective`).
    compared : tuple of str
        With two or more models (``--model gauss css ...``), all of them, the Gaussian first: each is
        fitted (``model`` is the one of this configuration, :meth:`for_model`) and they are compared
        per vertex; empty for one model.
    refine : str
        Refinement after the grid search (``lm``, ``sgd``, ``none``).
    refine_r2_min : float
        Units whose grid fit explains less variance keep their grid estimates.
    hrf : str
        How the HRF is modelled (``--hrf``): ``canonical``, ``participant`` (one HRF per fit, its
        delay estimated from its best units; per fold from the training runs) or ``vertex`` (per-unit
        derivative weights).
    noise_model : str
        The noise model (``--noise-model``): ``ols`` or ``ar1`` … ``ar3``, estimated once per fit and
        fold before it and used to prewhiten the refinement and the standard errors.
    covariance : str
        How the standard errors are computed (``--covariance``): ``laplace`` or ``sandwich``.
    sigma_prior : str
        ``--sigma-prior``: ``none`` or ``eccentricity`` (an empirical-Bayes prior on log σ, estimated
        once per fit and fold from a pilot sample of every k-th unit).
    delay_prior : str
        ``--delay-prior``: ``none`` or ``spread`` (each refined unit's HRF delay and σ at their joint
        posterior mode, the delay's prior the participant's between-vertex spread).
    random_seed : int
        Seed of every random choice of the fit.
    slice_time_ref : float or None
        Where within each TR the volumes sample the signal, as a fraction of the TR
        (``--slice-time-ref``); None reads it from each run's sidecars
        (:mod:`prfmap.io.timing`).
    cf_source : tuple of str
        ``--cf-source``: the source area (names of ``--atlas``, or label files) of ``--model cf``.
    """

    model: str = "gauss"
    compared: tuple[str, ...] = ()
    refine: str = "lm"
    refine_r2_min: float = 0.1
    hrf: str = "participant"
    noise_model: str = "ar1"
    covariance: str = "laplace"
    sigma_prior: str = "eccentricity"
    delay_prior: str = "spread"
    random_seed: int = 0
    slice_time_ref: float | None = None
    cf_source: tuple[str, ...] = ()

    def engine_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`prfmap.engine.fit_prf` that this section sets.

        ``slice_time_ref`` only when given: otherwise the participant level reads it per run.
        """
        kwargs: dict[str, Any] = {
            "model": self.model,
            "refine": self.refine,
            "refine_r2_min": self.refine_r2_min,
            "hrf": self.hrf,
            "noise": self.noise_model,
            "covariance": self.covariance,
            "sigma_prior": self.sigma_prior,
            "delay_prior": self.delay_prior,
            "seed": self.random_seed,
        }
        if self.slice_time_ref is not None:
            kwargs["slice_time_ref"] = self.slice_time_ref
        return kwargs


@dataclass(frozen=True)
class OutputsConfig:
    """What is written, and where.

    Attributes
    ----------
    output_dir : Path
        The BIDS-Derivatives output folder (absolute).
    save_predictions : bool
        Also write the model time series and the preprocessed data.
    report : bool
        Write the HTML reports.
    reports_only : bool
        Rebuild the participant reports from the maps already written, without fitting.
    r2_threshold : float
        Variance-explained threshold of the maps shown in the reports (and of the group maps).
    cvr2 : bool
        With two or more runs, cross-validate (leave one run out) and write ``cvr2`` maps.
    threshold_on : {"r2", "cvr2"}
        The map ``r2_threshold`` applies to at the group level: variance explained in the
        fitted data, or in held-out runs.
    atlas : str
        Visual areas (``--atlas``): an atlas of :data:`prfmap.io.atlases.ATLASES`, ``auto`` (the
        space's own: :func:`prfmap.io.atlases.default_atlas`) or ``none``.
    """

    output_dir: Path
    save_predictions: bool = False
    report: bool = True
    r2_threshold: float = 0.1
    cvr2: bool = True
    threshold_on: str = "r2"
    atlas: str = "auto"
    reports_only: bool = False

    @property
    def keep_predictions(self) -> bool:
        """Whether the fit must return its predicted time series (written or reported)."""
        return self.save_predictions or self.report


@dataclass(frozen=True)
class ExecutionConfig:
    """How and where the work runs.

    Attributes
    ----------
    analysis_level : {"participant", "group"}
        The BIDS-Apps level.
    backend : str
        Keras backend (``jax``, ``torch``, ``tensorflow``): ``--backend``, else
        ``$KERAS_BACKEND``, else ``jax``.
    device : str
        ``auto``, ``cpu``, ``gpu`` or ``gpu:N``.
    nprocs : int or None
        Most CPU threads; None uses all.
    omp_nthreads : int or None
        Threads of each OpenMP/BLAS pool (``--omp-nthreads``); None: ``nprocs``.
    fs_license_file : Path or None
        ``--fs-license-file``, accepted for fMRIPrep-style wrappers and not used.
    mem_gb : float or None
        Memory bound of the fit in GB (participant level).
    mem_gb_auto : bool
        ``mem_gb`` is the default derived from the memory available when the run started (a
        resumed run then keeps the chunk size it started with).
    work_dir : Path or None
        Intermediate files and checkpoints (absolute); None: a temporary folder and
        ``output_dir/.prfmap-work``.
    bids_database_dir : Path or None
        Where the pybids index is kept and reused (``--bids-database-dir``, absolute); None:
        ``work_dir/bids_db``.
    verbose : int
        ``-v`` count.
    """

    analysis_level: str = "participant"
    backend: str = "jax"
    device: str = "auto"
    nprocs: int | None = None
    omp_nthreads: int | None = None
    mem_gb: float | None = None
    mem_gb_auto: bool = False
    work_dir: Path | None = None
    bids_database_dir: Path | None = None
    verbose: int = 0
    fs_license_file: Path | None = None


@dataclass(frozen=True)
class Config:
    """The whole configuration of a run; see the module docstring."""

    inputs: InputsConfig
    preprocessing: PreprocessingConfig
    fit: FitConfig
    outputs: OutputsConfig
    execution: ExecutionConfig

    @property
    def models(self) -> tuple[str, ...]:
        """Every model the run fits: ``fit.compared``, or ``fit.model`` alone."""
        return self.fit.compared or (self.fit.model,)

    def for_model(self, model: str) -> Config:
        """The configuration fitting ``model`` alone, as ``--model <model>`` would.

        Parameters
        ----------
        model : str
            One of :attr:`models`.

        Returns
        -------
        Config
        """
        return dataclasses.replace(self, fit=dataclasses.replace(self.fit, model=model, compared=()))

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """The configuration as JSON-able sections (paths as strings, tuples as lists)."""
        out = {}
        for name in SECTIONS:
            section = getattr(self, name)
            out[name] = {f.name: _plain(getattr(section, f.name)) for f in dataclasses.fields(section)}
        return out

    @classmethod
    def from_dict(cls, content: Mapping[str, Mapping[str, Any]]) -> Config:
        """Read back what :meth:`to_dict` wrote.

        Parameters
        ----------
        content : mapping
            Section name → field → JSON value.

        Returns
        -------
        Config
            Equal to the configuration that was written.
        """
        kinds = {
            "inputs": InputsConfig,
            "preprocessing": PreprocessingConfig,
            "fit": FitConfig,
            "outputs": OutputsConfig,
            "execution": ExecutionConfig,
        }
        sections = {name: kinds[name](**_typed(dict(content[name]))) for name in SECTIONS}
        return cls(**sections)


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _typed(fields: dict[str, Any]) -> dict[str, Any]:
    for name in _PATHS:
        if fields.get(name) is not None:
            fields[name] = Path(fields[name])
    for name, value in fields.items():
        if name == "derivatives":
            fields[name] = tuple((str(n), Path(p)) for n, p in value)
        elif name == "bids_filter":
            fields[name] = _frozen_mapping(value)
        elif isinstance(value, list):
            fields[name] = tuple(value)
    return fields
