"""The prfmap command line, the single source of its options (boutiques.json is tested on it)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn

from prfmap import __version__
from prfmap.config import MAX_SMOOTH_FWHM_MM
from prfmap.engine import catalog
from prfmap.engine.backend import SUPPORTED_BACKENDS
from prfmap.engine.catalog.connective import CF_MODEL
from prfmap.errors import ExitCode, one_line, why_missing
from prfmap.io.atlases import ATLAS_CHOICES
from prfmap.io.datasets import FOV_RANGE_DEG, check_fov_deg, read_bids_filter
from prfmap.io.spaces import parse_space
from prfmap.io.timing import parse_slice_time_ref

ANALYSIS_LEVELS = ("participant", "group")
BACKENDS = SUPPORTED_BACKENDS
BOLD_SCALES = ("raw", "percent")
"""``--bold-scale``: BOLD as acquired, or series already in percent signal change."""


class _HelpFormatter(argparse.HelpFormatter):
    """Show a default only where the help text does not already say it."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if (
            action.default is not None
            and action.default is not False
            and action.default != argparse.SUPPRESS
            and "default" not in text
            and action.option_strings
        ):
            if isinstance(action.default, (list, tuple)):
                # as it is written on the command line: "gauss css", not "['gauss', 'css']"
                shown = " ".join(str(value) for value in action.default).replace("%", "%%")
                text += f" (default: {shown})"
            else:
                text += " (default: %(default)s)"
        return text


DOCS_URL = "https://github.com/prfmap/prfmap/tree/main/docs"
"""The documentation (pyproject.toml's ``Documentation`` URL), named by every ``--help``."""


class PrfmapArgumentParser(argparse.ArgumentParser):
    """An argument parser whose errors are one line and BIDS-Apps exit codes.

    Usage errors exit 64; an unknown analysis level exits 17.
    """

    _arguments: list[str] = []

    def parse_known_args(self, args=None, namespace=None):  # noqa: ANN001, ANN201 - argparse's signature
        """As argparse's, keeping the arguments for :meth:`error`."""
        self._arguments = list(sys.argv[1:] if args is None else args)
        return super().parse_known_args(args, namespace)

    def unknown_options(self) -> list[str]:
        """The arguments that look like options and are none of this parser's (nor a unique prefix of one).

        Returns
        -------
        list of str
        """
        known = list(self._option_string_actions)
        unknown = []
        for argument in self._arguments:
            if argument == "--":
                break
            name = argument.split("=", 1)[0]
            if not name.startswith("-") or name == "-" or name[1:2].isdigit() or name in known:
                continue
            if not (
                self.allow_abbrev and name.startswith("--") and sum(k.startswith(name) for k in known) == 1
            ):
                unknown.append(name)
        return unknown

    def error(self, message: str) -> NoReturn:
        """Print ``prfmap: error: <message>`` on one line and exit 64 (17 for the level).

        An unknown option placed before the positional arguments takes their places, so that the
        analysis level reads as the output folder: that is reported as the unknown option (64).
        """
        code = ExitCode.USAGE
        if message.startswith("argument analysis_level: invalid choice"):
            unknown = self.unknown_options()
            if unknown:
                message = f"unrecognized arguments: {' '.join(unknown)}"
            else:
                code = ExitCode.UNKNOWN_LEVEL
        message = one_line(message)
        sys.stderr.write(f"{self.prog}: error: {message}; see '{self.prog} --help'\n")
        sys.exit(int(code))


def _label(prefix: str):
    def strip(value: str) -> str:
        value = value.strip()
        if value.startswith(prefix):
            value = value[len(prefix) :]
        if not value or not value.isalnum():
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a BIDS label (letters and digits only, {prefix!r} optional)"
            )
        return value

    strip.__name__ = f"{prefix.rstrip('-')}_label"
    return strip


def _run_index(value: str) -> int:
    value = value.strip().removeprefix("run-")
    if not value.isdigit():
        raise argparse.ArgumentTypeError(f"{value!r} is not a run index (a non-negative integer)")
    return int(value)


