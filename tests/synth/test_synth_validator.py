"""prfmap-synth writes datasets that pass the current BIDS validator: the raw dataset (with its
small raw BOLD stand-ins), its fMRIPrep-like derivatives (with fMRIPrep's .bidsignore) and the
ground truth; every warning left is one the documentation (docs/outputs.md) lists."""

from __future__ import annotations

import pytest

from helpers import documented_warnings
from prfmap.io.validator import validate_dataset
from prfmap.synth.config import SPACES, SynthConfig
from prfmap.synth.dataset import make_synthetic_dataset


@pytest.mark.parametrize("space", SPACES)
def test_synthetic_datasets_pass_the_validator(tmp_path, space):
    root = make_synthetic_dataset(
        tmp_path / "bids", SynthConfig(subjects=1, runs=2, space=space, small=True, dummy_scans=2)
    )
    for dataset in (root, root / "derivatives" / "fmriprep", root / "derivatives" / "prfsynth"):
        result = validate_dataset(dataset)
        assert result.exit_code == 0, f"{dataset.name}: {result.summary()}"
        undocumented = {i.code for i in result.warnings} - documented_warnings()
        assert not undocumented, f"{dataset.name}: warnings not in docs/outputs.md: {undocumented}"
    raw_bold = sorted((root / "sub-01" / "func").glob("*_bold.nii.gz"))
    assert len(raw_bold) == 2 and all(p.stat().st_size < 20_000 for p in raw_bold)


@pytest.mark.parametrize("space", ["fsaverage5", "fsLR", "T1w"])
def test_ground_truth_of_several_prf_models_passes_the_validator(tmp_path, space):
    root = make_synthetic_dataset(
        tmp_path / "bids", SynthConfig(runs=1, space=space, small=True, prf_models=("gauss", "css", "dog"))
    )
    result = validate_dataset(root / "derivatives" / "prfsynth")
    assert result.exit_code == 0, result.summary()
    undocumented = {i.code for i in result.warnings} - documented_warnings()
    assert not undocumented, f"warnings not in docs/outputs.md: {undocumented}"
