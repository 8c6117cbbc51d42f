"""prfmap.io.validator runs the pinned BIDS validator (bids-validator-deno) and parses its report."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from prfmap.errors import NotBIDSError
from prfmap.io.validator import check_bids_dir, find_validator, validate_dataset


def minimal_raw(root: Path) -> Path:
    """A valid raw dataset: one participant's T1w image and its sidecar."""
    root.mkdir(parents=True)
    (root / "dataset_description.json").write_text(
        json.dumps({"Name": "tiny", "BIDSVersion": "1.10.0", "Authors": ["A", "B"]})
    )
    (root / "README").write_text("A tiny dataset for the validator tests.\n")
    anat = root / "sub-01" / "anat"
    anat.mkdir(parents=True)
    nib.save(nib.Nifti1Image(np.zeros((4, 4, 4), np.int16), np.eye(4)), anat / "sub-01_T1w.nii.gz")
    return root


def test_a_valid_dataset_exits_0(tmp_path):
    result = validate_dataset(minimal_raw(tmp_path / "raw"))
    assert result.exit_code == 0, result.summary()
    assert result.errors == []
    assert result.version, "the report names the schema version"


def test_errors_are_parsed_with_code_and_location(tmp_path):
    root = minimal_raw(tmp_path / "raw")
    (root / "sub-01" / "func").mkdir()
    (root / "sub-01" / "func" / "sub-01_task-x_bold.json").write_text(
        json.dumps({"RepetitionTime": 1.0, "TaskName": "x"})
    )
    result = validate_dataset(root)
    assert result.exit_code == 16
    assert ("SIDECAR_WITHOUT_DATAFILE", "") in result.counts()
    (issue,) = [i for i in result.errors if i.code == "SIDECAR_WITHOUT_DATAFILE"]
    assert issue.location == "/sub-01/func/sub-01_task-x_bold.json" and issue.dataset == ""
    assert "SIDECAR_WITHOUT_DATAFILE: /sub-01/func/sub-01_task-x_bold.json (×1)" in result.summary()


def test_recursive_reports_each_derivative_dataset(tmp_path):
    root = minimal_raw(tmp_path / "raw")
    deriv = root / "derivatives" / "tool"
    deriv.mkdir(parents=True)
    (deriv / "dataset_description.json").write_text(
        json.dumps(
            {
                "Name": "tool",
                "BIDSVersion": "1.10.0",
                "DatasetType": "derivative",
                "GeneratedBy": [{"Name": "tool"}],
            }
        )
    )
    (deriv / "notbids.txt").write_text("x")
    assert validate_dataset(root).exit_code == 0, "derivatives/ is not validated by default"
    result = validate_dataset(root, recursive=True)
    assert result.exit_code == 16
    (issue,) = [i for i in result.errors if i.code == "NOT_INCLUDED"]
    assert issue.dataset == "/derivatives/tool/" and issue.location == "/notbids.txt"


def test_the_pinned_validator_is_installed():
    assert find_validator() is not None, "requirements/test.txt pins bids-validator-deno"


def test_a_missing_validator_says_so(tmp_path):
    with pytest.raises(FileNotFoundError):
        validate_dataset(minimal_raw(tmp_path / "raw"), validator=str(tmp_path / "nothing"))


def test_check_bids_dir_passes_a_valid_dataset(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="prfmap.io.validator")
    result = check_bids_dir(minimal_raw(tmp_path / "raw"))
    assert result is not None and result.exit_code == 0
    assert "passes the BIDS validator" in caplog.text


def test_check_bids_dir_names_the_first_errors(tmp_path):
    root = minimal_raw(tmp_path / "raw")
    (root / "sub-01" / "func").mkdir()
    (root / "sub-01" / "func" / "sub-01_task-x_bold.json").write_text("{}")
    with pytest.raises(NotBIDSError) as info:
        check_bids_dir(root)
    assert info.value.exit_code == 16
    message = str(info.value)
    assert "\n" not in message and "SIDECAR_WITHOUT_DATAFILE" in message
    assert "--skip-bids-validation" in message


def test_check_bids_dir_without_a_validator_goes_on(tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="prfmap.io.validator")
    assert check_bids_dir(tmp_path, validator=str(tmp_path / "missing")) is None
    assert "could not run" in caplog.text