def _space(value: str) -> str:
    try:
        return str(parse_space(value))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _derivative(value: str) -> tuple[str, Path]:
    name, sep, path = value.partition("=")
    if not sep:
        path, name = value, Path(value).name
    if not name or not path:
        raise argparse.ArgumentTypeError(f"{value!r} is not NAME=PATH (e.g. fmriprep=/data/fmriprep)")
    return name, Path(path).expanduser().absolute()


def _bids_filter_file(value: str) -> Path:
    try:
        read_bids_filter(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return Path(value).expanduser().absolute()


def _existing_file(value: str) -> Path:
    path = Path(value).expanduser().absolute()
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"{value} {why_missing(path)}")
    return path


def _fov_deg(value: str) -> float:
    try:
        return check_fov_deg(positive_float(value), repr(value))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def positive_float(value: str) -> float:
    """An argparse type: a number > 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number > 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive number")
    return number


def nonnegative_float(value: str) -> float:
    """An argparse type: a number >= 0."""
    try:
        number = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a number") from None
    if not number >= 0 or number == float("inf"):
        raise argparse.ArgumentTypeError(f"{value!r} must be zero or a positive number")
    return number


def smooth_fwhm(value: str) -> float:
    """An argparse type: a FWHM in mm, from 0 (no smoothing) to :data:`MAX_SMOOTH_FWHM_MM`."""
    number = nonnegative_float(value)
    if number > MAX_SMOOTH_FWHM_MM:
        raise argparse.ArgumentTypeError(
            f"{value!r} is wider than {MAX_SMOOTH_FWHM_MM:g} mm: such a kernel averages whole visual areas"
        )
    return number


def nonnegative_int(value: str) -> int:
    """An argparse type: an integer >= 0."""
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not an integer") from None
    if number < 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be zero or a positive integer")
    return number


def positive_int(value: str) -> int:
    """An argparse type: an integer > 0."""
    number = nonnegative_int(value)
    if number == 0:
        raise argparse.ArgumentTypeError(f"{value!r} must be a positive integer")
    return number


def fraction(value: str) -> float:
    """An argparse type: a number in [0, 1]."""
    number = nonnegative_float(value)
    if number > 1:
        raise argparse.ArgumentTypeError(f"{value!r} must lie in [0, 1]")
    return number


def _slice_time_ref(value: str) -> float:
    try:
        return parse_slice_time_ref(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _device(value: str) -> str:
    value = value.strip().lower()
    kind, _, index = value.partition(":")
    if kind not in ("auto", "cpu", "gpu", "cuda") or (index and not index.isdigit()):
        raise argparse.ArgumentTypeError(
            f"{value!r} is not a device; use auto, cpu, gpu or gpu:N (cuda:N also accepted)"
        )
    if kind == "cuda":
        kind = "gpu"
    return f"{kind}:{index}" if index else kind


def build_parser() -> argparse.ArgumentParser:
    """Build prfmap's argument parser.

    Returns
    -------
    argparse.ArgumentParser
        The parser of ``prfmap bids_dir output_dir {participant,group} [options]``. Usage errors
        exit 64 with one line on stderr; an unknown analysis level exits 17.
    """
    parser = PrfmapArgumentParser(
        prog="prfmap",
        description=(
            "prfmap: population receptive field (pRF) mapping of fMRIPrep-preprocessed BOLD, on "
            "cortical surfaces (GIFTI, CIFTI) or volumes, fitted by one Keras 3 engine on JAX, "
            "PyTorch or TensorFlow. Writes BIDS-Derivative parameter maps and HTML reports."
        ),
        epilog=(
            "Exit codes: 0 success, 1 unexpected failure (see the log), 16 bids_dir is not BIDS "
            "(or fails the BIDS validator), "
            "17 unknown analysis level, 18 the filters selected no files, 64 usage error, "
            "65 unusable input data, 66 a referenced input file is missing, 73 an output or work "
            "file cannot be written (disk full, no permission), 75 another prfmap run is processing "
            "the same participant into output_dir, 130 or 143 stopped by SIGINT or SIGTERM (run the "
            f"same command again to resume). Documentation: {DOCS_URL}"
        ),
        formatter_class=_HelpFormatter,
    )

    parser.add_argument(
        "bids_dir",
        type=Path,
        help="the root folder of a BIDS dataset (sub-XXXXX folders at the top level); "
        "fMRIPrep derivatives are looked for in bids_dir/derivatives/fmriprep unless "
        "--derivatives says otherwise",
    )
    parser.add_argument(
        "output_dir",
        type=Path,
        help="the output folder, a BIDS-Derivatives dataset (e.g. bids_dir/derivatives/prfmap)",
    )
    parser.add_argument(
        "analysis_level",
        choices=ANALYSIS_LEVELS,
        help="'participant' fits each participant's runs; 'group' combines participants "
        "already fitted in a shared template space",
    )
    parser.add_argument("--version", action="version", version=f"prfmap {__version__}")

    g_bids = parser.add_argument_group("Options for filtering BIDS queries")
    g_bids.add_argument(
        "--participant-label",
        "--participant_label",
        dest="participant_label",
        nargs="+",
        type=_label("sub-"),
        metavar="LABEL",
        help="one or more participant labels, with or without 'sub-' (default: all participants)",
    )
    g_bids.add_argument(
        "--session-label",
        "--session_label",
        dest="session_label",
        nargs="+",
        type=_label("ses-"),
        metavar="LABEL",
        help="one or more session labels, with or without 'ses-' (default: all sessions)",
    )
    g_bids.add_argument(
        "--task",
        nargs="+",
        type=_label("task-"),
        metavar="TASK",
        help="one or more task labels of the retinotopy runs (default: every task whose "
        "events name a stimulus aperture in a stim_file column)",
    )
    g_bids.add_argument(
        "--run",
        nargs="+",
        type=_run_index,
        metavar="RUN",
        help="one or more run indices (default: all runs)",
    )
    g_bids.add_argument(
        "--space",
        type=_space,
        metavar="SPACE",
        help="the fMRIPrep output space to fit, written as fMRIPrep's --output-spaces: fsnative, "
        "fsaverage5, fsaverage6, fsaverage, fsLR (CIFTI, den-91k), fsLR:den-32k (GIFTI), T1w or "
        "a TemplateFlow volume template such as MNI152NLin2009cAsym[:res-2] (default: the first "
        "space found among fsnative, fsaverage*, fsLR, T1w, MNI*; surfaces first)",
    )
    g_bids.add_argument(
        "--roi",
        nargs="+",
        metavar="AREA",
        help="fit only the vertices of these visual areas of --atlas (e.g. V1 V2 V3; the atlas's "
        "names, case-insensitive; wang15's V1, V2 and V3 pool their dorsal and ventral halves) "
        "and of these label files of the fit's space (FreeSurfer lh.NAME.label or rh.NAME.label, or "
        "GIFTI NAME.label.gii with hemi-L or hemi-R): the others are NaN in every map, and the fit costs in "
        "proportion; surface spaces only (default: every vertex; see docs/areas.md)",
    )
    g_bids.add_argument(
        "--derivatives",
        nargs="+",
        action="extend",
        type=_derivative,
        metavar="NAME=PATH",
        help="preprocessed derivatives to read the BOLD from, as NAME=PATH (a bare PATH is "
        "named after its folder); may be repeated "
        "(default: fmriprep=bids_dir/derivatives/fmriprep)",
    )
    g_bids.add_argument(
        "--bids-filter-file",
        type=_bids_filter_file,
        metavar="FILE",
        help="a JSON file of extra pybids filters on the BOLD query, fMRIPrep-style: "
        '{"bold": {"acquisition": "mb4", ...}}, or a flat object of entities',
    )

    g_bids.add_argument(
        "--skip-bids-validation",
        "--skip_bids_validation",
        dest="skip_bids_validation",
        action="store_true",
        help="do not validate bids_dir (by default, as BIDS Apps do, the BIDS validator "
        "bids-validator-deno checks it when installed and errors exit 16)",
    )
    g_bids.add_argument(
        "--bids-database-dir",
        dest="bids_database_dir",
        type=Path,
        metavar="DIR",
        help="folder where the pybids index of the datasets is kept, and reused while their files "
        "are unchanged, as fMRIPrep's option (default: --work-dir/bids_db, else a temporary folder)",
    )
    g_bids.add_argument(
        "--fs-license-file",
        "--fs_license_file",
        dest="fs_license_file",
        type=Path,
        metavar="FILE",
        help="accepted so that fMRIPrep-style wrappers run unchanged, and not used: prfmap runs "
        "no FreeSurfer",
    )

    g_stim = parser.add_argument_group("Stimulus")
    g_stim.add_argument(
        "--stimulus",
        type=_existing_file,
        metavar="FILE",
        help="an aperture file (NIfTI rows × cols [× 1] × frames, .npy frames × rows × cols, or a "
        "MATLAB .mat) used for every run, overriding the stim_file column of the events",
    )
    g_stim.add_argument(
        "--stimulus-fov-deg",
        type=_fov_deg,
        metavar="DEG",
        help="width of the aperture in degrees of visual angle between the first and last pixel "
        "centres of a row (prfmap-stimulus --fov-centres-deg, prfpy's screen_size_degrees; edge to "
        f"edge it is n / (n - 1) times wider for n columns), {FOV_RANGE_DEG[0]:g}-{FOV_RANGE_DEG[1]:g} "
        "(default: FieldOfViewDeg of the aperture's JSON sidecar, which must lie in the same range)",
    )

    g_pre = parser.add_argument_group("Preprocessing")
    g_pre.add_argument(
        "--dummy-scans",
        type=nonnegative_int,
        metavar="N",
        help="number of initial volumes to drop (default: fMRIPrep's non_steady_state_outlier "
        "confounds, else 0); the aperture must have as many frames as volumes remain",
    )
    g_pre.add_argument(
        "--high-pass-hz",
        type=nonnegative_float,
        default=0.01,
        metavar="HZ",
        help="cut-off of the DCT high-pass filter in Hz (0 disables it); the same basis is "
        "projected out of the model predictions",
    )
    g_pre.add_argument(
        "--bold-scale",
        choices=BOLD_SCALES,
        default="raw",
        help="what the BOLD series are: raw (as acquired, e.g. fMRIPrep's desc-preproc_bold: each is "
        "converted to percent signal change of its mean; demeaned or z-scored series are refused) or "
        "percent (already percent signal change, or another demeaned unit of signal change: fitted "
        "as given, the amplitude and baseline in their unit)",
    )
    g_pre.add_argument(
        "--smooth-fwhm",
        type=smooth_fwhm,
        default=0.0,
        metavar="MM",
        help="spatial smoothing (FWHM in mm) of every run before the fit: volumes with nilearn's Gaussian "
        "(as NiftiMasker's smoothing_fwhm, before the brain mask), surfaces on the space's midthickness "
        f"surface with nilearn's FreeSurfer-style smoothing (fsnative: fMRIPrep's surfaces); 0 for none, at "
        f"most {MAX_SMOOTH_FWHM_MM:g}. "
        "Smoothing trades noise for blur: pRF sizes grow, and neighbouring units' standard errors are no "
        "longer independent",
    )
    g_pre.add_argument(
        "--confounds",
        nargs="+",
        metavar="COLUMN",
        help="confound columns of fMRIPrep's desc-confounds_timeseries.tsv to regress out, "
        "e.g. trans_x trans_y trans_z rot_x rot_y rot_z (default: none)",
    )

    g_model = parser.add_argument_group("Model fitting")
    g_model.add_argument(
        "--model",
        nargs="+",
        choices=(*catalog.MODELS, "all", CF_MODEL),
        default=["gauss"],
        metavar="MODEL",
        help="pRF model(s): gauss (isotropic Gaussian), css (compressive spatial summation), dog "
        "(difference of Gaussians), dn (divisive normalisation), or all of them. With two or more, "
        "each is fitted from one loading of the runs and one participant HRF (the Gaussian always "
        "among them: the others seed from its fit), and with two or more runs compared per vertex "
        "on the same held-out runs (model-best maps: the winner, its cvr2 and its gain over the "
        "Gaussian). cf fits connective fields instead (with --cf-source; runs need no apertures, "
        "see docs/connective-fields.md)",
    )
    g_model.add_argument(
        "--cf-source",
        nargs="+",
        metavar="AREA",
        help="the source area of --model cf: areas of --atlas (e.g. V1) or label files of the "
        "fit's space (one per hemisphere, as --roi reads them); every target vertex (those of "
        "--roi, by default the atlas's other areas) is fitted as a Gaussian-weighted mean of the "
        "source's time series over geodesic distance on the midthickness surface (default: none; "
        "required by --model cf)",
    )
    g_model.add_argument(
        "--refine",
        choices=tuple(catalog.REFINERS),
        default="lm",
        help="refinement after the grid search: Levenberg-Marquardt, Adam (SGD), or none "
        "(grid estimates only)",
    )
    g_model.add_argument(
        "--refine-r2-min",
        type=fraction,
        default=0.1,
        metavar="R2",
        help="refine only units whose grid fit explains at least this fraction of variance; the "
        "others keep their grid estimates (0 refines every unit)",
    )
    g_model.add_argument(
        "--hrf",
        choices=catalog.HRF_OPTIONS,
        default=catalog.DEFAULT_HRF,
        help="canonical: SPM's HRF for every unit; participant: one two-gamma HRF per fit, SPM's with "
        "its delay estimated from the best units (in each cross-validation fold from the "
        "training runs) and held fixed; vertex: SPM's HRF plus per-unit time-derivative and "
        "dispersion weights (default: %(default)s)",
    )
    g_model.add_argument(
        "--noise-model",
        choices=tuple(catalog.NOISE_MODELS),
        default=catalog.DEFAULT_NOISE,
        help="ols: ordinary least squares (white noise); "
        + ", ".join(
            n.name for n in catalog.NOISE_MODELS.values() if n.implementation == catalog.AUTOREGRESSIVE
        )
        + ": an autoregressive noise model "
        "pooled over the units the stimulus does not drive, estimated once per fit (in each "
        "cross-validation fold from the training runs); the refinement and the standard errors "
        "prewhiten data and predictions with it (generalised least squares) (default: %(default)s)",
    )
    g_model.add_argument(
        "--covariance",
        choices=tuple(catalog.COVARIANCES),
        default=catalog.DEFAULT_COVARIANCE,
        help="how the standard errors are computed: "
        + "; ".join(f"{name}: {text}" for name, text in catalog.COVARIANCES.items())
        + " (default: %(default)s)",
    )
    g_model.add_argument(
        "--sigma-prior",
        choices=catalog.SIGMA_PRIORS,
        default=catalog.DEFAULT_SIGMA_PRIOR,
        help="none: sigma is the maximum-likelihood estimate; eccentricity: sigma is each refined "
        "unit's posterior mode under an empirical-Bayes prior on log sigma given eccentricity, "
        "estimated once per fit and fold from a pilot fit of every k-th unit (Gaussian model only), "
        "which keeps sigma off its floor where the data cannot pin it down (default: %(default)s)",
    )
    g_model.add_argument(
        "--delay-prior",
        choices=catalog.DELAY_PRIORS,
        default=catalog.DEFAULT_DELAY_PRIOR,
        help="none: every unit has the fit's HRF; spread: each refined unit also tries the HRF with its "
        "peak delay moved by +/- 1.3 times the participant's between-vertex spread of the delay and takes "
        "the delay and sigma of their joint posterior mode (the delay's prior that spread), which keeps "
        "sigma from widening to match a late response; Gaussian model only, not with --hrf vertex "
        "(default: %(default)s)",
    )
    g_model.add_argument(
        "--fit-hrf",
        action="store_true",
        help="the same as --hrf vertex (kept for earlier command lines)",
    )
    g_model.add_argument(
        "--slice-time-ref",
        type=_slice_time_ref,
        metavar="REF",
        help="where within each TR the volumes sample the signal, as a fraction of the TR in "
        "[0, 1], or start (0) or middle (0.5); fMRIPrep's option name (default: from each run's "
        "sidecars: StartTime of slice-timing corrected data, else the mean SliceTiming of "
        "uncorrected data, else the start of the TR)",
    )
    g_model.add_argument(
        "--random-seed",
        type=nonnegative_int,
        default=0,
        metavar="N",
        help="seed of every random choice of the fit, for reproducible maps",
    )

    g_perf = parser.add_argument_group("Backend and performance")
    g_perf.add_argument(
        "--backend",
        choices=BACKENDS,
        help="Keras backend that runs the fit (default: $KERAS_BACKEND, else jax); the "
        "backend's package must be installed: pip install jax, torch or tensorflow (prfmap's extras)",
    )
    g_perf.add_argument(
        "--device",
        type=_device,
        default="auto",
        metavar="DEVICE",
        help="where to compute: auto (a GPU when the backend sees one), cpu, gpu, or gpu:N",
    )
    g_perf.add_argument(
        "--nprocs",
        "--nthreads",
        "--n_cpus",
        "--n-cpus",
        dest="nprocs",
        type=positive_int,
        metavar="N",
        help="maximum number of CPU threads (default: all available)",
    )
    g_perf.add_argument(
        "--omp-nthreads",
        "--omp_nthreads",
        dest="omp_nthreads",
        type=positive_int,
        metavar="N",
        help="threads of each OpenMP/BLAS pool (numpy and SciPy in preprocessing, the backends' "
        "CPU kernels), as fMRIPrep's option (default: --nprocs)",
    )
    g_perf.add_argument(
        "--mem-gb",
        "--mem_gb",
        dest="mem_gb",
        type=positive_float,
        metavar="GB",
        help="upper bound on the memory the fit may use, in GB; sets the tile sizes "
        "(default: a safe fraction of the available memory)",
    )
    g_perf.add_argument(
        "--mem-mb",
        "--mem_mb",
        "--mem",
        dest="mem_mb",
        type=positive_float,
        metavar="MB",
        help="the same bound in MB, as fMRIPrep's option (not with --mem-gb)",
    )
    g_perf.add_argument(
        "--work-dir",
        "-w",
        dest="work_dir",
        type=Path,
        metavar="DIR",
        help="folder for the fit's checkpoints, which a stopped run resumes from (kept until the "
        "participant is written), and the pybids database; neither output_dir nor a folder in it "
        "but a hidden one (default: the checkpoints in output_dir/.prfmap-work/, the database in a "
        "temporary folder removed at exit)",
    )

    g_out = parser.add_argument_group("Outputs")
    g_out.add_argument(
        "--save-predictions",
        action="store_true",
        help="also write the fitted model time series (desc-<model>prediction) and the preprocessed "
        "data they were fitted to (desc-preproc) next to the maps",
    )
    g_out.add_argument(
        "--r2-threshold",
        type=fraction,
        default=0.1,
        metavar="R2",
        help="variance-explained threshold of the maps shown in the reports (on r2, the variance "
        "explained in the data that were fitted) and of the group maps (on the map --threshold-on "
        "names)",
    )
    g_out.add_argument(
        "--threshold-on",
        choices=("r2", "cvr2"),
        default="r2",
        help="group level: threshold each participant's r2 (the fitted data) or cvr2 (runs held "
        "out of the fit; every participant needs two or more runs)",
    )
    g_out.add_argument(
        "--atlas",
        choices=ATLAS_CHOICES,
        default="auto",
        help="visual areas on surface spaces: a desc-area label map per hemisphere and a per-area "
        "summary (desc-areas_summary.tsv) beside the maps, and the areas in the report; benson14 "
        "and wang15 (fsaverage; need the extra prfmap[atlases]: neuropythy, AGPL-3.0) or hcpmmp "
        "(fs_LR); auto: benson14 on fsaverage and fsnative, hcpmmp on fsLR and CIFTI, none on "
        "volumes (see docs/areas.md)",
    )
    g_out.add_argument(
        "--no-cvr2",
        action="store_true",
        help="skip the cross-validation: with two or more runs prfmap fits all runs but one and "
        "predicts the one left out, for each run, and writes cvr2 maps (it costs one fit per run)",
    )
    g_out.add_argument(
        "--no-report",
        action="store_true",
        help="skip the HTML reports (the maps are written all the same)",
    )
    g_out.add_argument(
        "--reports-only",
        action="store_true",
        help="participant level: rebuild sub-<label>.html from the maps and sidecars already in "
        "output_dir, without fitting (as fMRIPrep's --reports-only)",
    )
    g_out.add_argument(
        "--verbose",
        "-v",
        dest="verbose_count",
        action="count",
        default=0,
        help="more log output (-v: debug messages from prfmap, -vv: also from libraries)",
    )
    return parser
