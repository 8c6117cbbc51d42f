"""Compiler caches that must be executable: torch.compile loads the libraries it builds from them.

A container run with ``--read-only --tmpfs /tmp`` gets a ``noexec`` /tmp (Docker's default for a
tmpfs), where the shared objects that inductor (CPU) and Triton (GPU) compile cannot be mapped
executable. Before the backend is imported, :func:`place_compile_caches` moves those caches to
``--work-dir`` when /tmp is ``noexec``, or turns compilation off (an eager run gives the same maps,
more slowly) and says how to mount /tmp instead.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

from prfmap.engine.backend import COMPILE_ENV, compile_switch

CACHE_VARIABLES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def allows_exec(folder: Path) -> bool:
    """Whether the file system holding ``folder`` (or its nearest existing parent) allows exec."""
    folder = Path(folder)
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    try:
        return not os.statvfs(folder).f_flag & os.ST_NOEXEC
    except OSError:
        return False


def default_cache(variable: str, env: MutableMapping[str, str]) -> Path:
    """Where torch puts a cache when ``variable`` is unset (``/tmp/torchinductor_<user>``, ``~/.triton``)."""
    if variable == "TRITON_CACHE_DIR":
        return Path(env.get("HOME", "~")).expanduser() / ".triton" / "cache"
    return Path(tempfile.gettempdir()) / f"torchinductor_{getpass.getuser()}"


def place_compile_caches(
    backend: str, work_dir: Path | None, env: MutableMapping[str, str] | None = None
) -> str | None:
    """Make torch.compile's caches executable, or turn compilation off.

    Parameters
    ----------
    backend : str
        The Keras backend; only ``torch`` compiles into such caches.
    work_dir : Path or None
        ``--work-dir``, the fallback location (``<work_dir>/.cache/``).
    env : mapping, optional
        The environment to read and change (default ``os.environ``).

    Returns
    -------
    str or None
        A warning for the log when something was changed, else None.
    """
    env = os.environ if env is None else env
    if backend != "torch" or not compile_switch(env):
        return None
    caches = {v: Path(env[v]) if env.get(v) else default_cache(v, env) for v in CACHE_VARIABLES}
    blocked = {v: p for v, p in caches.items() if not allows_exec(p)}
    if not blocked:
        return None
    where = ", ".join(sorted({str(p) for p in blocked.values()}))
    if work_dir is not None and allows_exec(work_dir):
        for variable in blocked:
            env[variable] = str(Path(work_dir) / ".cache" / variable.split("_")[0].lower())
        return (
            f"{where}: mounted noexec, where torch.compile cannot load the libraries it builds; "
            f"its caches are under {Path(work_dir) / '.cache'} instead"
        )
    env[COMPILE_ENV] = "0"
    return (
        f"{where}: mounted noexec, where torch.compile cannot load the libraries it builds: "
        "running without compiling (same maps, slower); mount /tmp with exec (docker run --tmpfs "
        "/tmp:rw,exec) or pass --work-dir on a file system that allows it"
    )


XLA_CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"
XLA_CACHE_MIN_SECONDS = "0"
"""Compilations shorter than this are not written to the persistent cache (JAX's default is 1 s). Every
one is: a participant's short programs (final fits, profiles and standard errors at each batch shape,
0.03–0.15 s each) were compiled again in every rerun, 1.4 s of the demo participant's warm run
(docs/performance.md); a warm run now loads all 33 of its programs in 0.24 s (38 ms the longest)."""


def place_xla_cache(
    backend: str, work_dir: Path | None, env: MutableMapping[str, str] | None = None
) -> Path | None:
    """Give JAX a persistent compilation cache, as torch.compile has one (issue 18).

    A participant compiles its solver loops and grid kernels once per shape, seconds each on a CPU;
    with the cache the next participant (or a rerun) loads them instead. The cache goes to
    ``<work_dir>/.cache/jax`` with ``--work-dir``, else ``<tmp>/prfmap_jax_<user>`` (where torch keeps
    its own); ``JAX_COMPILATION_CACHE_DIR`` set by the user wins. Nothing is set for other backends or
    where the folder cannot be written.

    Returns
    -------
    Path or None
        The cache folder, when one was placed.
    """
    env = os.environ if env is None else env
    if backend != "jax" or env.get(XLA_CACHE_VARIABLE):
        return None
    if work_dir is not None:
        folder = Path(work_dir) / ".cache" / "jax"
    else:
        folder = Path(tempfile.gettempdir()) / f"prfmap_jax_{getpass.getuser()}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    if not os.access(folder, os.W_OK):
        return None
    env[XLA_CACHE_VARIABLE] = str(folder)
    env.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", XLA_CACHE_MIN_SECONDS)
    return folder
