"""A fixed slice of CPU per simulated node (cgroup CPU quota), for benchmarks and tests that
need nodes to run at a set speed however many share this machine, or one node slower."""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
MIN_QUOTA_US = 1000  # the kernel's smallest CFS quota


class CpuShares:
    """Give each simulated node its own fixed slice of CPU, as real nodes each have their
    own CPUs: a cgroup per node with a CFS quota of `fraction` of one core. The slice does
    not depend on how many nodes exist, so a small and a large cluster run at the same
    per-node speed. cgroup v1 (cpu controller) and v2 both work; `reason()` says why not.
    Processes forked later (SSH sessions) inherit their node's group.

    A quota is a ceiling, not a floor: on a machine busy with other work a node may get less
    than its slice. `weighted` also gives each node a CPU weight in proportion to its slice,
    and the parent the sum of them (as many ordinary processes as full-slice nodes), so that
    under contention the nodes still divide what they get in the ratio of their slices."""

    def __init__(self, fraction: float, *, weighted: bool = False) -> None:
        self.fraction = fraction
        self.weighted = weighted
        self.weights: list[float] = []
        self.v2 = (CGROUP_ROOT / "cgroup.controllers").exists()
        self.root = CGROUP_ROOT if self.v2 else CGROUP_ROOT / "cpu"
        self.parent = self.root / f"clusterkit-bench-{os.getpid()}"
        self.groups: list[Path] = []
        # cgroup v1 may mount cpuacct apart from cpu: the nodes' CPU time is counted there,
        # in one group holding them all (v2 and a joint cpu,cpuacct mount count it in parent).
        separate = CGROUP_ROOT / "cpuacct"
        self.account: Path | None = None
        joint = self.v2 or (self.root / "cpuacct.usage").exists()
        if not joint and (separate / "cpuacct.usage").exists():
            self.account = separate / self.parent.name

    @staticmethod
    def reason() -> str | None:
        if os.geteuid() != 0:
            return "needs root to create cgroups"
        if (CGROUP_ROOT / "cgroup.controllers").exists():
            if "cpu" not in (CGROUP_ROOT / "cgroup.controllers").read_text().split():
                return "the cgroup v2 cpu controller is not available"
        elif not (CGROUP_ROOT / "cpu" / "cpu.cfs_quota_us").exists():
            return "no cgroup cpu controller mounted"
        return None

    def confine(self, name: str, pids: list[int], fraction: float | None = None) -> None:
        """Move `pids` into group `name` with a quota of `fraction` (default: the shared
        slice) of one core; a slower node is a smaller fraction."""
        fraction = fraction if fraction is not None else self.fraction
        if not self.parent.exists():
            self.parent.mkdir()
            if self.v2:
                (self.root / "cgroup.subtree_control").write_text("+cpu")
                (self.parent / "cgroup.subtree_control").write_text("+cpu")
        group = self.parent / name
        group.mkdir()
        self.groups.append(group)
        period = max(1000, round(MIN_QUOTA_US / fraction))
        quota = round(fraction * period)
        if self.v2:
            (group / "cpu.max").write_text(f"{quota} {period}")
        else:
            (group / "cpu.cfs_period_us").write_text(str(period))
            (group / "cpu.cfs_quota_us").write_text(str(quota))
        if self.weighted:
            weight = fraction / self.fraction
            self.weights.append(weight)
            self._weigh(group, weight)
            self._weigh(self.parent, sum(self.weights))
        if self.account is not None:
            self.account.mkdir(exist_ok=True)
        for pid in pids:
            try:
                (group / "cgroup.procs").write_text(str(pid))
                if self.account is not None:
                    (self.account / "cgroup.procs").write_text(str(pid))
            except ProcessLookupError:
                continue  # exited meanwhile

    def used_seconds(self) -> float | None:
        """CPU time the confined nodes (every process they started) have used so far; None
        where this machine's cgroups do not count it."""
        try:
            if self.v2:
                for line in (self.parent / "cpu.stat").read_text().splitlines():
                    if line.startswith("usage_usec "):
                        return int(line.split()[1]) / 1e6
                return None
            counted = self.account or self.parent
            return int((counted / "cpuacct.usage").read_text()) / 1e9
        except (OSError, ValueError):
            return None

    def _weigh(self, group: Path, processes: float) -> None:
        """The weight of `processes` ordinary processes (v1 cpu.shares 1024, v2 weight 100)."""
        if self.v2:
            (group / "cpu.weight").write_text(str(max(1, min(10000, round(100 * processes)))))
        else:
            (group / "cpu.shares").write_text(str(max(2, min(262144, round(1024 * processes)))))

    def close(self) -> None:
        """Move what still runs back to the root group and remove the groups."""
        accounts = [self.account] if self.account is not None and self.account.exists() else []
        for group in [*self.groups, *accounts]:
            root = group.parent if group in accounts else self.root
            give_up = time.monotonic() + 5.0
            while True:
                for pid in (group / "cgroup.procs").read_text().split():
                    try:
                        (root / "cgroup.procs").write_text(pid)
                    except ProcessLookupError:
                        continue
                try:
                    group.rmdir()
                    break
                except OSError as error:  # a process still exiting keeps the group busy
                    if error.errno != errno.EBUSY or time.monotonic() > give_up:
                        raise
                    time.sleep(0.05)
        if self.parent.exists():
            self.parent.rmdir()
        self.groups = []
        self.weights = []

    def __enter__(self) -> CpuShares:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
