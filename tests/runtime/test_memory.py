"""prfmap.runtime.memory: the host memory prfmap may use (psutil, bounded by the cgroup limit)."""

from __future__ import annotations

from pathlib import Path

import pytest

from prfmap.runtime.memory import _cgroup_limit, available_host_bytes

MEMINFO = Path("/proc/meminfo")
SLACK = 64 * 2**20
"""Memory that other processes may take or free between two reads."""


def mem_available() -> int:
    for line in MEMINFO.read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


@pytest.mark.skipif(not MEMINFO.is_file(), reason="/proc/meminfo is Linux's")
def test_available_memory_is_the_kernels_memavailable_within_the_cgroup_limit():
    for _ in range(20):
        before = mem_available()
        value = available_host_bytes()
        after = mem_available()
        low, high = min(before, after), max(before, after)
        limit = _cgroup_limit()
        if limit:
            low, high = min(low, limit), min(high, limit)
        assert low - SLACK <= value <= high + SLACK
