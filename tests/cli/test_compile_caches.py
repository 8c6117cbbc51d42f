"""torch.compile's caches on a noexec /tmp (Docker's default tmpfs) move to --work-dir or compiling stops."""

from __future__ import annotations

import os
import subprocess

import pytest

from prfmap.cli.caches import allows_exec, place_compile_caches

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mounting a noexec tmpfs needs root")


@pytest.fixture
def noexec(tmp_path):
    """A real tmpfs mounted noexec, as `docker run --tmpfs /tmp` mounts one."""
    folder = tmp_path / "noexec"
    folder.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "noexec,nosuid,nodev,size=8m", "tmpfs", str(folder)], check=True
    )
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=True)


def test_noexec_is_detected(noexec, tmp_path):
    assert not allows_exec(noexec / ".cache" / "torchinductor")
    assert allows_exec(tmp_path)


def test_caches_move_to_the_work_dir(noexec, tmp_path):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(noexec / "inductor"), "TRITON_CACHE_DIR": str(noexec / "t")}
    note = place_compile_caches("torch", tmp_path / "work", env)
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "work" / ".cache" / "torchinductor")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "work" / ".cache" / "triton")
    assert "PRFMAP_COMPILE" not in env and "noexec" in note and str(tmp_path / "work") in note


def test_without_a_work_dir_the_fit_runs_eagerly(noexec):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(noexec / "inductor"), "TRITON_CACHE_DIR": str(noexec / "t")}
    note = place_compile_caches("torch", None, env)
    assert env["PRFMAP_COMPILE"] == "0"
    assert "--tmpfs /tmp:rw,exec" in note and "--work-dir" in note
    assert place_compile_caches("torch", noexec, dict(env, PRFMAP_COMPILE="1")) is not None


def test_nothing_changes_where_exec_is_allowed(noexec, tmp_path):
    env = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "i"), "TRITON_CACHE_DIR": str(tmp_path / "t")}
    assert place_compile_caches("torch", None, env) is None and "PRFMAP_COMPILE" not in env
    blocked = {"TORCHINDUCTOR_CACHE_DIR": str(noexec / "i"), "TRITON_CACHE_DIR": str(noexec / "t")}
    for backend in ("jax", "tensorflow"):
        assert place_compile_caches(backend, None, dict(blocked)) is None
    assert place_compile_caches("torch", None, dict(blocked, PRFMAP_COMPILE="0")) is None
