"""JAX's persistent compilation cache goes to --work-dir (else beside torch's caches in /tmp)."""

from __future__ import annotations

import tempfile
from pathlib import Path

from prfmap.cli.caches import XLA_CACHE_VARIABLE, place_xla_cache


def test_the_cache_goes_to_the_work_dir(tmp_path):
    env: dict[str, str] = {}
    folder = place_xla_cache("jax", tmp_path / "work", env)
    assert folder == tmp_path / "work" / ".cache" / "jax" and folder.is_dir()
    assert env[XLA_CACHE_VARIABLE] == str(folder)
    assert float(env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"]) < 1.0


def test_without_a_work_dir_it_goes_to_the_temporary_folder():
    env: dict[str, str] = {}
    folder = place_xla_cache("jax", None, env)
    assert folder is not None and folder.parent == Path(tempfile.gettempdir())


def test_the_users_setting_and_other_backends_are_left_alone(tmp_path):
    env = {XLA_CACHE_VARIABLE: "/elsewhere"}
    assert place_xla_cache("jax", tmp_path, env) is None and env == {XLA_CACHE_VARIABLE: "/elsewhere"}
    for backend in ("torch", "tensorflow"):
        env = {}
        assert place_xla_cache(backend, tmp_path, env) is None and env == {}


def test_an_unusable_folder_places_nothing(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env: dict[str, str] = {}
    assert place_xla_cache("jax", blocker, env) is None and env == {}
