"""What the host-device reads (NVMe SMART, processes stuck in D state) cost `clusterkit check`.

Two variants of the same `clusterkit check INV --format json --skip network,bench,image` on
the 4-node test cluster, run alternately in one session, `--repeat` times each, medians
compared:

- **with**: as shipped: the probe also looks for nvme-cli (and asks it where it is) and reads
  every process's /proc/PID/stat once;
- **anchor**: the same check with the probe option `host_devices: false`, which leaves both
  unread (the host.nvme and host.dstate checks then have nothing to grade).

`--nvme N` puts the nvme stand-in with N drives on every node (it is a Python program, so each
of its answers costs an interpreter start that the real nvme-cli, a C program, does not).
Target: with / anchor at most 1.05 (issue 34: `check` at most 5% dearer for these additions).
Run as root (namespaces, sshd): python benchmarks/bench_host_health.py [--repeat 9] [--nvme 0]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tests.support.netcluster import NetCluster, unavailable_reason  # noqa: E402

TARGET = 1.05
RUN_TIMEOUT = 300.0
SKIP = "network,bench,image"


def run_check(inventory: Path, devices: bool) -> tuple[float, float]:
    """One `check` in a child process: (wall seconds, the report's own seconds)."""
    argv = [sys.executable, __file__, "--child", "on" if devices else "off", str(inventory)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"check exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    for name, host in report["hosts"].items():  # each variant did (or skipped) the work
        read = "dstate" in (host.get("facts") or {})
        if read != devices:
            raise SystemExit(f"host_devices={devices}, but {name} read D state: {read}")
    return wall, float(report["seconds"])


def child(devices: str, inventory: str) -> int:
    """`clusterkit check` with the probe option host_devices set."""
    from clusterkit.__main__ import main as clusterkit_main
    from clusterkit.inventory.model import ProbeSettings

    shipped = ProbeSettings.options

    def options(self: ProbeSettings) -> dict[str, object]:
        return {**shipped(self), "host_devices": devices == "on"}

    ProbeSettings.options = options  # type: ignore[method-assign]
    return clusterkit_main(["check", inventory, "--format", "json", "--skip", SKIP])


def measure(inventory: Path, repeat: int) -> dict[bool, list[tuple[float, float]]]:
    """Alternating runs (the order flips every round), after one warm-up of each."""
    run_check(inventory, True)
    run_check(inventory, False)
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for attempt in range(1, repeat + 1):
        for devices in (True, False) if attempt % 2 else (False, True):
            wall, own = run_check(inventory, devices)
            runs[devices].append((wall, own))
            label = "with" if devices else "anchor"
            print(f"  {label:6} run {attempt}: {wall:6.3f} s, report {own:6.3f} s", flush=True)
    return runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=9)
    parser.add_argument("--nvme", type=int, default=0, help="stand-in drives on every node")
    parser.add_argument("--child", nargs=2, metavar=("on|off", "INVENTORY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"needs the namespace cluster: {reason}")
    with NetCluster(args.nodes) as cluster, tempfile.TemporaryDirectory() as scratch:
        for node in cluster:
            node.set_nvme([{"name": f"nvme{n}"} for n in range(args.nvme)] if args.nvme else None)
        runs = measure(cluster.inventory(Path(scratch) / "inventory.yaml"), args.repeat)
    wall = {d: statistics.median(w for w, _ in runs[d]) for d in runs}
    own = {d: statistics.median(o for _, o in runs[d]) for d in runs}
    ratio = wall[True] / wall[False]
    print(f"\nmedians over {args.repeat} alternating runs, {args.nodes} nodes, "
          f"{args.nvme} stand-in NVMe drives each, check --skip {SKIP}:")  # fmt: skip
    print(f"  anchor (host_devices: false)  {wall[False]:6.3f} s  (report: {own[False]:6.3f} s)")
    print(f"  with NVMe and D state         {wall[True]:6.3f} s  (report: {own[True]:6.3f} s)")
    print(f"report seconds, with / anchor = {own[True] / own[False]:5.3f}x")
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"with / anchor = {ratio:5.3f}x (target <= {TARGET}x): {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
