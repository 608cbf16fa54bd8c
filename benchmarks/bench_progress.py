"""What the ranks' progress thread costs a training step.

The same job, a 2-rank gloo loop under torchrun on this machine (each step some CPU work and
one all_reduce, as a small DDP step), runs alternately with and without the sitecustomize
`clusterkit launch` puts before every rank (clusterkit/node/launch_sitecustomize.py
SITECUSTOMIZE: a thread reading the flight recorder's counters ten times a second). Each run
reports its median step time; the ratio of the medians (with / without) is the cost. Target: 1.01.

The step-time ratio is inside a shared machine's noise, so each watched rank also reads the
thread's own CPU time (its POSIX thread CPU clock, in ns) beside its whole process's CPU
time and the wall time over the training loop. Thread CPU / process CPU bounds the cost
when the GIL is contended (every microsecond the thread runs, the step could have waited);
thread CPU / wall time is its share of one core. Both are printed per rank against 1%.

    python benchmarks/bench_progress.py [--repeat 3] [--steps 300]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clusterkit.node.launch import FAULTHANDLER_VARIABLE, STACK_DIR_VARIABLE
from clusterkit.node.launch_sitecustomize import SITECUSTOMIZE

TARGET = 1.01
TARGET_SHARE = 0.01  # the thread's CPU, at most 1% of the rank's
JOB = r"""
import json, os, sys, threading, time
import torch
import torch.distributed as dist


def clocks():
    # (the progress thread's CPU, this process's CPU, wall), seconds; 0 without the thread
    found = [t for t in threading.enumerate() if t.name == "clusterkit-progress"]
    own = time.clock_gettime(time.pthread_getcpuclockid(found[0].ident)) if found else 0.0
    return own, time.process_time(), time.perf_counter()


dist.init_process_group("gloo")
torch.set_num_threads(1)
steps, out = int(sys.argv[1]), sys.argv[2]
tensor = torch.ones(1 << 14)
weights = torch.randn(256, 256)
times = []
first = clocks()
for step in range(steps):
    started = time.perf_counter()
    for _ in range(8):
        weights = torch.tanh(weights @ weights) * 0.5
    dist.all_reduce(tensor)
    times.append(time.perf_counter() - started)
last = clocks()
thread, process, wall = (b - a for a, b in zip(first, last))
with open("%s.%d" % (out, dist.get_rank()), "w") as handle:
    json.dump({"times": times[steps // 10 :], "thread": thread, "process": process,
               "wall": wall}, handle)
dist.barrier()
os._exit(0)
"""


@dataclass
class Rank:
    """One rank's training loop: its step times and clocks (seconds)."""

    times: list[float]
    thread: float  # the progress thread's CPU (0 without it)
    process: float  # the whole rank's CPU, the thread's included
    wall: float


def run(folder: Path, steps: int, watched: bool, port: int) -> list[Rank]:
    """One 2-rank job; each rank's loop."""
    job = folder / "job.py"
    job.write_text(JOB)
    out = folder / f"clocks-{port}.json"
    env = dict(os.environ, OMP_NUM_THREADS="1", TORCH_FR_BUFFER_SIZE="2000")
    if watched:
        site, stacks = folder / "site", folder / f"stacks-{port}"
        site.mkdir(exist_ok=True)
        stacks.mkdir()
        (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env.update(PYTHONPATH=str(site), **{STACK_DIR_VARIABLE: str(stacks)})
        env.pop(FAULTHANDLER_VARIABLE, None)
    argv = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
            "--master-port", str(port), str(job), str(steps), str(out)]  # fmt: skip
    subprocess.run(argv, env=env, check=True, timeout=600, capture_output=True)
    ranks = [Rank(**json.loads(Path(f"{out}.{rank}").read_text())) for rank in range(2)]
    if watched:
        assert list((folder / f"stacks-{port}").glob("progress-*.json")), "no progress written"
        assert all(rank.thread > 0 for rank in ranks), "the progress thread was not found"
    return ranks


def step_time(ranks: list[Rank]) -> float:
    return statistics.median(ranks[0].times)


def verdict(value: float) -> str:
    return f"{value:.3%} ({value / TARGET_SHARE:.2f}x the 1% target: " + (
        "met)" if value <= TARGET_SHARE else "MISSED)"
    )


def thread_cost(watched: list[list[Rank]]) -> float:
    """Per rank of every watched run: the thread's CPU over the rank's CPU and over the wall
    time; the largest share of the rank's CPU, which bounds the cost on a contended GIL."""
    print("the progress thread's own CPU over the training loop (per rank, watched runs):")
    shares = []
    for index, ranks in enumerate(watched):
        for number, rank in enumerate(ranks):
            share = rank.thread / rank.process
            shares.append(share)
            print(f"  run {index + 1} rank {number}: {rank.thread * 1000:6.1f} ms of "
                  f"{rank.process:6.2f} s CPU, {rank.wall:6.2f} s wall: "
                  f"{share:.3%} of the rank's CPU, {rank.thread / rank.wall:.3%} of one core, "
                  f"{rank.thread / rank.wall * 1000:.2f} ms/s")  # fmt: skip
    print(f"  largest share of a rank's CPU: {verdict(max(shares))}")
    return max(shares)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    plain: list[list[Rank]] = []
    watched: list[list[Rank]] = []
    with tempfile.TemporaryDirectory(prefix="clusterkit-bench-progress-") as name:
        folder = Path(name)
        for index in range(args.repeat):
            plain.append(run(folder, args.steps, False, 29600 + 2 * index))
            watched.append(run(folder, args.steps, True, 29601 + 2 * index))
    share = thread_cost(watched)
    without = statistics.median(step_time(ranks) for ranks in plain)
    with_ = statistics.median(step_time(ranks) for ranks in watched)
    ratio = with_ / without
    print(f"step time without the progress thread: {without * 1000:.2f} ms")
    print(f"step time with it:                     {with_ * 1000:.2f} ms")
    print(f"ratio {ratio:.3f} (target {TARGET}): {'ok' if ratio <= TARGET else 'over'}")
    print(f"load average at the end: {Path('/proc/loadavg').read_text().split()[0]}")
    return 0 if share <= TARGET_SHARE else 1


if __name__ == "__main__":
    sys.exit(main())
