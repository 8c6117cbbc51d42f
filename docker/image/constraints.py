"""Pip constraints for an image: the base image's packages held, every other package pinned.

Run with the image's interpreter while building:

    python constraints.py --lock lock.txt REQ.txt ... > constraints.txt
    pip install --constraint constraints.txt -r REQ.txt ... prfmap.whl
    python constraints.py --verify constraints.txt REQ.txt ...

The first prints one ``name==version`` line for each package the base image installed (PyTorch,
TensorFlow, CUDA wheels, NumPy), so installing prfmap can never replace the framework the image was
chosen for, then the lock file's pin of every other package. Packages pinned in the requirement
files are left out (those pins win). ``--verify`` checks, after the install, that every installed
distribution but prfmap itself has the version that the constraints or the requirement files pin,
and exits 1 naming the others: a build cannot pick up an unpinned dependency.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import distributions
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")
_PIN = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?\s*==\s*([^\s;#]+)")
OWN = "prfmap"


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _lines(path: Path) -> list[str]:
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line and not line.startswith("-"):
            out.append(line)
    return out


def pinned_names(requirement_files: list[Path]) -> set[str]:
    """Canonical names of the projects that the requirement files name."""
    names = set()
    for path in requirement_files:
        for line in _lines(path):
            match = _NAME.match(line)
            if match:
                names.add(canonical(match.group(1)))
    return names


def pins(files: list[Path]) -> dict[str, str]:
    """Canonical name → version of every ``name==version`` line (extras allowed) in the files."""
    out: dict[str, str] = {}
    for path in files:
        for line in _lines(path):
            match = _PIN.match(line)
            if match:
                out[canonical(match.group(1))] = match.group(3)
    return out


def constraints(installed: dict[str, str], pinned: set[str], lock: dict[str, str] | None = None) -> list[str]:
    """``name==version`` for each installed project not in ``pinned``, then each locked one.

    Parameters
    ----------
    installed : dict of str to str
        Installed project name to version (the base image's).
    pinned : set of str
        Canonical names to leave out (the requirement files pin them).
    lock : dict of str to str, optional
        Canonical name to version of everything else an image may install.

    Returns
    -------
    list of str
        One constraint line per held or locked project, sorted by name.
    """
    held = {canonical(n): v for n, v in installed.items() if canonical(n) not in pinned}
    locked = {n: v for n, v in (lock or {}).items() if n not in pinned and n not in held}
    return [f"{name}=={version}" for name, version in sorted({**held, **locked}.items())]


def unpinned(installed: dict[str, str], expected: dict[str, str]) -> list[str]:
    """Installed projects (prfmap aside) whose version no pin fixes, as ``name==version (why)``."""
    out = []
    for name, version in sorted((canonical(n), v) for n, v in installed.items()):
        if name == OWN:
            continue
        if name not in expected:
            out.append(f"{name}=={version} (not pinned)")
        elif expected[name] != version:
            out.append(f"{name}=={version} (pinned {expected[name]})")
    return out


def installed_versions() -> dict[str, str]:
    """Installed projects of the running interpreter.

    Where a project is installed twice (a venv over the system site-packages), the copy that
    ``import`` finds first, the first on ``sys.path``, is the one that counts.
    """
    installed: dict[str, str] = {}
    for dist in distributions():
        if dist.metadata["Name"]:
            installed.setdefault(canonical(dist.metadata["Name"]), dist.version)
    return installed


def main(argv: list[str]) -> int:
    """``[--lock LOCK] REQ...`` prints the constraints; ``--verify CONSTRAINTS REQ...`` checks."""
    if argv[:1] == ["--verify"]:
        files = [Path(a) for a in argv[1:]]
        wrong = unpinned(installed_versions(), pins(files))
        for line in wrong:
            print(f"unpinned: {line}", file=sys.stderr)
        if wrong:
            print(
                f"{len(wrong)} installed package(s) are not pinned; run `make docker-lock`", file=sys.stderr
            )
        return 1 if wrong else 0
    lock = None
    if argv[:1] == ["--lock"]:
        lock, argv = pins([Path(argv[1])]), argv[2:]
    for line in constraints(installed_versions(), pinned_names([Path(a) for a in argv]), lock):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
