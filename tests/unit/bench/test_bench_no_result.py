"""A bench with no result is an error: rank 0's result frame cut short (or missing) while its
node exits 0 used to leave no finding at all, and `bench` and `check` printed PASS."""

from __future__ import annotations

import pytest

from clusterkit.bench.attribution import NodeRun, judge, read_node
from clusterkit.bench.findslow import _group_result
from clusterkit.bench.options import BenchOptions
from clusterkit.checks.model import Status, verdict_status
from clusterkit.framing import encode
from clusterkit.inventory.model import Host, Inventory
from clusterkit.status import ExitStatus
from clusterkit.transport.base import CommandResult, Deadline
from tests.support.bench_results import recorded

WHOLE = encode(recorded())
INVENTORY = Inventory(None, (Host("a", "10.0.0.1"), Host("b", "10.0.0.2")))
JOINED = b"clusterkit-bench: rank 0 joined on a\n"


def _run(host: str, rank: int, stdout: bytes) -> NodeRun:
    """A node whose torchrun ended with exit 0 after printing `stdout`."""
    run = NodeRun(host, rank)
    run.result = CommandResult(host, 0, stdout, JOINED)
    run.ended_at = 1.0
    return run


@pytest.mark.parametrize(
    ("stdout", "why"),
    [
        (WHOLE[: len(WHOLE) // 2], "a sent a malformed result: result frame is cut short"),
        (WHOLE[:-25], "a sent a malformed result: result frame is cut short"),
        (b"", "a ran rank 0 and exited 0 without printing a result"),
    ],
)
def test_rank_0_ending_well_without_a_whole_result_fails_its_node(stdout: bytes, why: str) -> None:
    runs = [_run("a", 0, stdout), _run("b", 1, b"")]
    findings, result = judge(runs, INVENTORY, BenchOptions(), 1, Deadline.after(5))
    assert result is None
    assert [(f.id, f.status, f.hosts, f.message) for f in findings] == [
        ("bench.rank-failed", Status.FAIL, ["a"], why)
    ]
    assert verdict_status(findings) is ExitStatus.FAILED
    assert _group_result(runs, Deadline.after(5)) == (None, why)


def test_a_whole_result_still_passes_and_other_nodes_print_no_frame() -> None:
    runs = [_run("a", 0, WHOLE), _run("b", 1, b"")]
    assert read_node(runs[0]).result is not None and not read_node(runs[0]).malformed
    findings, result = judge(runs, INVENTORY, BenchOptions(), 1, Deadline.after(5))
    assert result is not None
    assert not [f for f in findings if f.status in (Status.FAIL, Status.ERROR)]
