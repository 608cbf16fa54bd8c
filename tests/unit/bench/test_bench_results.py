"""The bench worker's frame is checked where it arrives (clusterkit/bench/results.py): a
recorded real result and error report pass strictly (tests/unit/bench/test_bench_torchrun.py runs
the worker itself through the parser), and a frame of another shape fails that node with one
line naming the path of the bad value, as a node that sent no result does: never gated,
never a traceback."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from clusterkit.bench.attribution import NodeRun, judge, read_node
from clusterkit.bench.findslow import _group_result
from clusterkit.bench.options import BenchOptions
from clusterkit.bench.results import MalformedResult, parse_frame, parse_result
from clusterkit.checks.model import Status
from clusterkit.framing import encode
from clusterkit.inventory.model import Host, Inventory
from clusterkit.transport.base import CommandResult, Deadline
from tests.support.bench_results import recorded

ERROR_REPORT = {  # rank 0's frame when the world was not the expected one, as recorded
    "error": {
        "kind": "world-size",
        "message": "WORLD_SIZE is 2 but 3 ranks were expected (nodes x GPUs per node): a "
        "partial run would measure the wrong thing",
        "rank": 0,
    }
}


GATE = {  # a verdict, as the gate (not the node) writes it
    "passed": True, "size": 1048576, "bus_bw": 300.0, "mean_bus_bw": 310.0, "slowest_rank": 0,
    "slowest_host": "vm", "threshold": None, "threshold_source": "none",
    "threshold_detail": "gloo: no default threshold", "reason": "",
}  # fmt: skip


def _changed(path: tuple[Any, ...], value: object) -> Any:
    """The recorded result with the value at `path` replaced (or added)."""
    result = copy.deepcopy(recorded())
    inner = result
    for key in path[:-1]:
        inner = inner[key]
    inner[path[-1]] = value
    return result


def test_the_recorded_result_and_error_report_pass_strictly() -> None:
    result = recorded()
    assert parse_result(result) == result
    assert len(result["more_collectives"]) == 3
    assert parse_frame(result) == result
    assert parse_frame(ERROR_REPORT) == ERROR_REPORT


@pytest.mark.parametrize(
    ("path", "value", "why"),
    [
        (("results", 0, "size"), "65536", "bench.results[0].size: int expected, got '65536'"),
        (("results", 1, "slowest", "bus_bw"), None,
         "bench.results[1].slowest.bus_bw: float expected, got None"),
        (("world_size", ), True, "bench.world_size: int expected, got True"),
        (("results", 0, "in_place", "errors"), 0,
         "bench.results[0].in_place: unknown key 'errors'"),
        (("more_collectives", 2, "devices", 1, "host"), ["n2"],
         "bench.more_collectives[2].devices[1].host: str expected, got ['n2']"),
        (("gate", ), GATE, "bench: unknown key 'gate'"),  # the verdict is the gate's to give
        (("more_collectives", 0, "gate"), {}, "bench.more_collectives[0].gate: "),
        (("busbw", ), 300.0, "bench: unknown key 'busbw'"),
    ],
)  # fmt: skip
def test_a_result_of_another_shape_is_rejected_naming_the_path(
    path: tuple[Any, ...], value: object, why: str
) -> None:
    with pytest.raises(MalformedResult) as raised:
        parse_frame(_changed(path, value))
    assert str(raised.value).startswith(why)


def test_an_error_report_of_another_shape_is_rejected() -> None:
    with pytest.raises(MalformedResult, match=r"^bench.error.rank: int expected, got '0'$"):
        parse_frame({"error": {**ERROR_REPORT["error"], "rank": "0"}})


def _run(host: str, rank: int, stdout: bytes, code: int = 0) -> NodeRun:
    run = NodeRun(host, rank)
    run.result = CommandResult(host, code, stdout, b"clusterkit-bench: rank 0 joined on a\n")
    run.ended_at = 1.0
    return run


MALFORMED = encode(_changed(("results", 0, "size"), "65536"))
WHY = "a sent a malformed result: bench.results[0].size: int expected, got '65536'"


def test_a_malformed_result_fails_its_node_with_one_line() -> None:
    """Node a's rank 0 printed a result whose size is text: it used to be gated (and the
    comparison with a number raised); now a is the node that failed, and why."""
    runs = [_run("a", 0, MALFORMED), _run("b", 1, b"")]
    assert read_node(runs[0]).malformed == WHY.removeprefix("a sent a malformed result: ")
    inventory = Inventory(None, (Host("a", "10.0.0.1"), Host("b", "10.0.0.2")))
    findings, result = judge(runs, inventory, BenchOptions(), 1, Deadline.after(5))
    assert result is None
    assert [(f.id, f.status, f.hosts, f.message) for f in findings] == [
        ("bench.rank-failed", Status.FAIL, ["a"], WHY)
    ]


def test_a_malformed_result_fails_its_group() -> None:
    assert _group_result([_run("a", 0, MALFORMED)], Deadline.after(5)) == (None, WHY)
    failed = _run("a", 0, MALFORMED, code=1)
    assert _group_result([failed], Deadline.after(5)) == (
        None,
        "a failed (exit 1): a malformed result: bench.results[0].size: int expected, got '65536'",
    )
