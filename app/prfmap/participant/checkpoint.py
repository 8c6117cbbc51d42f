"""Resumable fitting: the units are fitted in chunks, each saved atomically as soon as it is done.

A chunk file lives in ``<folder>/<key>/`` where ``key`` hashes everything that determines the
result (the data and stimulus arrays, the input files' names, sizes and modification times, the
fit arguments, the chunk size, prfmap's version and the backend). A run started again with the same
arguments reuses the chunks of that key and fits only the missing ones; any change gives another key,
so old chunks are ignored rather than mixed in.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import time
import zipfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from prfmap import __version__
from prfmap.engine import FitOptions, FitResult, Stimulus, backend_info
from prfmap.engine.catalog.result import PER_KEY_UNCERTAINTY, Uncertainty
from prfmap.engine.catalog.settings import FitSettings
from prfmap.engine.options import array_digest, jsonable
from prfmap.io.atomic import atomic_path, write_text_atomic
from prfmap.runtime.signals import check_stop

if TYPE_CHECKING:
    from prfmap.engine import FitCache

logger = logging.getLogger(__name__)
CHECKPOINT_FORMAT = (
    7  # 2: per-unit status; 3: and its uncertainty; 4: the fit keyed by FitOptions.identity();
)
# 5: and the maximum-likelihood σ and its standard error under a prior; 6: that error at least the
# one its profile-likelihood interval implies; 7: σ's interval from its likelihood path, and the
# standard errors without the HRF's variability


def file_identity(paths: Sequence[str | os.PathLike[str]]) -> list[list[Any]]:
    """``[path, size, mtime_ns]`` of each input file (a missing file gets ``-1``s).

    Parameters
    ----------
    paths : sequence of path-like
        Input files.

    Returns
    -------
    list
        ``[path, size, mtime_ns]`` per file.
    """
    out = []
    for p in paths:
        try:
            st = os.stat(p)
            out.append([str(p), st.st_size, st.st_mtime_ns])
        except OSError:
            out.append([str(p), -1, -1])
    return out


def checkpoint_key(identity: Mapping[str, Any]) -> str:
    """The key (24 hex digits) of a JSON-able identity.

    Parameters
    ----------
    identity : mapping
        What determines a fit's result (JSON-able).

    Returns
    -------
    str
    """
    text = json.dumps(identity, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _save_chunk(path: Path, arrays: Mapping[str, np.ndarray], meta: Mapping[str, Any]) -> None:
    with atomic_path(path, fsync=True) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, __meta__=np.array(json.dumps(meta)), **arrays)


def _load_chunk(path: Path) -> tuple[dict[str, np.ndarray], dict[str, Any]] | None:
    try:
        with np.load(path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files if k != "__meta__"}
            meta = json.loads(str(npz["__meta__"]))
    except (OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        logger.warning("ignoring unreadable checkpoint %s (%s)", path.name, err)
        return None
    return arrays, meta


def _chunk_arrays(result: Any, predictions: bool) -> dict[str, np.ndarray]:
    arrays = {f"param:{k}": np.asarray(v) for k, v in result.params.items()}
    arrays |= {f"flag:{k}": np.asarray(v) for k, v in result.flags.items()}
    arrays["r2"], arrays["loss"] = np.asarray(result.r2), np.asarray(result.loss)
    arrays["status"] = np.asarray(result.status)
    unc = result.uncertainty
    if unc is not None:
        for part in PER_KEY_UNCERTAINTY:
            arrays |= {f"{part}:{k}": np.asarray(v) for k, v in getattr(unc, part).items()}
        arrays["dof"] = np.asarray(unc.dof)
    if predictions:
        arrays["predictions"] = np.asarray(result.predictions, dtype=np.float32)
    return arrays


def _merge(model: str, chunks: list[tuple[dict[str, np.ndarray], dict[str, Any]]], chunk: int) -> FitResult:
    first = chunks[0][0]
    params = {
        k.partition(":")[2]: np.concatenate([c[0][k] for c in chunks])
        for k in first
        if k.startswith("param:")
    }
    flag_keys = sorted({k for c in chunks for k in c[0] if k.startswith("flag:")})
    off = [np.zeros(len(c[0]["r2"]), dtype=bool) for c in chunks]
    flags = {  # a flag a chunk lacks is off there (a comparison's chunk without units kept Gaussian)
        k.partition(":")[2]: np.concatenate([c[0].get(k, o) for c, o in zip(chunks, off, strict=True)])
        for k in flag_keys
    }
    predictions = None
    if "predictions" in first:
        predictions = np.concatenate([c[0]["predictions"] for c in chunks])
    first_settings, *others = (FitSettings.from_dict(c[1]["settings"]) for c in chunks)
    settings = first_settings.merged(others, chunk)
    timings: dict[str, float] = {}
    for _, meta in chunks:
        for k, v in meta["timings"].items():
            timings[k] = timings.get(k, 0.0) + float(v)
    r2 = np.concatenate([c[0]["r2"] for c in chunks])
    loss = np.concatenate([c[0]["loss"] for c in chunks])
    status = np.concatenate([c[0]["status"] for c in chunks])
    uncertainty = None
    if "dof" in first:
        parts = {
            part: {
                k.partition(":")[2]: np.concatenate([c[0][k] for c in chunks])
                for k in first
                if k.startswith(f"{part}:")
            }
            for part in PER_KEY_UNCERTAINTY
        }
        dof = np.concatenate([c[0]["dof"] for c in chunks])
        uncertainty = Uncertainty(dof=dof, seconds=timings.get("uncertainty", 0.0), **parts)
    return FitResult(model, params, r2, loss, timings, settings, predictions, status, flags, uncertainty)


@dataclass(frozen=True)
class Checkpoints:
    """Where a fit's chunks are saved, how many units each holds, and what else enters their key.

    Attributes
    ----------
    folder : Path
        Where this fit's checkpoints live (one sub-folder per key).
    chunk : int
        Units per chunk.
    inputs : tuple of path-like
        Input files whose names, sizes and modification times enter the key.
    name : str
        The fit's name in log messages.
    how_to_resume : str
        What to tell the user when a stop signal ends the run.
    budget : JSON-able, optional
        What identifies the memory budget in the key instead of ``chunk`` and ``options.mem_gb``, e.g.
        ``"auto"`` for a default derived from the memory available now. A run resuming a key then
        uses the chunk size and engine budget saved with it, so all its chunks share their tiles.
    labels : mapping
        What else tells this fit's checkpoints apart (a fold's held-out run), JSON-able.
    owned : list of Path, optional
        The key's folder is appended to it: what this fit owns, and :func:`remove_checkpoints`
        removes once its outputs are published.
    """

    folder: Path
    chunk: int
    inputs: tuple[str | os.PathLike[str], ...] = ()
    name: str = "fit"
    how_to_resume: str = "run the same command again to resume"
    budget: Any = None
    labels: Mapping[str, Any] = field(default_factory=dict)
    owned: list[Path] | None = None


class PilotPrior:
    """The participant's prior on log σ (``sigma_prior="eccentricity"``), one for all of a fit's chunks.

    Estimated from a pilot sample of all the fit's units (every k-th,
    :func:`prfmap.engine.estimate.sigma_prior.pilot_units`), so it depends neither on the chunking
    nor on any unit's SNR: the first chunk fitted takes the pilot units outside it along
    (:class:`prfmap.engine.fit.sigma_prior.SigmaPilot`) and the later chunks use the prior it found.
    A chunk reused from a checkpoint gives the prior it saved.

    Parameters
    ----------
    data : ndarray, shape (units, frames)
        The fit's time courses (units with a non-finite value are no pilot units).
    """

    def __init__(self, data: np.ndarray) -> None:
        # Deferred: the engine's compiled code (and Keras) loads when the first chunk is fitted.
        from prfmap.engine.estimate.sigma_prior import pilot_rows

        self.rows = pilot_rows(data)
        self.prior: Any = None
        self.known = False

    def found(self, prior: Any) -> None:
        """Keep the prior a chunk estimated (None: too few refined pilot units).

        Parameters
        ----------
        prior : SigmaPrior or None
            The prior.
        """
        self.prior, self.known = prior, True

    def options(self, options: FitOptions, data: np.ndarray, start: int, stop: int) -> FitOptions:
        """``options`` for the chunk ``start:stop``: the pilot before the prior is known, then the prior.

        Parameters
        ----------
        options : FitOptions
            The fit's (``sigma_prior="eccentricity"``).
        data : ndarray
            The fit's time courses.
        start, stop : int
            The chunk's units.

        Returns
        -------
        FitOptions
        """
        if self.known:
            return replace(options, sigma_prior=self.prior or "none")
        # Deferred: the engine's compiled code (and Keras) loads when the first chunk is fitted.
        from prfmap.engine.fit.sigma_prior import SigmaPilot

        inside = (self.rows >= start) & (self.rows < stop)
        pilot = SigmaPilot(self.rows[inside] - start, data[self.rows[~inside]], self.found)
        return replace(options, sigma_prior=pilot)

    def record(self) -> dict[str, Any]:
        """The prior as a chunk's metadata saves it (exactly: JSON keeps a float's every digit).

        Returns
        -------
        dict
        """
        prior = self.prior
        saved = None if prior is None else [prior.intercept, prior.slope, prior.spread, prior.units]
        return {"sigma_prior": saved}

    def describe(self) -> str:
        """The prior for the log.

        Returns
        -------
        str
        """
        prior = self.prior
        if prior is None:
            return "too few refined pilot units, none"
        return (
            f"from {prior.units} refined pilot units: log sigma = {prior.intercept:.3f} + "
            f"{prior.slope:.3f} ecc, spread {prior.spread:.3f}"
        )

    def restore(self, meta: Mapping[str, Any]) -> None:
        """Take the prior a reused chunk saved (:meth:`record`), if it saved one.

        Parameters
        ----------
        meta : mapping
            The chunk's metadata.
        """
        if self.known or "sigma_prior" not in meta:
            return
        # Deferred: the engine's compiled code (and Keras) loads when the first chunk is fitted.
        from prfmap.engine.fit.sigma_prior import SigmaPrior

        saved = meta["sigma_prior"]
        self.found(None if saved is None else SigmaPrior(*saved[:3], int(saved[3])))


def fit_chunked(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    options: FitOptions,
    store: Checkpoints,
    *,
    nuisance: np.ndarray | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    cache: FitCache | None = None,
) -> FitResult:
    """Fit ``data`` with :func:`prfmap.engine.fit_prf` chunk by chunk, reusing saved chunks.

    The key of the chunks is :meth:`FitOptions.identity <prfmap.engine.FitOptions.identity>` with
    ``store.labels``, the digests of the arrays, the input files, the memory budget, prfmap's
    version and the backend: the options that make the fit are the options that name it.

    Parameters
    ----------
    data, stim, tr : ndarray, prfmap.engine.Stimulus, float
        (units, frames) preprocessed time courses, the stimulus and the repetition time (s).
    options : FitOptions
        What the fit does (``options.mem_gb`` unless the key's saved budget overrides it).
    store : Checkpoints
        Where the chunks go and what else tells them apart.
    nuisance : ndarray, optional
        (frames, k) regressors removed by preprocessing (``fit_prf(nuisance=)``).
    progress : callable, optional
        ``progress(stage, done, total)``, passed on to the engine, plus ``("chunks", i, n)``.
    cache : prfmap.engine.FitCache, optional
        The problems and grid predictions of this design that the caller's estimates before the fit
        (noise model, σ prior) already built; by default the chunks share one of their own.

    Returns
    -------
    prfmap.engine.FitResult
        The merged result; ``settings`` gains ``chunks`` and ``chunk_units``.

    Raises
    ------
    prfmap.runtime.signals.StopRequested
        When SIGTERM/SIGINT arrived; raised after the chunk being fitted was saved.
    """
    name = store.name
    memory = store.budget if store.budget is not None else [int(store.chunk), options.mem_gb]
    identity = {
        **_identity(data, stim, tr, nuisance, store.inputs, memory),
        "fit": {**options.identity(), **jsonable(store.labels)},
    }
    where = Path(store.folder) / checkpoint_key(identity)
    if store.owned is not None:
        store.owned.append(where)
    chunk, mem_gb = _budget(where, identity, int(store.chunk), options.mem_gb, name)
    options = replace(options, mem_gb=mem_gb)
    starts = list(range(0, data.shape[0], chunk)) or [0]
    chunks, fitted = [], 0
    # Deferred: the engine's compiled code (and Keras) loads when the first chunk is fitted.
    from prfmap.engine import FitCache, fit_prf

    cache = FitCache() if cache is None else cache  # the chunks share the design's problem and grid
    pilot = PilotPrior(data) if options.sigma_prior == "eccentricity" else None
    if progress:
        progress("chunks", 0, len(starts))
    for i, start in enumerate(starts):
        label = f"chunk {i + 1}/{len(starts)}"
        stop = min(start + chunk, data.shape[0])
        path = where / f"chunk-{i:05d}-of-{len(starts):05d}.npz"
        loaded = _load_chunk(path) if path.exists() else None
        if loaded is not None and loaded[1].get("units") == [start, stop]:
            logger.info("%s: %s (units %d-%d) reused from checkpoint", name, label, start, stop)
            if pilot is not None:
                pilot.restore(loaded[1])
        else:
            fit = partial(fit_prf, stim=stim, tr=tr, nuisance=nuisance, progress=progress, cache=cache)
            estimates = pilot is not None and not pilot.known
            chunk_options = options if pilot is None else pilot.options(options, data, start, stop)
            loaded = _fit_chunk(fit, data, chunk_options, path, (start, stop), pilot)
            fitted += 1
            if estimates:
                logger.info("%s: sigma prior (with %s) %s", name, label, pilot.describe())
            logger.info(
                "%s: %s (units %d-%d) fitted in %.1f s and saved",
                name,
                label,
                start,
                stop,
                loaded[1]["seconds"],
            )
        chunks.append(loaded)
        if progress:
            progress("chunks", i + 1, len(starts))
        check_stop(f"after chunk {i + 1} of {len(starts)} of {name} (saved in {where})", store.how_to_resume)
    logger.info("%s: %d chunk(s) fitted, %d reused", name, fitted, len(starts) - fitted)
    logger.debug("%s: checkpoints in %s", name, where)
    return _merge(options.model, chunks, chunk)


def _budget(
    where: Path, identity: Mapping[str, Any], chunk: int, mem_gb: float | None, name: str
) -> tuple[int, float | None]:
    """The chunk size and engine budget of a key: those saved with it, else the given ones (saved)."""
    where.mkdir(parents=True, exist_ok=True)
    saved = _read_identity(where / "identity.json")
    if saved is not None:
        logger.info(
            "%s: resuming with the saved chunk size %d and engine budget %s GB",
            name,
            saved["chunk"],
            saved["mem_gb"],
        )
        return int(saved["chunk"]), saved["mem_gb"]
    used = {**identity, "used": {"chunk": chunk, "mem_gb": mem_gb}}
    write_text_atomic(where / "identity.json", json.dumps(used, indent=2, default=str) + "\n")
    return chunk, mem_gb


def _identity(
    data: np.ndarray,
    stim: Stimulus,
    tr: float,
    nuisance: np.ndarray | None,
    inputs: Sequence[str | os.PathLike[str]],
    memory: Any,
) -> dict[str, Any]:
    """Everything besides the fit's options that determines a chunk's result, as JSON-able values."""
    return {
        "prfmap": __version__,
        "format": CHECKPOINT_FORMAT,
        "backend": backend_info(),
        "tr": float(tr),
        "stimulus": [array_digest(stim.design), float(stim.fov_deg), list(map(int, stim.run_lengths))],
        "nuisance": array_digest(None if nuisance is None else np.asarray(nuisance)),
        "data": array_digest(np.asarray(data)),
        "inputs": file_identity(inputs),
        "memory": memory,
    }


def _fit_chunk(
    fit: Callable[..., FitResult],
    data: np.ndarray,
    options: FitOptions,
    path: Path,
    units: tuple[int, int],
    pilot: PilotPrior | None = None,
) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """``fit`` units ``start:stop`` and save them atomically; returns the saved arrays and metadata.

    With ``pilot``, the metadata also keep the σ prior the chunk used (:meth:`PilotPrior.record`).
    """
    t0 = time.perf_counter()
    start, stop = units
    if options.gauss_start is not None:  # per unit, as the data
        sliced = {k: np.asarray(v)[start:stop] for k, v in options.gauss_start.items()}
        options = replace(options, gauss_start=sliced)
    result = fit(data[start:stop], options=options)
    meta = {"units": [start, stop], "settings": result.settings.to_dict(), "timings": result.timings}
    if pilot is not None:
        meta |= pilot.record()
    meta = json.loads(json.dumps(meta, default=str))
    arrays = _chunk_arrays(result, options.return_predictions)
    _save_chunk(path, arrays, meta)
    return arrays, {**meta, "seconds": time.perf_counter() - t0}


def _read_identity(path: Path) -> dict[str, Any] | None:
    try:
        used = json.loads(path.read_text())["used"]
        return {"chunk": int(used["chunk"]), "mem_gb": used["mem_gb"]}
    except (OSError, ValueError, KeyError, TypeError):
        return None


def remove_checkpoints(folder: Path, owned: Sequence[Path]) -> None:
    """Delete the checkpoints a finished participant's fits own, and the folders they leave empty.

    Other keys (another model, space, output folder or set of arguments that shares the work dir,
    perhaps interrupted and waiting to resume) and files a user put there are kept.

    Parameters
    ----------
    folder : Path
        ``<work>/checkpoints/sub-<label>``.
    owned : sequence of Path
        The key folders of the participant's fits (``Checkpoints.owned``), under ``folder``.
    """
    folder = Path(folder)
    for where in dict.fromkeys(map(Path, owned)):
        if folder not in where.parents:
            raise ValueError(f"{where} is not under {folder}")
        shutil.rmtree(where, ignore_errors=True)
        _remove_if_empty(where.parent)
    _remove_if_empty(folder, folder.parent, folder.parent.parent)
    others = sorted(p.parent for p in folder.glob("*/*/identity.json"))
    if others:
        logger.info(
            "kept %d checkpoint folder(s) of other fits or arguments under %s (remove them when "
            "no run is to resume them)",
            len(others),
            folder,
        )


def _remove_if_empty(*folders: Path) -> None:
    """Remove each folder in turn while it is empty; stop at the first that is not."""
    for path in folders:
        try:
            path.rmdir()
        except OSError:
            return
