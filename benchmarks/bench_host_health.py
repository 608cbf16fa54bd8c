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

import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from benchmarks.probe_option import child, on_cluster, parser, verdict  # noqa: E402
from tests.support.netcluster import Node  # noqa: E402

TARGET = 1.05


def devices_read(report: dict[str, Any], on: bool) -> str | None:
    """Why a run did not do (or skip) the work of its variant: D state read or not."""
    for name, host in report["hosts"].items():
        read = "dstate" in (host.get("facts") or {})
        if read != on:
            return f"host_devices={on}, but {name} read D state: {read}"
    return None


def main() -> int:
    arguments = parser(__doc__, repeat=9)
    arguments.add_argument("--nvme", type=int, default=0, help="stand-in drives on every node")
    args = arguments.parse_args()
    if args.child:
        return child("host_devices", *args.child)

    def set_up(node: Node) -> None:
        node.set_nvme([{"name": f"nvme{n}"} for n in range(args.nvme)] if args.nvme else None)

    runs = on_cluster(__file__, args, set_up, devices_read)
    heading = f"{args.nodes} nodes, {args.nvme} stand-in NVMe drives each"
    return verdict(runs, ("anchor (host_devices: false)", "with NVMe and D state"), heading, TARGET)


if __name__ == "__main__":
    sys.exit(main())
