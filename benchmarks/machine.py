"""What the benchmarks need to know about this machine while they run."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.cpushares import CpuShares


def busy_cpu_seconds() -> float:
    """CPU time the whole machine has spent busy so far (every node process, every sshd, the
    tool under test): on a box that hosts all the nodes, a run's wall time is bounded below
    by its busy CPU divided by the cores."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split()[1:8]]
    idle, iowait = fields[3], fields[4]
    return (sum(fields) - idle - iowait) / os.sysconf("SC_CLK_TCK")


__all__ = ["CpuShares", "busy_cpu_seconds"]
