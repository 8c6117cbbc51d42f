"""Turn prfmap's host command line into the container's: bind mounts and rewritten paths."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from prfmap_docker.options import BY_NAME, Option

BIDS_DIR = "/data"
OUTPUT_DIR = "/out"
WORK_DIR = "/work"
WRITABLE_DIRS = {"--work-dir": WORK_DIR, "--bids-database-dir": "/bids_db"}
"""Where each read-write folder option is mounted in the container."""
DERIVATIVES_ROOT = "/derivatives"
INPUTS_ROOT = "/inputs"
DEFAULT_BACKEND = "jax"

EXIT_USAGE = 64
EXIT_MISSING_INPUT = 66

_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


class LauncherError(Exception):
    """A problem the user can act on; ``str(err)`` is one line, ``exit_code`` the exit status."""

    def __init__(self, message: str, exit_code: int = EXIT_USAGE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class BindMount:
    """A host path bound into the container."""

    source: Path
    target: str
    read_only: bool


@dataclass
class RunPlan:
    """What to run in the container and what to bind into it.

    Attributes
    ----------
    command : list of str
        prfmap's arguments inside the container (after the ``prfmap`` entry point).
    mounts : list of BindMount
        Host folders bound into the container.
    backend : str
        The ``--backend`` given, else ``jax``; it selects the image.
    create_dirs : list of Path
        Host folders the run writes to, created before the container starts so that they
        belong to the caller rather than to the Docker daemon.
    """

    command: list[str] = field(default_factory=list)
    mounts: list[BindMount] = field(default_factory=list)
    backend: str = DEFAULT_BACKEND
    create_dirs: list[Path] = field(default_factory=list)

    def bind(self, source: Path, target: str, read_only: bool) -> str:
        """Bind ``source`` at ``target`` (made unique if taken) and return the target used."""
        taken = {m.target for m in self.mounts}
        unique, k = target, 2
        while unique in taken:
            unique, k = f"{target}-{k}", k + 1
        self.mounts.append(BindMount(source, unique, read_only))
        return unique


def _host_path(value: str) -> Path:
    return Path(value).expanduser().absolute()


def _existing(value: str, what: str, *, directory: bool) -> Path:
    path = _host_path(value)
    ok = path.is_dir() if directory else path.is_file()
    if not ok:
        kind = "folder" if directory else "file"
        raise LauncherError(f"{what} {value}: no such {kind}", EXIT_MISSING_INPUT)
    return path


def _lookup(name: str) -> Option:
    if name in BY_NAME:
        return BY_NAME[name]
    if name.startswith("--"):
        matches = {BY_NAME[n] for n in BY_NAME if n.startswith("--") and n.startswith(name)}
        if len(matches) == 1:
            return matches.pop()
        if matches:
            spelled = ", ".join(sorted(m.names[0] for m in matches))
            raise LauncherError(f"ambiguous option {name} (could be {spelled})")
    raise LauncherError(f"unrecognized prfmap option {name}; see 'prfmap --help'")


def _is_option(token: str) -> bool:
    return token.startswith("-") and token != "-" and not _NUMBER.match(token)


def _rewrite(plan: RunPlan, opt: Option, values: list[str]) -> list[str]:
    name = opt.names[0]
    if opt.path == "work_dir":
        path = _host_path(values[0])
        plan.create_dirs.append(path)
        return [plan.bind(path, WRITABLE_DIRS[name], read_only=False)]
    if opt.path == "file":
        path = _existing(values[0], name, directory=False)
        folder = plan.bind(path.parent, f"{INPUTS_ROOT}/{name.lstrip('-')}", read_only=True)
        return [f"{folder}/{path.name}"]
    if opt.path == "named_dir":
        rewritten = []
        for value in values:
            label, sep, raw = value.partition("=")
            if not sep:
                raw, label = value, ""
            path = _existing(raw, name, directory=True)
            label = label or path.name
            target = plan.bind(path, f"{DERIVATIVES_ROOT}/{label}", read_only=True)
            rewritten.append(f"{label}={target}")
        return rewritten
    return values


def _split(token: str) -> tuple[str, str | None]:
    if token.startswith("--"):
        name, sep, value = token.partition("=")
        return name, value if sep else None
    if len(token) > 2:
        return token[:2], token[2:]
    return token, None


def translate(argv: list[str]) -> RunPlan:  # noqa: C901 - one branch per option it translates
    """Translate prfmap's arguments on the host into a run in the container.

    ``bids_dir`` is bound read-only at ``/data``, ``output_dir`` read-write at ``/out``,
    ``--work-dir`` read-write at ``/work``, each ``--derivatives`` folder read-only under
    ``/derivatives/<name>`` and the folders of ``--stimulus`` and ``--bids-filter-file``
    read-only under ``/inputs/``; their arguments are rewritten to those paths. Every other
    argument passes through unchanged.

    Parameters
    ----------
    argv : list of str
        prfmap's command line without the program name, as it would be given on the host.

    Returns
    -------
    RunPlan
        The container's command line, the bind mounts and the backend.

    Raises
    ------
    LauncherError
        On an unknown option, missing values or positional arguments (exit 64), or an input
        path that does not exist (exit 66).
    """
    plan = RunPlan()
    positionals: list[str] = []
    options: list[str] = []
    informational = False
    i = 0
    while i < len(argv):
        token = argv[i]
        i += 1
        if token == "--":
            positionals.extend(argv[i:])
            break
        if not _is_option(token):
            positionals.append(token)
            continue
        name, attached = _split(token)
        opt = _lookup(name)
        if opt.nargs == 0:
            if attached is not None and token.startswith("--"):
                raise LauncherError(f"option {name} takes no value")
            if attached is not None and any(f"-{c}" not in BY_NAME for c in attached):
                raise LauncherError(f"unrecognized prfmap option {token}; see 'prfmap --help'")
            informational |= opt.names[0] in ("-h", "--version")
            options.append(token)
            continue
        if attached is not None:
            values = [attached]
        elif opt.nargs == 1:
            if i >= len(argv) or _is_option(argv[i]):
                raise LauncherError(f"option {name} expects one value")
            values = [argv[i]]
            i += 1
        else:
            values = []
            while i < len(argv) and not _is_option(argv[i]):
                values.append(argv[i])
                i += 1
            if not values:
                raise LauncherError(f"option {name} expects one or more values")
        if opt.names[0] == "--backend":
            plan.backend = values[0]
        options.extend([opt.names[0], *_rewrite(plan, opt, values)])

    if informational and not positionals:
        plan.command = options
        return plan
    if len(positionals) != 3:
        extra = f"; unexpected {positionals[3]!r}" if len(positionals) > 3 else ""
        raise LauncherError(f"expected bids_dir output_dir analysis_level{extra}")
    bids_dir = _existing(positionals[0], "bids_dir", directory=True)
    output_dir = _host_path(positionals[1])
    plan.create_dirs.insert(0, output_dir)
    plan.mounts.insert(0, BindMount(output_dir, OUTPUT_DIR, read_only=False))
    plan.mounts.insert(0, BindMount(bids_dir, BIDS_DIR, read_only=True))
    plan.command = [BIDS_DIR, OUTPUT_DIR, positionals[2], *options]
    return plan
