"""Small hand-made BIDS datasets with fMRIPrep-style derivatives for the I/O tests."""

from __future__ import annotations

import json
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

N_VOL = 12
N_VERT = {"L": 40, "R": 30}
VOL_SHAPE = (4, 5, 6)


def write_json(path: Path, content: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content))


def gifti_series(data: np.ndarray, hemi: str) -> nib.gifti.GiftiImage:
    meta = nib.gifti.GiftiMetaData(
        {"AnatomicalStructurePrimary": {"L": "CortexLeft", "R": "CortexRight"}[hemi]}
    )
    arrays = [
        nib.gifti.GiftiDataArray(
            np.ascontiguousarray(data[:, t], dtype=np.float32),
            intent="NIFTI_INTENT_TIME_SERIES",
            datatype="NIFTI_TYPE_FLOAT32",
        )
        for t in range(data.shape[1])
    ]
    return nib.gifti.GiftiImage(darrays=arrays, meta=meta)


def brain_models() -> nib.cifti2.BrainModelAxis:
    left = nib.cifti2.BrainModelAxis.from_surface(np.arange(0, 20), 32492, "CortexLeft")
    right = nib.cifti2.BrainModelAxis.from_surface(np.arange(3, 18), 32492, "CortexRight")
    mask = np.zeros((3, 3, 3), bool)
    mask[1, 1, :] = True
    sub = nib.cifti2.BrainModelAxis.from_mask(mask, name="thalamus_left", affine=np.eye(4))
    return left + right + sub


class Dataset:
    """Paths and arrays of a small dataset."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fmriprep = root / "derivatives" / "fmriprep"
        self.rng = np.random.default_rng(0)
        self.arrays: dict[str, np.ndarray] = {}

    def func(self, sub: str = "01", raw: bool = False) -> Path:
        base = self.root if raw else self.fmriprep
        return base / f"sub-{sub}" / "func"


def build_dataset(root: Path, subjects=("01",), runs=(1, 2), tr=1.5, events=True) -> Dataset:
    ds = Dataset(root)
    write_json(root / "dataset_description.json", {"Name": "test", "BIDSVersion": "1.9.0"})
    write_json(
        ds.fmriprep / "dataset_description.json",
        {
            "Name": "fMRIPrep",
            "BIDSVersion": "1.9.0",
            "DatasetType": "derivative",
            "GeneratedBy": [{"Name": "fMRIPrep"}],
        },
    )
    stim = root / "stimuli" / "bars.npy"
    stim.parent.mkdir(parents=True)
    np.save(stim, np.zeros((N_VOL, 6, 6), np.float32))
    write_json(root / "stimuli" / "bars.json", {"FieldOfViewDeg": 10.0})
    write_json(root / "task-prf_bold.json", {"RepetitionTime": tr, "TaskName": "prf"})
    for sub in subjects:
        raw = ds.func(sub, raw=True)
        raw.mkdir(parents=True)
        der = ds.func(sub)
        der.mkdir(parents=True)
        for run in runs:
            stem = f"sub-{sub}_task-prf_run-{run}"
            if events:
                (raw / f"{stem}_events.tsv").write_text(
                    f"onset\tduration\tstim_file\n0\t{N_VOL * tr}\tbars.npy\n"
                )
            (raw / f"{stem}_bold.json").write_text(json.dumps({"TaskName": "prf"}))
            for hemi, n in N_VERT.items():
                data = ds.rng.normal(100, 5, (n, N_VOL)).astype(np.float32)
                path = der / f"{stem}_hemi-{hemi}_space-fsaverage5_bold.func.gii"
                nib.save(gifti_series(data, hemi), path)
                ds.arrays[str(path)] = data
            bm = brain_models()
            data = ds.rng.normal(100, 5, (len(bm), N_VOL)).astype(np.float32)
            series = nib.cifti2.SeriesAxis(0, tr, N_VOL)
            path = der / f"{stem}_space-fsLR_den-91k_bold.dtseries.nii"
            nib.save(nib.cifti2.Cifti2Image(data.T, header=(series, bm)), path)
            ds.arrays[str(path)] = data
            affine = np.diag([2.0, 2.0, 2.0, 1.0])
            affine[:3, 3] = [-4, -5, -6]
            vol = ds.rng.normal(100, 5, (*VOL_SHAPE, N_VOL)).astype(np.float32)
            mask = np.zeros(VOL_SHAPE, np.uint8)
            mask[1:3, 1:4, 2:5] = 1
            for space in ("T1w", "MNI152NLin2009cAsym"):
                res = "_res-2" if space != "T1w" else ""
                path = der / f"{stem}_space-{space}{res}_desc-preproc_bold.nii.gz"
                img = nib.Nifti1Image(vol, affine)
                img.header.set_zooms((2.0, 2.0, 2.0, tr))
                nib.save(img, path)
                ds.arrays[str(path)] = vol
                mpath = der / f"{stem}_space-{space}{res}_desc-brain_mask.nii.gz"
                nib.save(nib.Nifti1Image(mask, affine), mpath)
                ds.arrays[str(mpath)] = mask
            conf = der / f"{stem}_desc-confounds_timeseries.tsv"
            lines = ["global_signal\tframewise_displacement\tnon_steady_state_outlier00"]
            for t in range(N_VOL):
                lines.append(f"{100 + t}\t{'n/a' if t == 0 else 0.1 * t}\t{int(t == 0)}")
            conf.write_text("\n".join(lines) + "\n")
    return ds


@pytest.fixture
def dataset(tmp_path: Path) -> Dataset:
    return build_dataset(tmp_path / "bids")


@pytest.fixture
def make_dataset(tmp_path: Path):
    """Factory: ``make_dataset(subjects=..., runs=..., tr=..., events=...)``."""

    def make(**kwargs) -> Dataset:
        return build_dataset(tmp_path / "bids", **kwargs)

    return make
