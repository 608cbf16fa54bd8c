"""A straggler during the run: seconds from a node becoming slow to `launch` naming it.

A 3-node gloo job (tests/support/ddp_job.py, a CPU-bound step of --compute-ms) runs under
`clusterkit launch --no-check` on namespace nodes. Once it has trained for a full straggler
window (so the window the rule reads holds only healthy samples), node3's processes, the
ranks included, are moved into a cgroup with --fraction of one core (a CFS quota, as the
straggler cluster test does): from then on every other rank waits for node3's in each
all_reduce. Timed: the throttle to the "node3 is a straggler" line. The anchor, in the same
run, is the window the rule judged over (the seconds that line names: STRAGGLER_WINDOW
samples of each rank, one every PROGRESS_SECONDS); the ratio says how much of one window the
naming took. A node is named once its ranks computed in STRAGGLER_BUSY of the window, and
STRAGGLER_MARGIN more than the other nodes' ranks: how much of a window of slow samples that
takes depends on how much the healthy ranks computed before (nodes sharing this machine's
cores compute much of the time) and how fast their share falls as they start waiting.
The issue sets no target; the exit status is 1 when node3 is not the node named. The run is
then ended with Ctrl-C. Run as root (namespaces, sshd, cgroups):

    python benchmarks/bench_straggler.py [--repeat 1] [--compute-ms 150] [--fraction 0.1]
"""

from __future__ import annotations

import argparse
import re
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.bench_watch import Run  # noqa: E402
from clusterkit.launch.progress import (  # noqa: E402
    STRAGGLER_BUSY,
    STRAGGLER_MARGIN,
    STRAGGLER_WINDOW,
)
from clusterkit.node.launch import PROGRESS_SECONDS  # noqa: E402
from tests.support.cpushares import CpuShares  # noqa: E402
from tests.support.netcluster import NetCluster, pids_in_netns  # noqa: E402

THROTTLED = "node3"
NAMED = re.compile(
    r"clusterkit: (\S+) is a straggler: its ranks computed in (\d+%) of the last (\d+) s .*"
    r"\(they computed in (\d+%)\): (.*)$"
)
END_SECONDS = 120.0  # a stopped launch has ended by then


def one_run(cluster: NetCluster, inventory: Path, args: argparse.Namespace) -> tuple[float, float]:
    """(throttle -> named, the window named), seconds; SystemExit when another node is named
    or none is."""
    job = ["--steps", "100000", "--compute-ms", str(args.compute_ms)]
    run = Run(inventory, ["--no-check"], job)
    first = run.wait(r"^node\d/\d+: step 1 ")
    window = STRAGGLER_WINDOW * PROGRESS_SECONDS
    while time.monotonic() < first + window + 2 * PROGRESS_SECONDS:  # a full healthy window
        if run.process.poll() is not None:
            raise SystemExit("the job ended before the throttle")
        time.sleep(0.1)
    node = next(node for node in cluster.nodes if node.name == THROTTLED)
    with CpuShares(args.fraction) as shares:
        throttled = time.monotonic()
        shares.confine(THROTTLED, pids_in_netns(node.netns))
        named_at = run.wait(r"clusterkit: \S+ is a straggler", seconds=20 * window)
        line = next(line for at, line in run.lines if at == named_at and NAMED.search(line))
        run.process.send_signal(signal.SIGINT)
        run.process.wait(END_SECONDS)
        run.reader.join(10)
    found = NAMED.search(line)
    assert found is not None  # the line matched the wait's pattern
    if found[1] != THROTTLED:
        raise SystemExit(f"named {found[1]}, not {THROTTLED}: {line}")
    print(f"  named after {named_at - throttled:.1f} s: {found[1]}, busy in {found[2]} of the "
          f"window, the others in {found[4]}: {found[5]}")  # fmt: skip
    return named_at - throttled, float(found[3])


def main() -> int:
    parser = argparse.ArgumentParser(prog="bench_straggler")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--compute-ms", type=float, default=150.0)
    parser.add_argument("--fraction", type=float, default=0.1, help="node3's share of a core")
    args = parser.parse_args()
    reason = CpuShares.reason()
    if reason:
        raise SystemExit(f"needs CPU slices for one node: {reason}")
    named: list[float] = []
    windows: list[float] = []
    with NetCluster(3) as cluster, tempfile.TemporaryDirectory() as folder:
        inventory = cluster.inventory(Path(folder) / "three.yaml")
        for _ in range(args.repeat):
            seconds, window = one_run(cluster, inventory, args)
            named.append(seconds)
            windows.append(window)
    ratio = statistics.median(s / w for s, w in zip(named, windows))
    print(
        f"\nmedians over {args.repeat} run(s), 3 nodes x 1 gloo rank, {args.compute_ms:g} ms "
        f"steps, {THROTTLED} at {args.fraction:g} of a core:\n"
        f"  straggling -> named {statistics.median(named):.1f} s; the rule's window in the "
        f"same run {statistics.median(windows):.0f} s ({STRAGGLER_WINDOW} samples every "
        f"{PROGRESS_SECONDS:g} s): ratio {ratio:.2f} (the rule: busy in {STRAGGLER_BUSY:.0%} "
        f"of the window and {STRAGGLER_MARGIN * 100:.0f} points more than the others)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
