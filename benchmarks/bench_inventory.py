"""Time load_inventory on large YAML and INI inventories and check that it grows linearly.

Each inventory has N hosts with an address and a variable in one group, a group variable and
a group_vars/ file beside it. Target: 10,000 hosts well under a second; 100,000 hosts about
ten times that (linear, not quadratic). Wall time depends on what else the machine runs, so
the CPU time of this process is printed too and the target is judged on it (on a quiet
machine the two agree).
Run: python benchmarks/bench_inventory.py
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from clusterkit.settings.loader import load_inventory

TARGET_10K_S = 1.0
SIZES = (1_000, 10_000, 100_000)
RUNS = 3


def write_yaml(directory: Path, hosts: int) -> Path:
    lines = ["all:", "  vars:", "    ansible_user: ops", "  children:", "    gpu:", "      hosts:"]
    for i in range(hosts):
        address = f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255}"
        lines.append(f"        node{i:06d}: {{ansible_host: {address}, rank: {i}}}")
    path = directory / "inventory.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def write_ini(directory: Path, hosts: int) -> Path:
    lines = ["[gpu]"]
    for i in range(hosts):
        lines.append(f"node{i:06d} ansible_host=10.{i >> 16}.{(i >> 8) & 255}.{i & 255} rank={i}")
    lines += ["[all:vars]", "ansible_user=ops"]
    path = directory / "hosts.ini"
    path.write_text("\n".join(lines) + "\n")
    return path


def best_of(path: Path, hosts: int) -> tuple[float, float]:
    """(best wall seconds, best CPU seconds of this process) over RUNS loads."""
    walls, cpus = [], []
    for _ in range(RUNS):
        started, cpu_started = time.perf_counter(), time.process_time()
        inventory = load_inventory(path)
        walls.append(time.perf_counter() - started)
        cpus.append(time.process_time() - cpu_started)
        assert len(inventory.hosts) == hosts
    return min(walls), min(cpus)


def main() -> None:
    print(f"{'form':<5} {'hosts':>8} {'wall s':>8} {'cpu s':>8} {'cpu us/host':>12}")
    per_host: dict[str, list[float]] = {"yaml": [], "ini": []}
    for hosts in SIZES:
        with tempfile.TemporaryDirectory() as directory:
            base = Path(directory)
            (base / "group_vars").mkdir()
            (base / "group_vars" / "gpu.yml").write_text("nccl_socket_ifname: eth0\n")
            for form, writer in (("yaml", write_yaml), ("ini", write_ini)):
                wall, cpu = best_of(writer(base, hosts), hosts)
                per_host[form].append(cpu / hosts * 1e6)
                print(f"{form:<5} {hosts:>8} {wall:>8.3f} {cpu:>8.3f} {cpu / hosts * 1e6:>12.1f}")
                if hosts == 10_000:
                    verdict = "ok" if cpu < TARGET_10K_S else "SLOW"
                    print(f"      10k target {TARGET_10K_S:.1f} s (CPU): {verdict}")
    for form, costs in per_host.items():
        spread = max(costs) / statistics.median(costs)
        print(f"{form}: per-host cost varies {spread:.2f}x from 1k to 100k hosts (1.0 = linear)")


if __name__ == "__main__":
    main()
