"""What `clusterkit launch` costs over starting torchrun by hand, on real SSH hosts.

The same 3-node gloo job (tests/support/ddp_job.py, one step: torch import, rendezvous,
DDP, an all-reduce) is started four ways, each timed from the command to the job's end:

(a) by hand: the scripts `launch --print-dir` writes, run at once on every node over OpenSSH
    (`ssh node sh node.sh`): what a user typing torchrun on each node gets at best;
(b) `clusterkit launch --no-check`: connect, probe, plan, the node process, supervision;
(c) `clusterkit launch --skip bench`: the gate's static and network stages first;
(d) `clusterkit launch`: the whole check, the all-reduce bench included.

(b) - (a) is the launch's own overhead; (c) - (b) and (d) - (b) are the gate's. The four
take turns for --repeat rounds; medians are printed with the machine's busy CPU per run
(every node shares this machine's cores: a busy machine slows everything, the job most).
Run as root (namespaces, sshd): python benchmarks/bench_launch.py [--repeat R]
"""

from __future__ import annotations

import argparse
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import busy_cpu_seconds  # noqa: E402
from tests.support.netcluster import NetCluster  # noqa: E402

JOB = [str(REPO / "tests" / "support" / "ddp_job.py"), "--steps", "1"]
NODES = 3
RUN_TIMEOUT = 600.0
SWEEP = {"minbytes": "256K", "maxbytes": "1M", "iters": 5, "warmup_iters": 1}


def launch(inventory: Path, *options: str, expect: str = "sum_of_ranks=3") -> None:
    argv = [sys.executable, "-m", "clusterkit", "launch", str(inventory), *options, "--", *JOB]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    if done.returncode != 0 or expect not in done.stdout:
        raise SystemExit(f"launch {options} exited {done.returncode}: {done.stderr[-2000:]}")


def by_hand(cluster: NetCluster, folder: Path) -> None:
    processes = [
        subprocess.Popen(
            node.ssh_argv("sh", str(folder / f"{node.name}.sh")),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
        )
        for node in cluster.nodes[:NODES]
    ]
    outputs = [p.communicate(timeout=RUN_TIMEOUT)[0] for p in processes]
    if any(p.returncode for p in processes) or not all(b"sum_of_ranks=3" in o for o in outputs):
        raise SystemExit("by hand: a node failed: " + outputs[0].decode()[-2000:])
    # torchrun by hand leaves its log folders: this plan's only (other runs may be going on)
    for script in folder.glob("*.sh"):
        run_dir = re.search(r"--log-dir (/tmp/clusterkit-launch-\w+-n\d+)/", script.read_text())
        if run_dir:
            shutil.rmtree(run_dir[1], ignore_errors=True)


def timed(runs: dict[str, Callable[[], None]], repeat: int) -> dict[str, float]:
    """Median seconds of each way; the ways take turns, so a machine that gets busier or
    quieter during the benchmark weighs on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in runs}
    for attempt in range(repeat):
        for name, fn in runs.items():
            cpu, own, started = busy_cpu_seconds(), control_cpu(), time.monotonic()
            fn()
            seconds = time.monotonic() - started
            busy, own = busy_cpu_seconds() - cpu, control_cpu() - own
            times[name].append(seconds)
            print(
                f"  {name:<26} run {attempt + 1}: {seconds:6.2f} s (control side CPU "
                f"{own:.2f} s, machine busy CPU {busy:.1f} s)"
            )
    return {name: statistics.median(values) for name, values in times.items()}


def control_cpu() -> float:
    """CPU of this side's finished children (clusterkit, or the ssh clients): unlike wall
    time, it does not grow with what else the machine is doing."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_launch")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with NetCluster(NODES) as cluster, tempfile.TemporaryDirectory() as scratch:
        inventory = cluster.inventory(Path(scratch) / "inventory.yaml", clusterkit={"bench": SWEEP})
        plan = Path(scratch) / "plan"
        launch(inventory, "--no-check", "--print-dir", str(plan), expect="### node3")
        medians = timed(
            {
                "by hand (ssh + torchrun)": lambda: by_hand(cluster, plan),
                "launch --no-check": lambda: launch(inventory, "--no-check"),
                "launch --skip bench": lambda: launch(inventory, "--skip", "bench"),
                "launch (full check)": lambda: launch(inventory),
            },
            args.repeat,
        )
    hand = medians["by hand (ssh + torchrun)"]
    bare = medians["launch --no-check"]
    print(f"\nmedians over {args.repeat} runs, {NODES} nodes x 1 gloo rank, one training step:")
    for name, seconds in medians.items():
        print(f"  {name:<28} {seconds:6.2f} s")
    print(f"  launch overhead (b - a)      {bare - hand:+6.2f} s ({bare / hand:.2f}x by hand)")
    print(f"  gate, static + network       {medians['launch --skip bench'] - bare:+6.2f} s")
    print(f"  gate, full check with bench  {medians['launch (full check)'] - bare:+6.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
