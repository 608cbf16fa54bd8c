"""`bench --per-node`: the rule over what each node measured alone, and its usage errors."""

from __future__ import annotations

import pytest

from clusterkit import cli
from clusterkit.bench.findslow import global_deadline
from clusterkit.bench.flags import bench_options
from clusterkit.bench.launcher import BenchOptions
from clusterkit.bench.pernode import NodeBusbw, judge_nodes, node_threshold
from clusterkit.bench.thresholds import Threshold
from clusterkit.checks.model import Status
from clusterkit.cli import bench
from clusterkit.errors import UsageError
from clusterkit.inventory.model import BenchSettings
from clusterkit.transport.base import Deadline

H100 = "NVIDIA H100 80GB HBM3"
# 8 xH100 with NVLink: 0.9 x 365 GB/s healthy (clusterkit/data/busbw_thresholds.json).
NVLINK_8 = Threshold(328.5, "fabric default", "0.9 x 365 GB/s healthy for NVLink")


def _facts(gpus: int = 8, nvlink: bool | None = True, torch_cuda: str | None = "12.4") -> dict:
    return {
        "gpus": {"count": gpus, "devices": [{"name": H100}] * gpus, "nvlink": nvlink},
        "torch": {"present": True, "cuda": torch_cuda},
    }


def _by_host(findings: list) -> dict:
    assert all(f.id == "bench.node-busbw" and len(f.hosts) == 1 for f in findings)
    return {f.hosts[0]: f for f in findings}


def test_gloo_nodes_a_node_far_below_the_median_is_named_alone() -> None:
    """Figures of 3 namespace nodes x 2 gloo ranks, node3 with a quarter of the CPU."""
    nodes = [NodeBusbw("node1", 0.241), NodeBusbw("node2", 0.236), NodeBusbw("node3", 0.0549)]
    found = _by_host(judge_nodes(nodes, 0.7))
    assert found["node3"].status is Status.WARN
    assert "0.23 x the median 0.236 GB/s of 3 nodes" in found["node3"].message
    assert found["node1"].status is found["node2"].status is Status.OK
    assert found["node1"].found == 0.241


def test_a_node_just_above_the_fraction_is_not_named() -> None:
    nodes = [NodeBusbw("a", 1.0), NodeBusbw("b", 1.0), NodeBusbw("c", 0.71)]
    assert {f.status for f in judge_nodes(nodes, 0.7)} == {Status.OK}


def test_the_relative_rule_can_fail() -> None:
    nodes = [NodeBusbw("a", 1.0), NodeBusbw("b", 1.0), NodeBusbw("c", 0.2)]
    assert _by_host(judge_nodes(nodes, 0.7, Status.FAIL))["c"].status is Status.FAIL


def test_a_node_whose_run_failed_fails_with_its_error() -> None:
    nodes = [NodeBusbw("a", 1.0), NodeBusbw("b", None, "rank 1 on b died (signal 9 SIGKILL)")]
    found = _by_host(judge_nodes(nodes, 0.7))
    assert found["b"].status is Status.FAIL
    assert "b alone: the bench failed: rank 1 on b died" in found["b"].message
    assert found["a"].status is Status.OK  # one node measured: no median to compare with
    assert "reported only" in found["a"].message


def test_nvlink_threshold_fails_a_slow_node_even_when_every_node_is_slow() -> None:
    """Two nodes at 180 GB/s, one at 150: 8xH100 NVLink nodes should reach 365."""
    nodes = [NodeBusbw(name, busbw, threshold=NVLINK_8) for name, busbw in
             (("g1", 180.0), ("g2", 180.0), ("g3", 150.0))]  # fmt: skip
    found = _by_host(judge_nodes(nodes, 0.7))
    assert {f.status for f in found.values()} == {Status.FAIL}
    assert "below the threshold 328.5 GB/s" in found["g3"].message
    assert found["g3"].expected == ">= 328.5"


def test_a_healthy_nvlink_node_passes_with_both_rules_stated() -> None:
    nodes = [NodeBusbw("g1", 370.0, threshold=NVLINK_8), NodeBusbw("g2", 366.0, threshold=NVLINK_8)]
    found = _by_host(judge_nodes(nodes, 0.7))
    assert found["g1"].status is Status.OK
    assert ">= 328.5 GB/s; 1.01 x the median 368 GB/s of 2 nodes" in found["g1"].message


def test_node_threshold_from_the_node_facts() -> None:
    assert node_threshold(_facts(), "auto", 8).value == pytest.approx(328.5)
    assert node_threshold(_facts(), "nccl", 4).value == pytest.approx(0.9 * 365 / 2)
    assert node_threshold(_facts(nvlink=False), "nccl", 8).value == pytest.approx(0.9 * 24)
    assert node_threshold(_facts(nvlink=None), "nccl", 8).value is None  # NVLink unknown
    assert node_threshold(_facts(), "gloo", 8).value is None
    assert node_threshold(_facts(torch_cuda=None), "auto", 8).value is None  # CPU torch: gloo
    assert node_threshold({}, "auto", 2).value is None  # a CPU node


def test_per_node_needs_two_ranks_per_node() -> None:
    for argv in (["bench", "--per-node"], ["bench", "--per-node", "--nproc-per-node", "1"]):
        with pytest.raises(UsageError, match="--per-node: needs --nproc-per-node 2 or more"):
            bench_options(bench.request(cli.parse(argv)).flags, BenchSettings(), {})
    argv = ["bench", "--per-node", "--nproc-per-node", "2"]
    assert bench_options(bench.request(cli.parse(argv)).flags, BenchSettings(), {}).per_node is True
    assert (
        bench_options(bench.request(cli.parse(["bench"])).flags, BenchSettings(), {}).per_node
        is False
    )


def test_the_global_run_leaves_per_node_half_the_time() -> None:
    deadline = Deadline.after(100)
    half = global_deadline(deadline, BenchOptions(per_node=True))
    assert 45 < half.remaining() <= 50
