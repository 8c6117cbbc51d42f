"""Print pip constraints that hold every package of a base image at its installed version.

Run with the image's interpreter while building: ``python constraints.py REQ.txt ... >
constraints.txt``. Packages pinned in the given requirement files are left out (those pins
win); everything else the base image installed (PyTorch, TensorFlow, CUDA wheels, NumPy) is
fixed, so installing prfmap can never replace the framework the image was chosen for.
"""

from __future__ import annotations

import re
import sys
from importlib.metadata import distributions
from pathlib import Path

_NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")


def canonical(name: str) -> str:
    """PEP 503 normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pinned_names(requirement_files: list[Path]) -> set[str]:
    """Canonical names of the projects that the requirement files name."""
    names = set()
    for path in requirement_files:
        for line in path.read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            match = _NAME.match(line)
            if match and not line.startswith("-"):
                names.add(canonical(match.group(1)))
    return names


def constraints(installed: dict[str, str], pinned: set[str]) -> list[str]:
    """``name==version`` for each installed project not in ``pinned``, sorted by name.

    Parameters
    ----------
    installed : dict of str to str
        Installed project name to version.
    pinned : set of str
        Canonical names to leave out.

    Returns
    -------
    list of str
        One constraint line per held project.
    """
    held = {canonical(n): v for n, v in installed.items() if canonical(n) not in pinned}
    return [f"{name}=={version}" for name, version in sorted(held.items())]


def main(argv: list[str]) -> int:
    """Print the constraints for the running interpreter's installed packages.

    Where a project is installed twice (a venv over the system site-packages), the copy that
    ``import`` finds first, the first on ``sys.path``, is the one held.
    """
    installed: dict[str, str] = {}
    for dist in distributions():
        if dist.metadata["Name"]:
            installed.setdefault(canonical(dist.metadata["Name"]), dist.version)
    for line in constraints(installed, pinned_names([Path(a) for a in argv])):
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
