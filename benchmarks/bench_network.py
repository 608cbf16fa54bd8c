"""The network stage on 4 and on 32 local nodes (network namespaces with sshd, real SSH).

The mesh runs on every node at once, so 32 nodes should take at most 2x the time of 4.
Every node here lives on this one machine, so each size is measured twice:

  shared    all nodes share this machine's cores. At 32 nodes the cores are the limit:
            the ratio then measures the machine, not the stage.
  per-node  every node gets the same fixed slice of a core (a cgroup CPU quota), at both
            sizes, as on a real cluster where each node brings its own CPUs. A serial
            stage would still take 8x as long at 32 nodes; a parallel one stays near 1x.

Prints the median of a few runs per size and mode and both ratios; the exit status is 1
when the per-node ratio is over the target (the shared one when cgroups are unavailable).

    python benchmarks/bench_network.py [--runs 3] [--sizes 4 32] [--node-cpu FRACTION]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.machine import CpuShares, busy_cpu_seconds
from clusterkit.checks.model import Status
from clusterkit.contract.session import Session
from clusterkit.net.steps import run_network_stage
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.netcluster import NetCluster, pids_in_netns, unavailable_reason

TARGET_RATIO = 2.0
# The kernel's ARP table is shared by every network namespace; its default hard limit (1024
# entries) overflows with a 32-node full mesh (32 x 31 entries) plus anything else running,
# and then first contacts silently time out. Real clusters keep one table per machine.
NEIGH_LIMITS = {"gc_thresh1": 1024, "gc_thresh2": 8192, "gc_thresh3": 16384}


def raise_neighbour_limits() -> None:
    for name, wanted in NEIGH_LIMITS.items():
        path = Path(f"/proc/sys/net/ipv4/neigh/default/{name}")
        if int(path.read_text()) < wanted:
            path.write_text(f"{wanted}\n")


def measure(nodes: int, runs: int, shares: CpuShares | None) -> tuple[list[float], list[float]]:
    """(seconds, machine-wide busy CPU seconds) of run_network_stage per run, connections
    opened beforehand (as in check); with `shares`, each node confined to its CPU slice."""
    with NetCluster(nodes) as cluster, tempfile.TemporaryDirectory() as tmp:
        path = cluster.inventory(
            Path(tmp) / "inventory.yaml", python_interpreter="/usr/bin/python3"
        )
        inventory = load_inventory(path)
        connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
        if connections.failures:
            raise SystemExit(f"could not connect: {connections.failures}")
        times, cpu = [], []
        try:
            if shares is not None:
                for node in cluster:  # sshd and the sessions already open; later ones inherit
                    shares.confine(node.name, pids_in_netns(node.netns))
            for _ in range(runs):
                started, busy = time.monotonic(), busy_cpu_seconds()
                session = Session(inventory, transports=connections.transports, workers=nodes)
                findings = run_network_stage(session, Deadline.after(120)).findings
                times.append(time.monotonic() - started)
                cpu.append(busy_cpu_seconds() - busy)
                bad = [f"{f.id}: {f.message}" for f in findings if f.status is not Status.OK]
                if bad:
                    raise SystemExit(f"{nodes} nodes not healthy: {bad}")
        finally:
            connections.close()
            if shares is not None:
                shares.close()
        return times, cpu


def run_sizes(sizes: tuple[int, int], runs: int, fraction: float | None) -> float:
    """Print each size's median and return the ratio large/small."""
    medians = {}
    for size in sizes:
        shares = CpuShares(fraction) if fraction is not None else None
        times, cpu = measure(size, runs, shares)
        medians[size] = statistics.median(times)
        busy = statistics.median(cpu)
        print(
            f"  {size:>3} nodes: median {medians[size]:.2f} s  runs {[round(t, 2) for t in times]}"
            f"  machine CPU {busy:.2f} s ({busy / medians[size]:.1f} of {os.cpu_count()} cores"
            f" busy, {1000 * busy / size:.0f} ms per node)"
        )
    small, large = sizes
    return medians[large] / medians[small]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--sizes", type=int, nargs=2, default=(4, 32), metavar=("SMALL", "LARGE"))
    parser.add_argument(
        "--node-cpu",
        type=float,
        default=None,
        metavar="FRACTION",
        help="each node's slice of one core in the per-node run (default: three quarters of "
        "this machine's cores shared by the large size, at most 0.25)",
    )
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"bench_network: cannot build a local cluster: {reason}", file=sys.stderr)
        return 2
    raise_neighbour_limits()
    small, large = args.sizes
    cores = os.cpu_count() or 1

    print(f"shared: all nodes on this machine's {cores} cores")
    shared = run_sizes(args.sizes, args.runs, None)
    print(f"  ratio {large}/{small} nodes: {shared:.2f}")

    why_not = CpuShares.reason()
    if why_not:
        print(f"per-node: not measured ({why_not})")
        verdict_ratio = shared
    else:
        fraction = args.node_cpu or min(0.25, 0.75 * cores / large)
        print(f"per-node: every node limited to {fraction:.3f} of a core, at both sizes")
        verdict_ratio = run_sizes(args.sizes, args.runs, fraction)
        print(f"  ratio {large}/{small} nodes: {verdict_ratio:.2f}")
    verdict = "ok" if verdict_ratio <= TARGET_RATIO else "over target"
    print(f"ratio {verdict_ratio:.2f} (target <= {TARGET_RATIO:g}): {verdict}")
    return 0 if verdict_ratio <= TARGET_RATIO else 1


if __name__ == "__main__":
    sys.exit(main())
