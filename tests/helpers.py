"""Helpers shared by the test folders: ``prfmap`` subprocesses, synthetic datasets, output checks.

Fixtures live in the folders' ``conftest.py`` files; what a test calls directly lives here
(``pythonpath = ["tests"]`` in pyproject.toml makes ``import helpers`` work in every folder).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import nibabel as nib
import numpy as np
import pytest

import prfmap
from prfmap.io.runs import RunInput
from prfmap.synth import SynthConfig, load_truth, make_synthetic_dataset

APP_DIR = Path(prfmap.__file__).resolve().parents[1]
REPO = Path(__file__).resolve().parents[1]
BACKENDS = ("jax", "torch", "tensorflow")
CHUNK = 128
"""Units per checkpoint chunk in the reliability tests' subprocesses."""

# -- prfmap in a subprocess (command-line tests) ------------------------------------------------------

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


TESTS_DIR = Path(__file__).resolve().parent
ENGINE_TESTS = TESTS_DIR / "engine"


def run_python(
    backend: str, code: str, *args: str | Path, compiled: bool = False, timeout: float = 900
) -> subprocess.CompletedProcess:
    """Run Python ``code`` in a fresh process on ``backend``; a non-zero exit fails the calling test.

    The engine's tests compare backends, or a backend with itself compiled and eager, in subprocesses:
    Keras picks its backend once per process, and a backend that crashes (TensorFlow's oneDNN
    products, issue 9) fails one test instead of the session. ``code`` can import ``app/``'s
    ``prfmap``, ``tests/`` (``helpers``, ``toys``) and the engine tests' folders (``conftest``'s
    stimuli, the test modules by name); ``args`` are its ``sys.argv[1:]``.

    Parameters
    ----------
    backend : {"jax", "torch", "tensorflow"}
        ``KERAS_BACKEND``.
    code : str
        The program.
    *args : str or Path
        Its arguments.
    compiled : bool
        ``PRFMAP_COMPILE``: the backend's compiler on, or every function eager.
    timeout : float
        Seconds.

    Returns
    -------
    subprocess.CompletedProcess
        With its text output.
    """
    folders = sorted({path.parent for path in ENGINE_TESTS.rglob("test_*.py")} | {ENGINE_TESTS})
    paths = [*map(str, folders), str(APP_DIR), str(TESTS_DIR)]  # the engine's conftest before tests/'
    env = {**os.environ, "KERAS_BACKEND": backend, "PRFMAP_COMPILE": "1" if compiled else "0"}
    env["PYTHONPATH"] = os.pathsep.join([*paths, env.get("PYTHONPATH", "")])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    proc = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert proc.returncode == 0, f"{backend}: exit {proc.returncode}: {proc.stderr[-3000:]}"
    return proc


def ar1_noise(
    rng: np.random.Generator, shape: tuple[int, int], run_length: int, rho: float = 0.3
) -> np.ndarray:
    """Unit-variance AR(1) noise (units, frames), coefficient ``rho``, afresh each ``run_length`` frames."""
    e = rng.standard_normal(shape)
    for t in range(1, shape[1]):
        if t % run_length:
            e[:, t] = rho * e[:, t - 1] + np.sqrt(1 - rho**2) * e[:, t]
    return e


def backend_result(backend: str, code: str, tmp: Path, *, compiled: bool = False) -> Any:
    """The JSON-able ``result`` that Python ``code`` assigns, computed on ``backend`` (:func:`run_python`).

    Parameters
    ----------
    backend : {"jax", "torch", "tensorflow"}
        ``KERAS_BACKEND``.
    code : str
        A program that assigns ``result``.
    tmp : Path
        A folder for the result's file.
    compiled : bool
        ``PRFMAP_COMPILE``.

    Returns
    -------
    Any
        ``result``, through JSON.
    """
    out = tmp / f"result-{backend}-{'compiled' if compiled else 'eager'}.json"
    save = "\nimport json as _json, sys as _sys\n_json.dump(result, open(_sys.argv[1], 'w'))\n"
    run_python(backend, code + save, out, compiled=compiled)
    return json.loads(out.read_text())


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


def run_input(kind: str, bold, mask=None, space: str = "x", den: str | None = None) -> RunInput:
    """A run of sub-01 (task prf, run 1, TR 1.5 s) with only its BOLD (and mask) given."""
    return RunInput(
        subject="01",
        session=None,
        task="prf",
        run=1,
        space=space,
        den=den,
        kind=kind,
        bold=bold,
        mask=mask,
        tr=1.5,
        events=None,
        confounds=None,
        stim_file=None,
    )


def documented_warnings() -> set[str]:
    """The BIDS validator's warning codes that the outputs page's BIDS-validation section lists."""
    text = (REPO / "docs" / "outputs.md").read_text()
    section = text[text.index("## BIDS validation") :]
    section = section[: section.find("\n## ", 1)]
    return set(re.findall(r"`([A-Z][A-Z_]+)`", section))


