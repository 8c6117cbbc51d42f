"""Print the slowest tests of a `make test` run, from the JUnit XML reports its pytest sessions wrote.

Usage: python .ci/slowest_tests.py REPORT_DIR [N]

Each stage of `make test` (an engine backend, the app tests) writes one report; the N slowest test
calls over all of them are printed, with their stage, so a regression in wall time shows in CI's output.
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET
from pathlib import Path


def slowest(folder: Path, n: int) -> list[tuple[float, str, str]]:
    """The ``n`` longest test cases in the reports under ``folder``: (seconds, stage, test id)."""
    cases = []
    for report in sorted(folder.glob("*.xml")):
        for case in ET.parse(report).getroot().iter("testcase"):
            test_id = f"{case.get('classname', '')}::{case.get('name')}"
            cases.append((float(case.get("time") or 0.0), report.stem, test_id))
    return sorted(cases, reverse=True)[:n]


def main() -> int:
    folder = Path(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 15
    rows = slowest(folder, n)
    if not rows:
        print(f"no test reports under {folder}")
        return 0
    print(f"== the {len(rows)} slowest tests of this run (seconds, stage, test)")
    for seconds, stage, test_id in rows:
        print(f"{seconds:8.2f}  {stage:<18} {test_id}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
