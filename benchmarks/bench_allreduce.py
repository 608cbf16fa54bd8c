"""clusterkit bench vs a minimal raw torch.distributed.all_reduce loop, same 3 nodes and sizes.

Builds a 3-node namespace cluster (root needed), then alternates the two measurements
(raw, clusterkit, raw, clusterkit) so drift hits both alike, and prints the busbw ratio per
size. Target: clusterkit / raw >= 0.95 (the measurement adds no overhead worth speaking of).

    python benchmarks/bench_allreduce.py [--rounds 2] [-b 4M] [-e 16M] [-n 20]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from clusterkit.bench.launcher import BenchOptions, launch_bench
from clusterkit.node.bench_common import parse_size, size_sweep
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.netcluster import NetCluster, node_python, unavailable_reason

RAW_LOOP = """
import os, sys, time, torch, torch.distributed as dist
dist.init_process_group("gloo")
n, rank = dist.get_world_size(), dist.get_rank()
for size in map(int, sys.argv[1].split(",")):
    buf = torch.zeros(size // 4, dtype=torch.float32)
    for _ in range({warmup}):
        dist.all_reduce(buf)
    dist.barrier()
    start = time.perf_counter()
    for _ in range({iters}):
        dist.all_reduce(buf)
    t = (time.perf_counter() - start) / {iters}
    if rank == 0:
        print("RAW", size, size / t / 1e9 * 2 * (n - 1) / n, flush=True)
dist.destroy_process_group()
"""


def raw_run(cluster: NetCluster, sizes: list[int], iters: int, warmup: int, port: int) -> dict:
    """torchrun over OpenSSH on each node with the minimal loop; busbw by size from rank 0."""
    python = node_python()
    script = RAW_LOOP.format(iters=iters, warmup=warmup)
    nodes = cluster.nodes[:3]

    def one(index: int) -> str:
        node = nodes[index]
        command = (
            f"GLOO_SOCKET_IFNAME={node.interface} {python} -m torch.distributed.run "
            f"--nnodes 3 --node-rank {index} --nproc-per-node 1 --master-addr "
            f"{nodes[0].address} --master-port {port} /tmp/raw_allreduce.py "
            + ",".join(map(str, sizes))
        )
        done = subprocess.run(
            node.ssh_argv(command), capture_output=True, text=True, timeout=300, check=True
        )
        return done.stdout

    Path("/tmp/raw_allreduce.py").write_text(script)  # nodes share the filesystem
    with ThreadPoolExecutor(3) as pool:
        outputs = list(pool.map(one, range(3)))
    return {int(m[1]): float(m[2]) for m in re.finditer(r"^RAW (\d+) (\S+)$", outputs[0], re.M)}


def clusterkit_run(cluster: NetCluster, args: argparse.Namespace, port: int) -> dict:
    path = cluster.inventory("/tmp/bench-allreduce-inventory.yaml", nodes=cluster.nodes[:3])
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
    try:
        options = BenchOptions(
            minbytes=args.minbytes, maxbytes=args.maxbytes, iters=args.iters,
            warmup_iters=args.warmup, backend="gloo", nproc_per_node=1, master_port=port,
            environ={},
        )  # fmt: skip
        outcome = launch_bench(connections.transports, inventory, options, Deadline.after(300))
    finally:
        connections.close()
    if outcome.result is None:
        raise SystemExit(f"clusterkit bench failed: {[f.message for f in outcome.findings]}")
    return {row["size"]: row["in_place"]["bus_bw"] for row in outcome.result["results"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-b", "--minbytes", default="4M")
    parser.add_argument("-e", "--maxbytes", default="16M")
    parser.add_argument("-n", "--iters", type=int, default=20)
    parser.add_argument("-w", "--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        print(f"cannot build the test cluster: {reason}", file=sys.stderr)
        return 2
    sizes = size_sweep(parse_size(args.minbytes), parse_size(args.maxbytes), 2, 4)
    raw: dict[int, list[float]] = {size: [] for size in sizes}
    ours: dict[int, list[float]] = {size: [] for size in sizes}
    with NetCluster(3) as cluster:
        for round_ in range(args.rounds):
            for size, value in raw_run(
                cluster, sizes, args.iters, args.warmup, 29611 + round_
            ).items():
                raw[size].append(value)
            for size, value in clusterkit_run(cluster, args, 29621 + round_).items():
                ours[size].append(value)
    print(f"3 nodes x 1 gloo rank, -n {args.iters} -w {args.warmup}, {args.rounds} rounds "
          "(median busbw, GB/s)")  # fmt: skip
    print(f"{'size':>10}  {'raw loop':>9}  {'clusterkit':>10}  {'ratio':>6}")
    ratios = []
    for size in sizes:
        raw_bw, our_bw = statistics.median(raw[size]), statistics.median(ours[size])
        ratios.append(our_bw / raw_bw)
        print(f"{size:>10}  {raw_bw:9.3f}  {our_bw:10.3f}  {our_bw / raw_bw:6.3f}")
    overall = statistics.median(ratios)
    print(f"busbw ratio clusterkit/raw (median over sizes): {overall:.3f} (target >= 0.95)")
    return 0 if overall >= 0.95 else 1


if __name__ == "__main__":
    sys.exit(main())
