"""The benchmarks' CPU slices (tests/support/cpushares.py) count what the nodes use."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.cpushares import CpuShares

pytestmark = pytest.mark.skipif(bool(CpuShares.reason()), reason=CpuShares.reason() or "")

# Once told to, spends 0.3 s of CPU and says how much it spent since: at least what the
# node's group must have counted (the process was confined before it was told).
BURN = (
    "import sys, time\n"
    "sys.stdin.readline()\n"
    "start = time.process_time()\n"
    "while time.process_time() < start + 0.3: pass\n"
    "print(time.process_time() - start, flush=True)\n"
)


def test_a_confined_process_is_counted_and_the_groups_go_with_close() -> None:
    with CpuShares(1.0) as shares:
        child = subprocess.Popen(
            [sys.executable, "-S", "-c", BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        try:
            shares.confine("node1", [child.pid])
            before = shares.used_seconds()
            assert before is not None
            out, _ = child.communicate(b"go\n", timeout=120)
        finally:
            child.kill()
        used = shares.used_seconds()
        assert used is not None and used - before >= float(out) * 0.9
        made = [*shares.groups, *([shares.account] if shares.account else [])]
    assert made and not any(group.exists() for group in made)
    assert not shares.parent.exists()
