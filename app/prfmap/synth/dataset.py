"""Synthetic BIDS + fMRIPrep datasets with known pRFs.

The demo's data, the tests' data, and a validation tool.

The forward model is plain numpy, independent of the engine: an isotropic Gaussian pRF's overlap
with a bar-sweep aperture (or, with ``SynthConfig.prf_models``, that overlap to the power n for
CSS units, or less a wider surround Gaussian's for DoG units), convolved with each unit's own SPM
two-gamma HRF (delay and dispersion vary across units) integrated over each TR and read at the
unit's sample time (its slice's acquisition time, or the slice-timing correction's reference, as
the sidecars say), plus slow drifts and noise (AR(1) and aliased physiological cycles;
:mod:`prfmap.synth.model`).
Units without a pRF (``noise`` in the ground truth) carry the drifts and noise alone.
``CLEAN`` gives the earlier, idealised data: one canonical HRF, every volume sampled mid-TR,
AR(1) noise only, every unit of the mapped region with a pRF.
"""

from __future__ import annotations

import os
from pathlib import Path

import nibabel as nib
import numpy as np

from prfmap.io.atomic import write_json_atomic, write_text_atomic
from prfmap.synth.config import MODEL_SEED, SPACES, SynthConfig, acquisition_timing
from prfmap.synth.connective import CF_SEED, CF_TRUTH_LABELS, connective_fields
from prfmap.synth.layout import make_layout
from prfmap.synth.response import measure_run, prf_response, stimulus_apertures, sweep_orders
from prfmap.synth.surfaces import write_native_anat
from prfmap.synth.writers import (
    CF_TRUTH_MASKS,
    FMRIPREP_BIDSIGNORE,
    MODEL_TRUTH_LABELS,
    TRUTH_BIDSIGNORE,
    TRUTH_LABELS,
    TRUTH_MASKS,
    bold_name,
    confounds_tsv,
    deriv_description,
    truth_description,
    truth_maps,
    write_bold,
    write_cf_truth,
    write_raw_bold,
    write_raw_run,
    write_raw_top,
    write_spatial_references,
    write_stimulus,
    write_truth,
)


def make_synthetic_dataset(out_dir: str | os.PathLike, config: SynthConfig | None = None) -> Path:
    """Write a raw BIDS dataset, fMRIPrep-style derivatives and the ground truth.

    Layout under ``out_dir``: ``dataset_description.json``, ``participants.tsv``, ``README``,
    ``sub-XX/func/*_events.tsv`` (``stim_file``) and ``*_bold.json`` (RepetitionTime,
    TaskName), ``stimuli/bars.nii.gz`` + ``bars.json`` (FieldOfViewDeg), ``derivatives/fmriprep``
    (BOLD, masks, confounds) and ``derivatives/prfsynth`` (ground truth maps in the BOLD's
    format: x, y, sigma, amplitude, baseline, polarangle, eccentricity and the pRF mask; with
    pRF models beyond the Gaussian also truemodel, n, sigmasurround and amplitudesurround; with
    connective fields (``config.cf_source``, :mod:`prfmap.synth.connective`) also truecfcenter,
    truecfsize, truecfgain, truecfbaseline and the cfsource and cftarget masks). Resting-state
    datasets (``config.rest``) have no events and no stimuli.

    The ground truth's ``amplitude`` and ``baseline`` are in percent signal change relative to
    each unit's noise-free run mean: the BOLD is ``baseline + amplitude * (HRF * overlap)`` where
    ``overlap`` is the fraction of the Gaussian's volume inside the aperture and the HRF has unit
    integral.

    Parameters
    ----------
    out_dir : path-like
        Destination (created; existing files are overwritten).
    config : SynthConfig, optional
        Settings; defaults give the demo dataset.

    Returns
    -------
    pathlib.Path
        ``out_dir``.
    """
    config = config or SynthConfig()
    if config.space not in SPACES:
        raise ValueError(f"space must be one of {SPACES}, got {config.space!r}")
    root = Path(out_dir)
    rng = np.random.default_rng(config.seed)
    model_rng = np.random.default_rng([config.seed, MODEL_SEED])
    cf_rng = np.random.default_rng([config.seed, CF_SEED])
    designs = [stimulus_apertures(config, order) for order in sweep_orders(config)]
    write_raw_top(root, config, designs[0])
    for run in range(2, config.runs + 1):
        if not config.rest and config.run_stimulus_name(run) != config.stimulus_name:
            write_stimulus(root, config, config.run_stimulus_name(run), designs[run - 1])
    fmriprep = root / "derivatives" / "fmriprep"
    truth_dir = root / "derivatives" / "prfsynth"
    write_json_atomic(
        fmriprep / "dataset_description.json",
        deriv_description(
            "fMRIPrep-like (synthetic)",
            "Synthetic stand-in for fMRIPrep outputs, written by prfmap-synth",
            root,
        ),
    )
    write_json_atomic(
        truth_dir / "dataset_description.json",
        deriv_description(
            "prfsynth ground truth", "Ground-truth pRF parameters of the synthetic dataset", root
        ),
    )
    write_json_atomic(truth_dir / "truth.json", truth_description(config))
    for s in range(1, config.subjects + 1):
        sub = f"{s:02d}"
        layout = make_layout(config, rng, model_rng)
        fields = None
        if config.connective:
            layout, fields = connective_fields(layout, config, cf_rng)
        if layout.anat is not None:
            write_native_anat(fmriprep / f"sub-{sub}" / "anat", sub, layout.anat)
        raw_func = root / f"sub-{sub}" / "func"
        der_func = fmriprep / f"sub-{sub}" / "func"
        mean_response = None
        for run in range(1, config.runs + 1):
            stem = bold_name(sub, config, run)
            respond = run <= config.runs - config.noise_runs
            design = designs[run - 1]
            if fields is None:
                response = prf_response(layout, design, config)
            elif config.rest:
                response = fields.drive(fields.rest_response(layout, config, design.shape[0], cf_rng))
            else:
                response = fields.drive(prf_response(layout, design, config))
            bold = measure_run(layout, response, config, rng, respond)
            mean_response = response
            timing = acquisition_timing(config, layout.n_slices)
            write_raw_run(raw_func, stem, config, design.shape[0], timing, run)
            write_raw_bold(raw_func / f"{stem}_bold.nii.gz", config, bold.shape[1], layout.n_slices, rng)
            write_bold(layout, bold, config, der_func, stem, rng)
            write_text_atomic(
                der_func / f"{stem}_desc-confounds_timeseries.tsv", confounds_tsv(bold, config, rng)
            )
        assert mean_response is not None
        write_truth(
            layout, truth_maps(layout, mean_response, config), config, truth_dir / f"sub-{sub}" / "func", sub
        )
        if fields is not None:
            write_cf_truth(
                layout, fields.truth_maps(), fields.masks(), config, truth_dir / f"sub-{sub}" / "func", sub
            )
        write_spatial_references(layout, fmriprep, sub, truth_dir / f"sub-{sub}" / "func")
    write_text_atomic(fmriprep / ".bidsignore", "\n".join(FMRIPREP_BIDSIGNORE) + "\n")
    write_text_atomic(truth_dir / ".bidsignore", "\n".join(TRUTH_BIDSIGNORE) + "\n")
    return root


