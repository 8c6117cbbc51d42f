"""fit_chunked, the memory budgets and the stop signals, in process on small arrays."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import fields, replace
from pathlib import Path

import numpy as np
import pytest

from helpers import chunked_env
from prfmap.engine import FitOptions
from prfmap.engine.catalog.result import PER_KEY_UNCERTAINTY, Uncertainty
from prfmap.engine.options import array_digest
from prfmap.participant.checkpoint import Checkpoints, fit_chunked
from prfmap.runtime.memory import chunk_units, default_mem_gb, engine_mem_gb, seeded_chunk_units
from prfmap.runtime.signals import StopRequested, check_stop, stop_on_signal

OPTIONS = FitOptions(model="gauss", refine="none", seed=0)


@pytest.fixture(scope="module")
def problem():
    from prfmap.engine import Stimulus, predict

    design = np.zeros((40, 12, 12), np.float32)
    for t in range(40):
        design[t, :, t % 12] = 1.0
    stim = Stimulus(design, fov_deg=10.0)
    rng = np.random.default_rng(0)
    n = 150
    params = {
        "x": rng.uniform(-3, 3, n),
        "y": rng.uniform(-3, 3, n),
        "sigma": rng.uniform(0.5, 2, n),
        "amplitude": np.ones(n),
        "baseline": np.zeros(n),
    }
    data = predict(params, stim, 1.5) + rng.normal(0, 0.05, (n, 40))
    data[3] = np.nan
    return data, stim


def _chunks(folder: Path) -> list[Path]:
    return sorted(folder.rglob("chunk-*.npz"))


def test_chunks_are_saved_reused_and_merged(problem, tmp_path: Path, caplog) -> None:
    data, stim = problem
    first = fit_chunked(data, stim, 1.5, OPTIONS, Checkpoints(tmp_path, 64))
    assert len(_chunks(tmp_path)) == 3 and first.settings.chunks == 3
    assert first.settings.units == 150 and first.settings.units_fitted == 149
    assert np.isnan(first.params["x"][3]) and np.isfinite(first.params["x"][:3]).all()
    _chunks(tmp_path)[1].write_bytes(_chunks(tmp_path)[1].read_bytes()[:100])  # a torn file
    caplog.set_level("INFO", logger="prfmap.participant.checkpoint")
    again = fit_chunked(data, stim, 1.5, OPTIONS, Checkpoints(tmp_path, 64))
    assert "1 chunk(s) fitted, 2 reused" in caplog.text and "unreadable checkpoint" in caplog.text
    for k in first.params:
        assert first.params[k].tobytes() == again.params[k].tobytes()
    assert first.r2.tobytes() == again.r2.tobytes()


def test_any_change_gives_a_new_key(problem, tmp_path: Path) -> None:
    data, stim = problem
    fit_chunked(data, stim, 1.5, OPTIONS, Checkpoints(tmp_path, 64))
    changed = data.copy()
    changed[0, 0] += 1e-3
    fit_chunked(changed, stim, 1.5, OPTIONS, Checkpoints(tmp_path, 64))
    fit_chunked(data, stim, 1.5, replace(OPTIONS, seed=1), Checkpoints(tmp_path, 64))
    fit_chunked(data, stim, 2.0, OPTIONS, Checkpoints(tmp_path, 64))
    assert len({p.parent for p in _chunks(tmp_path)}) == 4


def test_an_empty_nuisance_basis_is_a_key_like_any_other(problem, tmp_path: Path) -> None:
    """Issue 24, case 9: --high-pass-hz 0, or a run too short for any cosine below the cut-off, gives
    a (frames, 0) basis; its digest was a TypeError (a memoryview of no bytes cannot be cast)."""
    data, stim = problem
    empty = np.zeros((data.shape[1], 0))
    assert array_digest(np.zeros((40, 0))) != array_digest(np.zeros((0, 40))) != array_digest(None)
    first = fit_chunked(data, stim, 1.5, OPTIONS, Checkpoints(tmp_path, 64), nuisance=empty)
    again = fit_chunked(data, stim, 1.5, OPTIONS, Checkpoints(tmp_path, 64), nuisance=empty)
    assert np.isfinite(first.params["x"]).sum() == 149
    assert first.params["x"].tobytes() == again.params["x"].tobytes()
    assert len({p.parent for p in _chunks(tmp_path)}) == 1


def test_stop_signal_ends_the_fit_at_once_keeping_saved_chunks(problem, tmp_path: Path) -> None:
    data, stim = problem
    calls = []

    def progress(stage: str, done: int, total: int) -> None:
        calls.append((stage, done))
        if stage == "chunks" and done == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    with stop_on_signal("run it again"), pytest.raises(StopRequested) as info:
        fit_chunked(
            data,
            stim,
            1.5,
            OPTIONS,
            Checkpoints(tmp_path, 64, how_to_resume="run it again"),
            progress=progress,
        )
    assert info.value.exit_code == 143 and calls[-1] == ("chunks", 1)
    assert "stopped by SIGTERM" in str(info.value) and "run it again" in str(info.value)
    assert len(_chunks(tmp_path)) == 1
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    check_stop("never", "nothing")  # outside the block no stop is pending


STUCK = """
import os, signal, sys, time
from prfmap.runtime.signals import StopRequested, stop_on_signal
with stop_on_signal("try again"):
    try:
        print(time.time(), flush=True)
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(30)
    except StopRequested:
        time.sleep(30)  # a main thread that does not unwind: the watchdog ends the process
