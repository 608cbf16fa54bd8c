"""`clusterkit check` now against the same check of an earlier revision, in one run.

Issue 34's target is relative to the code before its additions (real kernel-log shapes, host
faults, thresholds, the reset verdict), not to a probe option: this runs `clusterkit check INV
--format json --skip network,bench,image` on the 4-node test cluster alternately with this
tree and with REV (`git archive REV` unpacked into a temporary folder, run with its own
`clusterkit` first on sys.path), `--repeat` times each after a warm-up, medians compared.
Both reach every host of the same cluster; each run is a child process (interpreter start
included), as a user runs it. The test cluster's kernel logs are small: `--log-lines N` gives
every node's kernel-log stand-in N ordinary lines (and an Xid), so the scan is measured too.
Target: now / before at most 1.05.

Run as root (namespaces, sshd):
    python benchmarks/bench_before_after.py [--rev 5197574] [--repeat 7] [--log-lines 20000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.netcluster import NetCluster, unavailable_reason  # noqa: E402

TARGET = 1.05
RUN_TIMEOUT = 300.0
SKIP = "network,bench,image"
XID = "NVRM: Xid (PCI:0000:18:00): 13, pid=2345, name=python3, Graphics SM Warp Exception"


def unpack(rev: str, folder: Path) -> Path:
    """The clusterkit package of `rev`, unpacked into `folder`."""
    archive = folder / "before.tar"
    with archive.open("wb") as out:
        argv = ["git", "-C", str(REPO), "archive", rev, "clusterkit"]  # the package alone
        subprocess.run(argv, stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(folder / "before", filter="data")
    return folder / "before"


def run_check(tree: Path, inventory: Path) -> float:
    """One `check` with the clusterkit of `tree`: its wall seconds."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    argv = [sys.executable, "-m", "clusterkit", "check", str(inventory), "--format", "json",
            "--skip", SKIP]  # fmt: skip
    started = time.perf_counter()
    done = subprocess.run(
        argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env, cwd=tree, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"{tree}: check exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if not all(host.get("reachable") for host in report["hosts"].values()):
        raise SystemExit(f"{tree}: not every host was reached")
    return wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rev", default="5197574", help="the revision to compare with")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--log-lines", type=int, default=20000)
    args = parser.parse_args()
    if reason := unavailable_reason():
        print(f"skipped: {reason}")
        return 0
    with tempfile.TemporaryDirectory(prefix="clusterkit-bench-before-") as name:
        before = unpack(args.rev, Path(name))
        with NetCluster(4) as cluster:
            filler = [
                f"usb 1-{i % 9}: new high-speed USB device number {i}"
                for i in range(args.log_lines)
            ]
            for node in cluster.nodes:
                node.set_kernel_log([*filler, XID])
            inventory = cluster.inventory(Path(name) / "inventory.yaml")
            trees = {"now": REPO, "before": before}
            for tree in trees.values():
                run_check(tree, inventory)  # warm-up
            times: dict[str, list[float]] = {"now": [], "before": []}
            for attempt in range(args.repeat):
                order = ("now", "before") if attempt % 2 == 0 else ("before", "now")
                for label in order:
                    times[label].append(run_check(trees[label], inventory))
                    print(f"  {label:6} run {attempt + 1}: {times[label][-1]:6.3f} s", flush=True)
    now, then = statistics.median(times["now"]), statistics.median(times["before"])
    ratio = now / then
    print(f"check now {now:.3f} s, at {args.rev} {then:.3f} s (medians of {args.repeat})")
    print(f"ratio {ratio:.3f} (target {TARGET}): {'ok' if ratio <= TARGET else 'over'}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