def load_truth(root: str | os.PathLike, subject: str = "01") -> dict[str, np.ndarray]:
    """Read a synthetic dataset's ground truth as (units,) arrays in the BOLD's unit order.

    Parameters
    ----------
    root : path-like
        The dataset root (``out_dir`` of :func:`make_synthetic_dataset`).
    subject : str
        Participant label.

    Returns
    -------
    dict
        ``x y sigma amplitude baseline polarangle eccentricity`` (NaN where no pRF), the pRF
        units' HRF ``hrfdelay`` (s) and ``hrfdispersion``, every unit's ``sampletime`` (s within
        the TR; NaN where no signal), and the bool masks ``mask`` (units with a pRF) and ``noise``
        (units with signal but no pRF). Datasets with pRF models beyond the Gaussian add
        ``truemodel`` (code: 0 gauss, 1 css, 2 dog; NaN where no pRF), ``n``, ``sigmasurround``
        and ``amplitudesurround`` (NaN where the unit's model has no such parameter).
    """
    func = Path(root) / "derivatives" / "prfsynth" / f"sub-{subject}" / "func"
    dscalar = sorted(func.glob("*_boldmap.dscalar.nii"))
    if dscalar:
        img = nib.load(dscalar[0])
        names = list(img.header.get_axis(0).name)
        values = img.get_fdata(dtype=np.float32)
        out = {n: values[i] for i, n in enumerate(names)}
    else:
        out = {label: read_map(func, f"*_desc-{label}_boldmap") for label in TRUTH_LABELS}
        for label in MODEL_TRUTH_LABELS:
            if any(func.glob(f"*_desc-{label}_boldmap.*")):
                out[label] = read_map(func, f"*_desc-{label}_boldmap")
        out.update({key: read_map(func, f"*_desc-{desc}_mask") for key, desc in TRUTH_MASKS.items()})
        if any(func.glob("*_desc-truecfcenter_boldmap.*")):
            out.update({label: read_map(func, f"*_desc-{label}_boldmap") for label in CF_TRUTH_LABELS})
            for key, desc in CF_TRUTH_MASKS.items():
                out[key] = read_map(func, f"*_desc-{desc}_mask") > 0.5
    for key in TRUTH_MASKS:
        out[key] = out[key] > 0.5
    return out


def read_map(func: Path, pattern: str) -> np.ndarray:
    """A ground-truth map under ``func`` matching a name pattern, in load_bold's unit order."""
    gii = sorted(func.glob(pattern + ".func.gii"))
    if gii:
        by_hemi = {("L" if "hemi-L" in p.name else "R"): p for p in gii}
        return np.concatenate([np.asarray(nib.load(by_hemi[h]).darrays[0].data) for h in ("L", "R")])
    (path,) = sorted(func.glob(pattern + ".nii.gz"))
    brain = func.parents[2] / "fmriprep" / func.parent.name / "func"
    mask_path = sorted(brain.glob("*_desc-brain_mask.nii.gz"))[0]
    mask = np.asanyarray(nib.load(mask_path).dataobj) > 0
    return np.asarray(np.asanyarray(nib.load(path).dataobj)[mask], dtype=np.float32)