"""


@pytest.mark.xdist_group("serial")
def test_a_run_that_does_not_unwind_is_ended_within_the_grace_time() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", STUCK], env=chunked_env(None), capture_output=True, text=True, timeout=60
    )
    elapsed = time.time() - float(proc.stdout.split()[0])
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr.strip().splitlines()[-1] == (
        "prfmap: error: stopped by SIGINT while running; the chunks saved so far are kept; try again"
    )
    assert 1.5 <= elapsed < 2.0


def test_memory_budgets(monkeypatch: pytest.MonkeyPatch) -> None:
    assert default_mem_gb() >= 1.0
    assert engine_mem_gb(8.0) == pytest.approx(2.0)
    monkeypatch.delenv("PRFMAP_CHUNK_UNITS", raising=False)
    sizes = [chunk_units(gb, 300) for gb in (0.1, 1, 4, 64)]
    assert sizes == sorted(sizes) and sizes[0] == 256 and sizes[-1] == 16384
    assert all(s & (s - 1) == 0 for s in sizes)
    monkeypatch.setenv("PRFMAP_CHUNK_UNITS", "100")
    assert chunk_units(4, 300) == 100


def test_a_seeded_model_chunks_by_the_units_it_fits() -> None:
    """A model seeded from a Gaussian fit costs what its seeded units cost: one chunk holds as many as
    the data's chunk would, within two chunks' worth of units."""
    assert seeded_chunk_units(16384, 20484, 800) == 20484  # all its seeded units in one chunk
    assert seeded_chunk_units(1024, 20484, 800) == 2048  # 20 chunks' units, capped at 2 chunks
    assert seeded_chunk_units(1024, 20480, 15360) == 1366  # 3/4 seeded: 4/3 chunks' units a chunk
    assert seeded_chunk_units(1024, 20484, 20484) == 1024  # all seeded: the data's chunk
    assert seeded_chunk_units(1024, 500, 0) == 1024


@pytest.mark.parametrize("refine", ["none", "lm"])
def test_chunked_fit_equals_one_fit_of_all_units(problem, tmp_path: Path, refine: str) -> None:
    """Units are fitted independently: chunking changes no bit of the maps (checked on this CPU backend)."""
    from prfmap.engine import fit_prf

    data, stim = problem
    whole = fit_prf(data, stim, 1.5, refine=refine)
    chunked = fit_chunked(data, stim, 1.5, FitOptions(refine=refine), Checkpoints(tmp_path, 64))
    for k in whole.params:
        assert whole.params[k].tobytes() == chunked.params[k].tobytes(), k
    assert whole.r2.tobytes() == chunked.r2.tobytes()


def test_chunked_fit_merges_the_per_unit_flags(problem, tmp_path: Path) -> None:
    """``FitResult.flags`` survive the chunks: a DoG fit of Gaussian data flags its vanished surrounds."""
    from prfmap.engine import fit_prf

    data, stim = problem
    whole = fit_prf(data, stim, 1.5, model="dog")
    chunked = fit_chunked(data, stim, 1.5, FitOptions(model="dog"), Checkpoints(tmp_path, 64))
    flag = chunked.flags["surround_vanished"]
    assert flag.dtype == bool and flag.shape == (150,) and not flag[3]
    np.testing.assert_array_equal(flag, whole.flags["surround_vanished"])
    assert flag.any()


def test_the_sigma_prior_is_the_pilot_s_whatever_the_chunks_and_a_resume(
    problem, tmp_path: Path, caplog
) -> None:
    """The first chunk brings the other chunks' pilot units along (150 units: all are pilot units), so
    the prior and every map equal one fit's; a resumed fit takes the prior its first chunk saved."""
    from prfmap.engine import fit_prf

    data, stim = problem
    options = FitOptions(refine="lm", sigma_prior="eccentricity", uncertainty=False)
    whole = fit_prf(data, stim, 1.5, options=options)
    assert whole.settings.sigma_prior["units"] >= 30
    chunked = fit_chunked(data, stim, 1.5, options, Checkpoints(tmp_path, 64))
    assert chunked.settings.sigma_prior == whole.settings.sigma_prior
    assert chunked.settings.units_refined == whole.settings.units_refined
    for k in whole.params:
        assert whole.params[k].tobytes() == chunked.params[k].tobytes(), k
    for later in _chunks(tmp_path)[1:]:
        later.unlink()
    caplog.set_level("INFO", logger="prfmap.participant.checkpoint")
    caplog.clear()  # what the first fit logged (another test may have left the logger at INFO)
    resumed = fit_chunked(data, stim, 1.5, options, Checkpoints(tmp_path, 64))
    assert "2 chunk(s) fitted, 1 reused" in caplog.text and "sigma prior (with" not in caplog.text
    assert resumed.settings.sigma_prior == whole.settings.sigma_prior
    for k in whole.params:
        assert whole.params[k].tobytes() == resumed.params[k].tobytes(), k


def test_reused_chunks_give_back_every_per_key_field_of_the_uncertainty(problem, tmp_path: Path) -> None:
    """``PER_KEY_UNCERTAINTY`` names every per-key field of ``Uncertainty``, and each comes back from the
    checkpoints bit for bit."""
    data, stim = problem
    options = FitOptions(model="gauss", refine="lm", seed=0)
    first = fit_chunked(data, stim, 1.5, options, Checkpoints(tmp_path, 64))
    again = fit_chunked(data, stim, 1.5, options, Checkpoints(tmp_path, 64))
    per_key = {f.name for f in fields(Uncertainty) if isinstance(getattr(Uncertainty(), f.name), dict)}
    assert set(PER_KEY_UNCERTAINTY) == per_key
    assert first.uncertainty.se and first.uncertainty.noise_se
    for name in PER_KEY_UNCERTAINTY:
        saved, read = getattr(first.uncertainty, name), getattr(again.uncertainty, name)
        assert saved.keys() == read.keys(), name
        for key, values in saved.items():
            assert values.tobytes() == read[key].tobytes(), (name, key)
    assert first.uncertainty.dof.tobytes() == again.uncertainty.dof.tobytes()
