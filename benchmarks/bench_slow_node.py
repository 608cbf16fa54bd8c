"""`bench --find-slow` on 16+ local nodes with one node's CPU slice halved: is it named, and
in how many rounds and seconds?

Every node is a network namespace with sshd (tests/support/netcluster.py), confined to its
own CPU slice (a cgroup quota and, since all nodes share this machine's cores, a CPU weight
in the same ratio: benchmarks/machine.py CpuShares). One node gets half the slice of the
others, so every all-reduce it takes part in runs slower. The finder runs alone (the global
all-reduce before it is bench_allreduce.py's business); the groups run gloo on one CPU rank
per node. Prints the verdict, the rounds with their seconds, and the throttled node's and
the others' medians; the exit status is 1 when the throttled node is not named or another is.

    python benchmarks/bench_slow_node.py [--nodes 16] [--throttle 7] [--factor 0.5]
        [--bytes 8M] [--seconds 5] [--group-size 2] [--slice 0.5] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import CpuShares, busy_cpu_seconds
from clusterkit.bench.findslow import find_slow_nodes
from clusterkit.bench.launcher import BenchOptions
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.netcluster import (
    NetCluster,
    pids_in_netns,
    raise_neighbour_table_limits,
    unavailable_reason,
)


@dataclass
class SlowNodeFigures:
    """What one find-slow run on a cluster with one throttled node gave."""

    nodes: int
    throttled: str
    factor: float  # the throttled node's slice / the others'
    named: list[str]  # what the finder named
    rounds: int
    seconds: float  # the finder, from the first round's start to the verdict
    round_seconds: list[float]
    cpu_seconds: float  # machine-wide busy CPU during the run
    details: dict[str, Any]  # details.bench.find_slow

    @property
    def found(self) -> bool:
        """The throttled node named, and no other."""
        return self.named == [self.throttled]


def measure_slow_node(
    nodes: int = 16,
    *,
    throttle: int = 7,
    factor: float = 0.5,
    node_slice: float = 0.5,
    size: str = "8M",
    group_size: int = 2,
    iters: int = 5,
    seconds: float = 5.0,
    timeout: float = 3000.0,
) -> SlowNodeFigures:
    """Build `nodes` nodes, halve (`factor`) node`throttle`'s slice, run the finder."""
    throttled = f"node{throttle}"
    with NetCluster(nodes) as cluster, tempfile.TemporaryDirectory() as tmp:
        inventory = load_inventory(cluster.inventory(Path(tmp) / "inventory.yaml"))
        connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
        if connections.failures:
            raise SystemExit(f"could not connect: {connections.failures}")
        options = BenchOptions(
            backend="gloo",
            nproc_per_node=1,
            environ={},
            iters=iters,
            warmup_iters=1,
            join_timeout=timeout / 2,
            find_slow=True,
            find_slow_group=group_size,
            find_slow_bytes=size,
            find_slow_seconds=seconds,
        )
        shares = CpuShares(node_slice, weighted=True)
        try:
            for node in cluster:  # sshd and the open sessions; later sessions inherit
                fraction = node_slice * factor if node.name == throttled else node_slice
                shares.confine(node.name, pids_in_netns(node.netns), fraction)
            busy = busy_cpu_seconds()
            outcome = find_slow_nodes(
                connections.transports, inventory, options, Deadline.after(timeout)
            )
            cpu = busy_cpu_seconds() - busy
        finally:
            connections.close()
            shares.close()
    details = outcome.details
    return SlowNodeFigures(
        nodes=nodes,
        throttled=throttled,
        factor=factor,
        named=list(details.get("slow", [])),
        rounds=int(details.get("round_count", 0)),
        seconds=float(details.get("seconds", 0.0)),
        round_seconds=[entry["seconds"] for entry in details.get("rounds", [])],
        cpu_seconds=cpu,
        details=details,
    )


def report(figures: SlowNodeFigures) -> str:
    """The lines main() prints."""
    nodes = figures.details.get("nodes", {})
    others = [
        entry["median_ratio"]
        for host, entry in nodes.items()
        if host != figures.throttled and entry["median_ratio"] is not None
    ]
    mine = nodes.get(figures.throttled, {})
    verdict = "named" if figures.found else "NOT found"
    wrong = [host for host in figures.named if host != figures.throttled]
    lines = [
        f"{figures.nodes} nodes, {figures.throttled} at {figures.factor:g} x the others' CPU "
        f"slice: {verdict}" + (f"; also named: {', '.join(wrong)}" if wrong else ""),
        f"  rounds {figures.rounds}, {figures.seconds:.1f} s "
        f"(per round: {', '.join(f'{s:.1f}' for s in figures.round_seconds)} s), "
        f"machine CPU {figures.cpu_seconds:.0f} s",
        f"  {figures.throttled}: slow in {mine.get('slow_rounds')} of {mine.get('rounds')} "
        f"rounds, median {mine.get('median_busbw')} GB/s, {mine.get('median_ratio')} x its "
        f"rounds' medians",
    ]
    if others:
        lines.append(
            f"  others: median ratio {statistics.median(others):.2f} "
            f"(lowest {min(others):.2f}), median busbw {figures.details.get('median_busbw')} GB/s"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=16)
    parser.add_argument("--throttle", type=int, default=7, help="which node (1-based)")
    parser.add_argument("--factor", type=float, default=0.5, help="its slice / the others'")
    parser.add_argument("--slice", type=float, default=0.5, help="a node's slice of a core")
    parser.add_argument("--bytes", default="8M", help="all-reduce size of each group")
    parser.add_argument("--group-size", type=int, default=2)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=5.0, help="each group's timed window")
    parser.add_argument("--json", default=None, metavar="FILE", help="write the finder's details")
    args = parser.parse_args()
    reason = unavailable_reason() or CpuShares.reason()
    if reason:
        print(f"bench_slow_node: cannot build a local cluster: {reason}", file=sys.stderr)
        return 2
    raise_neighbour_table_limits()
    started = time.monotonic()
    figures = measure_slow_node(
        args.nodes,
        throttle=args.throttle,
        factor=args.factor,
        node_slice=args.slice,
        size=args.bytes,
        group_size=args.group_size,
        iters=args.iters,
        seconds=args.seconds,
    )
    print(report(figures))
    if args.json:
        Path(args.json).write_text(json.dumps(figures.details, indent=1))
    print(f"  wall {time.monotonic() - started:.1f} s with building the cluster")
    return 0 if figures.found else 1


if __name__ == "__main__":
    sys.exit(main())
