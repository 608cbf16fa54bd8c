"""`bench --per-node`: every node measured alone (its own ranks only), all nodes at once.

A node with a bad GPU, NVLink or PCIe link slows the global run, which then says only that
the cluster is slow. Here each node is its own torchrun job (a group of one node in a
single round of bench/findslow.py's machinery: same ports, go barrier and kill path), so
every node is timed at the same moment and judged on its own: against the intra-node
reference of its fabric (NVLink or PCIe, from the probe facts: bench/gate.py) where there is
one, and against the other nodes (below `find_slow_fraction` x their median is named) always.
"""

from __future__ import annotations

import statistics
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from clusterkit.bench import findslow
from clusterkit.bench.findslow import MIN_ROUND_S, FindSlowOutcome, one_size, round_world, run_round
from clusterkit.bench.launcher import World
from clusterkit.bench.options import BenchOptions
from clusterkit.bench.thresholds import Threshold, detect_fabric, fabric_default
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import torch_cuda
from clusterkit.checks.registry import CheckId
from clusterkit.facts import HostFacts
from clusterkit.inventory.model import Inventory
from clusterkit.node.bench_common import parse_size
from clusterkit.transport.base import Deadline, Transport

CHECK: CheckId = "bench.node-busbw"
NO_THRESHOLD = Threshold(None, "none", "no intra-node reference")
REMEDY = (
    "look at the node's GPUs: NVLink state and errors (`nvidia-smi nvlink -s -e`), PCIe "
    "width (`nvidia-smi -q -d PCIE`), clocks and throttling (`nvidia-smi -q -d PERFORMANCE`), "
    "CPU load; drain it until fixed"
)


@dataclass(frozen=True)
class NodeBusbw:
    """What one node measured alone: busbw of its slowest rank (None: failed, `error` says
    how) and the intra-node threshold of its fabric."""

    host: str
    busbw: float | None
    error: str = ""
    threshold: Threshold = NO_THRESHOLD


def node_threshold(host_facts: HostFacts, backend: str, ranks: int) -> Threshold:
    """The intra-node gate of one node: the fabric default of the node alone (NVLink or
    PCIe figure for its GPU model, scaled to the ranks used), only when its ranks use NCCL
    on GPUs; gloo on CPU has no reference figure."""
    if backend == "gloo" or ranks < 2:
        return NO_THRESHOLD
    if backend == "auto" and torch_cuda(host_facts) in (None, "cpu"):
        return NO_THRESHOLD
    fabric = detect_fabric({"node": host_facts})
    if fabric.gpus_per_node < 2:
        return NO_THRESHOLD
    return fabric_default(replace(fabric, gpus_per_node=min(fabric.gpus_per_node, ranks)))


def judge_nodes(
    nodes: Sequence[NodeBusbw], fraction: float, relative_status: Status = Status.WARN
) -> list[Finding]:
    """One finding per node. A failed run or busbw under its threshold fails; busbw below
    `fraction` x the median of every node that measured (two or more) gets
    `relative_status`; else ok."""
    measured = [node.busbw for node in nodes if node.busbw is not None]
    median = statistics.median(measured) if len(measured) >= 2 else None
    return [_judge(node, median, len(measured), fraction, relative_status) for node in nodes]


def _judge(
    node: NodeBusbw, median: float | None, count: int, fraction: float, relative: Status
) -> Finding:
    if node.busbw is None:
        return Finding(
            CHECK,
            Status.FAIL,
            f"{node.host} alone: the bench failed: {node.error or 'no result'}",
            hosts=[node.host],
            remedy=REMEDY,
        )
    value = node.threshold.value
    ratio = node.busbw / median if median else None
    against = f"{ratio:.2f} x the median {median:.3g} GB/s of {count} nodes" if ratio else ""
    busbw = f"{node.host} alone: busbw {node.busbw:.3g} GB/s"
    found = round(node.busbw, 4)
    if value is not None and node.busbw < value:
        return Finding(
            CHECK,
            Status.FAIL,
            f"{busbw} is below the threshold {value:g} GB/s from {node.threshold.detail}"
            + (f" ({against})" if against else ""),
            hosts=[node.host],
            expected=f">= {value:g}",
            found=found,
            remedy=REMEDY,
        )
    if ratio is not None and ratio < fraction:
        return Finding(
            CHECK,
            relative,
            f"{busbw} is {against}, below {fraction:g} x",
            hosts=[node.host],
            expected=f">= {fraction:g} x the median of the nodes",
            found=found,
            remedy=REMEDY,
        )
    rules = [f">= {value:g} GB/s" if value is not None else "", against]
    why = "; ".join(rule for rule in rules if rule) or "reported only"
    return Finding(CHECK, Status.OK, f"{busbw} ({why})", hosts=[node.host], found=found)


