"""Helpers of the command-line tests: run ``prfmap`` in a subprocess, synthetic datasets."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import prfmap

APP_DIR = Path(prfmap.__file__).resolve().parents[1]
HIDE_SHIM = """import sys
from importlib.machinery import PathFinder

HIDDEN = set({hidden!r})


class HidingPathFinder(PathFinder):
    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in HIDDEN:
            return None
        return PathFinder.find_spec(fullname, path, target)


sys.meta_path[:] = [HidingPathFinder if f is PathFinder else f for f in sys.meta_path]
"""


def subprocess_env(backend: str = "jax", hide: tuple[str, ...] = (), tmp: Path | None = None):
    """Environment for a ``prfmap`` subprocess on ``backend``, optionally hiding packages.

    A ``sitecustomize`` module replaces the path finder by one that does not find the hidden
    packages, so ``import`` fails and ``importlib.util.find_spec`` returns None for them, exactly
    as when they are not installed.
    """
    env = dict(os.environ)
    paths = [str(APP_DIR)]
    if hide:
        assert tmp is not None
        shim = tmp / "hide-shim"
        shim.mkdir(exist_ok=True)
        (shim / "sitecustomize.py").write_text(HIDE_SHIM.format(hidden=sorted(hide)))
        paths.insert(0, str(shim))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["KERAS_BACKEND"] = backend
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return env


def run_prfmap(
    *args: str | Path,
    backend: str = "jax",
    hide: tuple[str, ...] = (),
    tmp: Path | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess:
    """Run ``python -m prfmap.cli.run ARGS`` and return the completed process (text output)."""
    return subprocess.run(
        [sys.executable, "-m", "prfmap.cli.run", *map(str, args)],
        env=subprocess_env(backend, hide, tmp),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def output_files(output_dir: Path) -> list[str]:
    """Files under ``output_dir`` (relative, sorted); empty when it does not exist."""
    if not output_dir.exists():
        return []
    return sorted(str(p.relative_to(output_dir)) for p in output_dir.rglob("*") if p.is_file())


def only_logs(output_dir: Path) -> bool:
    """True when ``output_dir`` holds nothing but log files (or does not exist)."""
    return all(f.startswith("logs/") and f.endswith(".log") for f in output_files(output_dir))


def synthesise(out: Path, **settings) -> Path:
    """Write a ``prfmap-synth`` dataset with ``SynthConfig(**settings)`` and return its root."""
    from prfmap.synth import SynthConfig, make_synthetic_dataset

    return make_synthetic_dataset(out, SynthConfig(**settings))


def accuracy(bids_dir: Path, output_dir: Path, subject: str = "01") -> dict[str, float]:
    """Recovery of the ground truth in the units that have a pRF.

    Returns the median centre error (degrees), the median absolute sigma error (degrees), the
    fraction of pRF units with finite estimates, and their number.
    """
    import numpy as np

    from prfmap.synth import load_truth

    truth = load_truth(bids_dir, subject)
    est = read_maps(bids_dir, output_dir, ("x", "y", "sigma"), subject)
    prf = truth["mask"]
    fitted = np.isfinite(est["x"][prf]) & np.isfinite(est["sigma"][prf])
    centre = np.hypot(est["x"] - truth["x"], est["y"] - truth["y"])[prf]
    sigma = np.abs(est["sigma"] - truth["sigma"])[prf]
    return {
        "centre": float(np.median(np.where(fitted, centre, np.inf))),
        "sigma": float(np.median(np.where(fitted, sigma, np.inf))),
        "fitted": float(fitted.mean()),
        "n_prf": int(prf.sum()),
    }


def read_maps(bids_dir: Path, output_dir: Path, labels, subject: str = "01") -> dict:
    """prfmap's maps as (units,) arrays in the BOLD's unit order (GIFTI, CIFTI or volume)."""
    import nibabel as nib
    import numpy as np

    func = output_dir / f"sub-{subject}" / "func"
    dscalar = sorted(func.glob("*_boldmap.dscalar.nii"))
    if dscalar:
        img = nib.load(dscalar[0])
        names = list(img.header.get_axis(0).name)
        data = img.get_fdata(dtype=np.float32)
        return {label: data[names.index(label)] for label in labels}
    out = {}
    for label in labels:
        gifti = sorted(func.glob(f"*_param-{label}_boldmap.func.gii"))
        if gifti:
            assert [("hemi-L" in p.name, "hemi-R" in p.name) for p in gifti] == [
                (True, False), (False, True)
            ]  # fmt: skip
            out[label] = np.concatenate([nib.load(p).darrays[0].data for p in gifti])
            continue
        (path,) = sorted(func.glob(f"*_param-{label}_boldmap.nii.gz"))
        fmriprep = bids_dir / "derivatives" / "fmriprep" / f"sub-{subject}" / "func"
        mask_path = sorted(fmriprep.glob("*_desc-brain_mask.nii.gz"))[0]
        mask = np.asanyarray(nib.load(mask_path).dataobj) > 0
        out[label] = np.asarray(nib.load(path).dataobj, dtype=np.float32)[mask]
    return out


@pytest.fixture(scope="session")
def small_synth(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small fsaverage5 synthetic dataset (one participant, two runs), made once."""
    return synthesise(tmp_path_factory.mktemp("synth") / "bids", small=True)


@pytest.fixture
def bids_copy(small_synth: Path, tmp_path: Path) -> Path:
    """A private copy of :func:`small_synth` that a test may break."""
    dest = tmp_path / "bids"
    shutil.copytree(small_synth, dest)
    return dest
