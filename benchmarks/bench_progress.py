"""What the ranks' progress thread costs a training step.

The same job, a 2-rank gloo loop under torchrun on this machine (each step some CPU work and
one all_reduce, as a small DDP step), runs alternately with and without the sitecustomize
`clusterkit launch` puts before every rank (clusterkit/node/launch.py SITECUSTOMIZE: a
thread reading the flight recorder's counters ten times a second). Each run reports its
median step time; the ratio of the medians (with / without) is the cost. Target: 1.01.

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
from pathlib import Path

from clusterkit.node.launch import FAULTHANDLER_VARIABLE, SITECUSTOMIZE, STACK_DIR_VARIABLE

TARGET = 1.01
JOB = r"""
import json, os, sys, time
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.set_num_threads(1)
steps, out = int(sys.argv[1]), sys.argv[2]
tensor = torch.ones(1 << 14)
weights = torch.randn(256, 256)
times = []
for step in range(steps):
    started = time.perf_counter()
    for _ in range(8):
        weights = torch.tanh(weights @ weights) * 0.5
    dist.all_reduce(tensor)
    times.append(time.perf_counter() - started)
if dist.get_rank() == 0:
    with open(out, "w") as handle:
        json.dump(times[steps // 10 :], handle)
dist.barrier()
os._exit(0)
"""


def run(folder: Path, steps: int, watched: bool, port: int) -> float:
    """One job; its median step time in seconds."""
    job = folder / "job.py"
    job.write_text(JOB)
    out = folder / f"times-{port}.json"
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
    if watched:
        assert list((folder / f"stacks-{port}").glob("progress-*.json")), "no progress written"
    return statistics.median(json.loads(out.read_text()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    plain: list[float] = []
    watched: list[float] = []
    with tempfile.TemporaryDirectory(prefix="clusterkit-bench-progress-") as name:
        folder = Path(name)
        for index in range(args.repeat):
            plain.append(run(folder, args.steps, False, 29600 + 2 * index))
            watched.append(run(folder, args.steps, True, 29601 + 2 * index))
    ratio = statistics.median(watched) / statistics.median(plain)
    print(f"step time without the progress thread: {statistics.median(plain) * 1000:.2f} ms")
    print(f"step time with it:                     {statistics.median(watched) * 1000:.2f} ms")
    print(f"ratio {ratio:.3f} (target {TARGET}): {'ok' if ratio <= TARGET else 'over'}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
