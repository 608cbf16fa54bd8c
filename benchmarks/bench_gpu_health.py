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

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.probe_option import child, on_cluster, parser, verdict  # noqa: E402
from tests.support.netcluster import Node  # noqa: E402

TARGET = 1.20  # with / anchor at most
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


def health_read(report: dict[str, Any], on: bool) -> str | None:
    """Why a run did not do (or skip) the work of its variant: the kernel log and the
    health fields both read, or neither."""
    for name, host in report["hosts"].items():
        read = (host["facts"].get("kernel_log") is not None, gpu_health_asked(host["facts"]))
        if read != (on, on):
            return f"gpu_health={on}, but {name} read (kernel log, fields) {read}"
    return None


def main() -> int:
    arguments = parser(__doc__, repeat=7)
    arguments.add_argument("--log-kib", type=int, default=1024, help="each node's kernel log")
    args = arguments.parse_args()
    if args.child:
        return child("gpu_health", *args.child)
    log = kernel_log_lines(args.log_kib)

    def set_up(node: Node) -> None:
        node.set_kernel_log(log)

    runs = on_cluster(__file__, args, set_up, health_read)
    heading = f"{args.nodes} nodes, kernel log {args.log_kib} KiB each"
    return verdict(runs, ("anchor (gpu_health: false)", "with GPU health"), heading, TARGET)


if __name__ == "__main__":
    sys.exit(main())
