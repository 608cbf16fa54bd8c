"""What the GPU-health checks cost `clusterkit check` on the 4-node test cluster.

Two variants of the same `clusterkit check INV --format json --skip network,bench,image`,
run alternately in the same session, `--repeat` times each, medians compared:

- **with**: as shipped: the probe asks nvidia-smi for the health fields too (row remaps,
  retired pages, PCIe width, clock event reasons, temperatures), reads each GPU's PCIe AER
  counters from sysfs and the kernel log since boot (dmesg, cut to its Xid/SXid lines); the
  checks grade them;
- **anchor**: the same check with the probe option `gpu_health: false`, which asks only the
  base fields and leaves the kernel log unread (the health and Xid checks then have nothing
  to grade).

Both start the same way (this script as a child, which sets the probe options and calls
clusterkit's own main), so the difference is the health work alone. Each node's kernel log
is a realistic healthy one of `--log-kib` KiB (no Xid). Target: with / anchor at most 1.20.
Run as root (namespaces, sshd): python benchmarks/bench_gpu_health.py [--nodes 4] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.machine import busy_cpu_seconds  # noqa: E402
from tests.support.netcluster import NetCluster, unavailable_reason  # noqa: E402

TARGET = 1.20  # with / anchor at most
RUN_TIMEOUT = 300.0
SKIP = "network,bench,image"
# Ordinary kernel messages of a GPU server, repeated to fill the log (no Xid among them).
FILLER = (
    "mlx5_core 0000:{i:02x}:00.0: mlx5_pcie_event:301: PCIe slot advertised sufficient power",
    "nvidia-nvswitch{n}: open (major=508)",
    "EXT4-fs (nvme{n}n1): re-mounted. Quota mode: none.",
    "IPv6: ADDRCONF(NETDEV_CHANGE): ib{n}: link becomes ready",
    'audit: type=1400 audit({i}.123:{n}): apparmor="STATUS" operation="profile_replace"',
)


def kernel_log_lines(kib: int) -> list[str]:
    """Healthy kernel messages adding up to about `kib` KiB."""
    lines: list[str] = []
    size = 0
    while size < kib * 1024:
        i = len(lines)
        line = FILLER[i % len(FILLER)].format(i=i % 256, n=i % 8)
        lines.append(line)
        size += len(line) + 34  # the time prefix dmesg puts before each line
    return lines


def gpu_health_asked(facts: dict[str, Any]) -> bool:
    """Whether the probe asked nvidia-smi for the health fields (a remap state came back)."""
    devices = facts.get("gpus", {}).get("devices") or [{}]
    return devices[0].get("remapped_rows.pending") is not None


def run_check(inventory: Path, health: bool) -> tuple[float, float]:
    """One `check` in a child process: its wall time (interpreter start included) and the
    seconds its report gives (the check itself)."""
    argv = [sys.executable, __file__, "--child", "on" if health else "off", str(inventory)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    seconds = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"check exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if not all(host["reachable"] for host in report["hosts"].values()):
        raise SystemExit("check did not reach every host")
    for name, host in report["hosts"].items():  # each variant did (or skipped) the work
        read = (host["facts"].get("kernel_log") is not None, gpu_health_asked(host["facts"]))
        if read != (health, health):
            raise SystemExit(f"gpu_health={health}, but {name} read (kernel log, fields) {read}")
    return seconds, float(report["seconds"])


def child(health: str, inventory: str) -> int:
    """`clusterkit check` with the probe option gpu_health set (the parent's two variants)."""
    from clusterkit.__main__ import main as clusterkit_main
    from clusterkit.inventory.model import ProbeSettings

    shipped = ProbeSettings.options

    def options(self: ProbeSettings) -> dict[str, object]:
        return {**shipped(self), "gpu_health": health == "on"}

    ProbeSettings.options = options  # type: ignore[method-assign]
    return clusterkit_main(["check", inventory, "--format", "json", "--skip", SKIP])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--log-kib", type=int, default=1024, help="each node's kernel log")
    parser.add_argument("--child", nargs=2, metavar=("on|off", "INVENTORY"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(*args.child)
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"needs the namespace cluster: {reason}")
    with NetCluster(args.nodes) as cluster, tempfile.TemporaryDirectory() as scratch:
        for node in cluster:
            node.set_kernel_log(kernel_log_lines(args.log_kib))
        inventory = cluster.inventory(Path(scratch) / "inventory.yaml")
        run_check(inventory, True)  # warm-up: page cache, sshd, bytecode
        run_check(inventory, False)
        times: dict[bool, list[float]] = {True: [], False: []}
        inside: dict[bool, list[float]] = {True: [], False: []}
        for attempt in range(1, args.repeat + 1):
            for health in (True, False) if attempt % 2 else (False, True):
                busy = busy_cpu_seconds()
                wall, own = run_check(inventory, health)
                times[health].append(wall)
                inside[health].append(own)
                busy = busy_cpu_seconds() - busy
                label = "with" if health else "anchor"
                seconds = times[health][-1]
                cores = f"machine CPU {busy:5.2f} s of {os.cpu_count()} cores"
                print(
                    f"  {label:6} run {attempt}: {seconds:6.3f} s, report {own:6.3f} s  ({cores})",
                    flush=True,
                )
    with_health, anchor = statistics.median(times[True]), statistics.median(times[False])
    ratio = with_health / anchor
    print(f"\nmedians over {args.repeat} alternating runs, {args.nodes} nodes, "
          f"kernel log {args.log_kib} KiB each, check --skip {SKIP}:")  # fmt: skip
    inner = {health: statistics.median(inside[health]) for health in inside}
    print(f"  anchor (gpu_health: false)      {anchor:6.3f} s  (report: {inner[False]:6.3f} s)")
    print(f"  with GPU health                 {with_health:6.3f} s  (report: {inner[True]:6.3f} s)")
    print(f"report seconds, with / anchor = {inner[True] / inner[False]:5.3f}x")
    verdict = "met" if ratio <= TARGET else "MISSED"
    print(f"with / anchor = {ratio:5.3f}x (target <= {TARGET}x): {verdict}")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
