"""What every test folder shares: one JAX compilation cache, and how ``pytest-xdist`` deals the tests.

``make test`` runs the app tests on two workers (``-n 2 --dist loadgroup``). A worker receives a
whole test module at a time, so a module's fixtures (a fitted dataset that its tests only read) are
built once; tests that need a resource to themselves (the SLURM cluster, a terminal, the stop-signal
tests timed against a run's states) carry ``@pytest.mark.xdist_group("serial")`` and run one after
another on one worker.

Dozens of tests run prfmap end to end, each with a work dir of its own, where prfmap would keep JAX's
persistent compilation cache: each run would compile the same solver loops and grid kernels again.
One cache per ``pytest`` run, shared by its workers and by every prfmap they start (JAX reads
``JAX_COMPILATION_CACHE_DIR``; a value set by the user wins over ``--work-dir``, see
:func:`prfmap.cli.caches.place_xla_cache`), compiles each of them once. It starts empty, so every
run still compiles what it needs once.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

XLA_CACHE = {"JAX_COMPILATION_CACHE_DIR": "", "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}
_CACHE = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """The controller (or a run without workers) creates the cache; workers inherit its environment."""
    if hasattr(config, "workerinput") or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    folder = Path(tempfile.mkdtemp(prefix="prfmap-tests-xla-"))
    folder.chmod(0o777)  # the tests that run prfmap as another user write to it too
    config.stash[_CACHE] = folder
    os.environ.update({**XLA_CACHE, "JAX_COMPILATION_CACHE_DIR": str(folder)})


def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(_CACHE, None)
    if folder is not None:
        for name in XLA_CACHE:
            os.environ.pop(name, None)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(optionalhook=True)  # a hook of xdist's: pytest -p no:xdist runs without it
def pytest_xdist_make_scheduler(config: pytest.Config, log):  # noqa: ANN201 - xdist's hook
    """Schedule by module, and by ``xdist_group`` for the tests that carry one."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class ModuleOrGroupScheduling(LoadGroupScheduling):
        """xdist's ``loadgroup``, whose ungrouped tests go to the workers a module at a time."""

        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return scope.split("::", 1)[0] if scope == nodeid else scope

    return ModuleOrGroupScheduling(config, log)
