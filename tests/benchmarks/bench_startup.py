"""How long each entry point takes to print its ``--help``, against the interpreter's own start-up.

Runs each command ``--repeat`` times in a subprocess (the installed console scripts when they are on
the PATH beside this Python, else ``python -m``) and prints one JSON line: the median seconds of
``python -c pass`` and of each ``--help``, and each ``--help`` over the bare interpreter.

    python tests/benchmarks/bench_startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ENTRY_POINTS = {
    "prfmap": "prfmap.cli.run",
    "prfmap-synth": "prfmap.cli.synth",
    "prfmap-stimulus": "prfmap.cli.stimulus",
    "prfmap-docker": "prfmap_docker",
}


def seconds(command: list[str], repeat: int) -> float:
    """Median wall seconds of ``command`` over ``repeat`` runs (its output discarded)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def command_of(script: str, module: str) -> list[str]:
    """The console script beside this Python, else ``python -m module``."""
    installed = Path(sys.executable).with_name(script)
    if installed.is_file() or shutil.which(script, path=str(installed.parent)):
        return [str(installed)]
    return [sys.executable, "-m", module]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    bare = seconds([sys.executable, "-c", "pass"], args.repeat)
    record: dict[str, float] = {"python_s": round(bare, 3)}
    for script, module in ENTRY_POINTS.items():
        took = seconds([*command_of(script, module), "--help"], args.repeat)
        record[f"{script}_help_s"] = round(took, 3)
        record[f"{script}_over_python"] = round(took / bare, 1)
    print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