def output_files(output_dir: Path) -> list[str]:
    """Files under ``output_dir`` (relative, sorted); empty when it does not exist."""
    if not output_dir.exists():
        return []
    return sorted(str(p.relative_to(output_dir)) for p in output_dir.rglob("*") if p.is_file())


def only_logs(output_dir: Path) -> bool:
    """True when ``output_dir`` holds nothing but the run's logs and configuration (or does not exist)."""
    return all(
        f.startswith("logs/") and f.endswith((".log", "_config.json")) for f in output_files(output_dir)
    )


def synthesise(out: Path, **settings) -> Path:
    """Write a ``prfmap-synth`` dataset with ``SynthConfig(**settings)`` and return its root."""
    return make_synthetic_dataset(out, SynthConfig(**settings))


def accuracy(bids_dir: Path, output_dir: Path, subject: str = "01") -> dict[str, float]:
    """Recovery of the ground truth in the units that have a pRF.

    Returns the median centre error (degrees), the median absolute sigma error (degrees), the
    fraction of pRF units with finite estimates, and their number.
    """
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


def read_maps(bids_dir: Path, output_dir: Path, labels, subject: str = "01", stat: str | None = None) -> dict:
    """prfmap's maps (or, with ``stat``, that statistic's maps) as (units,) arrays in the BOLD's unit order.

    GIFTI, CIFTI or volume.
    """
    func = output_dir / f"sub-{subject}" / "func"

    def ours(paths) -> list[Path]:
        return sorted(p for p in paths if ("_stat-" in p.name) == (stat is not None))

    entity = f"_stat-{stat}" if stat else ""
    dscalar = ours(func.glob(f"*{entity}_boldmap.dscalar.nii"))
    if dscalar:
        img = nib.load(dscalar[0])
        names = list(img.header.get_axis(0).name)
        data = img.get_fdata(dtype=np.float32)
        return {label: data[names.index(label)] for label in labels}
    out = {}
    for label in labels:
        gifti = ours(func.glob(f"*_model-*{entity}_desc-{label}_boldmap.func.gii"))
        if gifti:
            assert [("hemi-L" in p.name, "hemi-R" in p.name) for p in gifti] == [(True, False), (False, True)]
            out[label] = np.concatenate([nib.load(p).darrays[0].data for p in gifti])
            continue
        (path,) = ours(func.glob(f"*_model-*{entity}_desc-{label}_boldmap.nii.gz"))
        fmriprep = bids_dir / "derivatives" / "fmriprep" / f"sub-{subject}" / "func"
        mask_path = sorted(fmriprep.glob("*_desc-brain_mask.nii.gz"))[0]
        mask = np.asanyarray(nib.load(mask_path).dataobj) > 0
        out[label] = np.asarray(nib.load(path).dataobj, dtype=np.float32)[mask]
    return out


# -- checkpointed participant runs (reliability tests) -------------------------------------------


def chunked_env(chunk: int | None = CHUNK) -> dict[str, str]:
    """Environment of a ``prfmap`` subprocess on JAX with ``chunk`` units per checkpoint."""
    out = dict(os.environ)
    out["PYTHONPATH"] = os.pathsep.join(p for p in (str(APP_DIR), out.get("PYTHONPATH")) if p)
    out["KERAS_BACKEND"] = "jax"
    out.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    if chunk:
        out["PRFMAP_CHUNK_UNITS"] = str(chunk)
    else:
        out.pop("PRFMAP_CHUNK_UNITS", None)
    return out


def participant_command(bids: Path, out: Path, *args: str | Path) -> list[str]:
    """``python -m prfmap.cli.run BIDS OUT participant ARGS`` on one core without reports."""
    return [
        sys.executable,
        "-m",
        "prfmap.cli.run",
        str(bids),
        str(out),
        "participant",
        "--no-report",
        "--nprocs",
        "1",
        *map(str, args),
    ]