def not_run(reason: str, hosts: list[str] | None = None) -> FindSlowOutcome:
    return findslow.not_run(reason, hosts, check=CHECK, what="per-node")


def _unusable(world: World, deadline: Deadline) -> str:
    """Why the nodes cannot be measured alone, or ""."""
    if world.nproc < 2:
        return "one rank per node has no bus bandwidth (--nproc-per-node 2+)"
    if deadline.remaining() < MIN_ROUND_S:
        return "no time left before the deadline"
    return ""


def per_node_bench(
    transports: Mapping[str, Transport],
    inventory: Inventory,
    options: BenchOptions,
    deadline: Deadline,
) -> FindSlowOutcome:
    """Every connected inventory host alone, all at once, then one finding per node."""
    world = round_world(
        transports, inventory, options, lambda w: _unusable(w, deadline), refuse=not_run
    )
    if isinstance(world, FindSlowOutcome):
        return world
    size = options.maxbytes
    run_id = f"{uuid.uuid4().hex[:12]}-p"
    started = time.monotonic()
    try:
        measured, barrier, interrupted = run_round(
            transports,
            inventory,
            world,
            one_size(options, size),
            [[host] for host in world.hosts],
            0,
            run_id,
            deadline,
        )
    except KeyboardInterrupt:
        return FindSlowOutcome([], {}, [], interrupted=True)
    nodes = [
        NodeBusbw(
            group.hosts[0],
            group.busbw,
            group.error,
            node_threshold(options.facts.get(group.hosts[0], {}), options.backend, world.nproc),
        )
        for group in measured
    ]
    status = Status.FAIL if options.find_slow_status == "fail" else Status.WARN
    findings = judge_nodes(nodes, options.find_slow_fraction, status)
    details = _details(nodes, findings, options, size, world.nproc, run_id, started, barrier)
    return FindSlowOutcome(findings, details, _text(details), interrupted)


def _details(
    nodes: Sequence[NodeBusbw],
    findings: Sequence[Finding],
    options: BenchOptions,
    size: str,
    ranks: int,
    run_id: str,
    started: float,
    barrier: Mapping[str, Any],
) -> dict[str, Any]:
    """details.bench.per_node: every node's figure, threshold and verdict."""
    measured = [node.busbw for node in nodes if node.busbw is not None]
    median = statistics.median(measured) if len(measured) >= 2 else None
    return {
        "run_id": run_id,
        "bytes": parse_size(size),
        "ranks_per_node": ranks,
        "fraction": options.find_slow_fraction,
        "seconds": round(time.monotonic() - started, 3),
        "median_busbw": _rounded(median),
        "not_ready": list(barrier.get("not_ready") or []),
        "nodes": {
            node.host: {
                "busbw": _rounded(node.busbw),
                "ratio": _rounded(node.busbw / median) if node.busbw and median else None,
                "threshold": node.threshold.value,
                "threshold_detail": node.threshold.detail,
                "error": node.error or None,
                "status": finding.status.value,
            }
            for node, finding in zip(nodes, findings)
        },
    }


def _text(details: Mapping[str, Any]) -> list[str]:
    median = details["median_busbw"]
    lines = [
        f"per-node: {len(details['nodes'])} nodes x {details['ranks_per_node']} ranks alone at "
        f"{details['bytes'] / 2**20:g} MiB in {details['seconds']:.1f} s"
        + (f", median {median:.3g} GB/s" if median else "")
    ]
    for host, node in details["nodes"].items():
        figure = f"{node['busbw']:.3g} GB/s" if node["busbw"] is not None else node["error"]
        lines.append(f"per-node: {host}: {figure} ({node['status']})")
    return lines


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