def run_participant(
    bids: Path, out: Path, *args: str | Path, chunk: int | None = CHUNK
) -> subprocess.CompletedProcess:
    """Run ``prfmap`` to the end (text output captured)."""
    return subprocess.run(
        participant_command(bids, out, *args),
        env=chunked_env(chunk),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def start_participant(
    bids: Path, out: Path, *args: str | Path, chunk: int | None = CHUNK, tag: str = ""
) -> subprocess.Popen:
    """Start ``prfmap`` in the background, output to ``<out><tag>.stdout`` and ``.stderr`` next to ``out``."""
    log = out.parent / f"{out.name}{tag}.stdout"
    err = out.parent / f"{out.name}{tag}.stderr"
    return subprocess.Popen(
        participant_command(bids, out, *args),
        env=chunked_env(chunk),
        stdout=log.open("w"),
        stderr=err.open("w"),
        text=True,
    )


def stdout_of(out: Path, tag: str = "") -> str:
    """What a run started by :func:`start_participant` printed (its ``<out><tag>.stdout``)."""
    path = out.parent / f"{out.name}{tag}.stdout"
    return path.read_text() if path.exists() else ""


def catches_stop_signals(pid: int) -> bool:
    """True once process ``pid`` has handlers of its own for SIGTERM and SIGINT (Linux's ``SigCgt``)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(re.search(r"^SigCgt:\s*([0-9a-f]+)$", status, re.MULTILINE).group(1), 16)
    return all(caught >> (s - 1) & 1 for s in (signal.SIGTERM, signal.SIGINT))


def wait_for(
    condition: Callable[[], bool], proc: subprocess.Popen | None = None, timeout: float = 300
) -> None:
    """Poll ``condition`` until true; fail if ``proc`` ends first or time runs out."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"prfmap ended (exit {proc.returncode}) before the awaited state")
        if time.monotonic() > deadline:
            pytest.fail("timed out waiting for the run to reach the awaited state")
        time.sleep(0.02)


def chunk_files(work: Path) -> list[Path]:
    """Finished checkpoint chunks under a work dir."""
    return sorted(work.glob("checkpoints/**/chunk-*.npz"))


def map_files(out: Path) -> list[Path]:
    """Every parameter map under an output dir (relative, sorted)."""
    return sorted(p.relative_to(out) for p in out.rglob("*_boldmap.*") if not p.name.endswith(".json"))


def map_bytes(out: Path) -> dict[str, bytes]:
    """The data bytes of every map, by relative path."""
    return {str(p): np.asarray(nib.load(out / p).dataobj).tobytes() for p in map_files(out)}


# -- the container recipes (container tests) -----------------------------------------------------


def project_version() -> str:
    """The version in pyproject.toml, which every image tag and label must carry."""
    text = (REPO / "pyproject.toml").read_text()
    return re.search(r'^version = "([^"]+)"', text, re.MULTILINE).group(1)


def image_script(name: str) -> ModuleType:
    """Import one of the scripts under docker/image/ that run while the image builds."""
    module_name = f"prfmap_image_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, REPO / "docker/image" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


# -- fit settings as a fit records them ------------------------------------------------------------------

FIT_SETTINGS = {
    "model": "gauss",
    "refine": "lm",
    "hrf": "SPM canonical",
    "hrf_model": {},
    "hrf_bases": ("canonical",),
    "slice_time_ref": 0.5,
    "grid_points": 1000,
    "seed_candidates": 0,
    "refine_r2_min": 0.05,
    "units_refined": 10,
    "iterations": 5,
    "unit_iterations": 50,
    "pixels": 100,
    "max_iter": 30,
    "fixed": {},
    "dtype": "float32",
    "units": 12,
    "units_fitted": 10,
    "backend": "jax",
    "backend_version": "0.0",
    "keras_version": "3.0",
    "device": "cpu",
    "compiled": True,
    "seed": 0,
    "bounds": {},
}


def fit_settings(**changes):
    """A :class:`prfmap.engine.FitSettings` as a fit of the toy sizes above records it, with ``changes``."""
    from prfmap.engine.catalog.settings import FitSettings

    return FitSettings(**{**FIT_SETTINGS, **changes})


def grid_mesh(n: int, spacing: float) -> tuple[np.ndarray, np.ndarray]:
    """A flat square mesh of ``n`` × ``n`` vertices ``spacing`` mm apart, two triangles per square.

    Parameters
    ----------
    n : int
        Vertices along each side.
    spacing : float
        Distance between neighbours (mm).

    Returns
    -------
    tuple
        Coordinates (n², 3) and triangles (2 (n - 1)², 3).
    """
    rows, cols = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    coords = np.c_[cols.ravel() * spacing, rows.ravel() * spacing, np.zeros(n * n)]
    index = np.arange(n * n).reshape(n, n)
    a, b, c, d = (
        index[:-1, :-1].ravel(),
        index[:-1, 1:].ravel(),
        index[1:, :-1].ravel(),
        index[1:, 1:].ravel(),
    )
    return coords, np.concatenate([np.c_[a, b, d], np.c_[a, d, c]])


def write_freesurfer_label(path: Path, vertices: np.ndarray) -> Path:
    """A FreeSurfer ``.label`` file (ASCII: a comment, the count, then vertex x y z value per line)."""
    lines = ["#!ascii label, from the tests", str(len(vertices))]
    lines += [f"{v} 0.0 0.0 0.0 1.0" for v in vertices]
    path.write_text("\n".join(lines) + "\n")
    return path
