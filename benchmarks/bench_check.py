"""Time `clusterkit check` (static stages) on 32 real SSH hosts against its two targets.

(a) floor: 32 parallel OpenSSH `ssh root@ADDR true` (one connection per host, nothing run),
    once with OpenSSH's default key exchange (sntrup761x25519, about 8x the CPU of a plain
    curve25519 exchange) and once with curve25519-sha256, the exchange paramiko negotiates:
    the second is the like-for-like floor the target is measured against;
(b) `clusterkit check INV --skip network,bench,image`;
(c) `ansible all -i INV -m setup -f 32` (Ansible's fact gathering: the tool people use today).
Each runs 3 times; the medians are compared. Targets: clusterkit within 1.25x of the floor
(both floors are reported: OpenSSH as shipped, which is what `ssh host true` costs a user, and
the stricter same-key-exchange one), and at least 5x faster than Ansible. Each run also prints
the machine's busy CPU: every node shares this machine's cores, so a run's wall time is bounded
below by its CPU over the cores.
Run as root (namespaces, sshd): python benchmarks/bench_check.py [--nodes N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
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

FLOOR_TARGET = 1.25  # clusterkit / floor at most
ANSIBLE_TARGET = 5.0  # ansible / clusterkit at least
RUN_TIMEOUT = 600.0


def ssh_floor(cluster: NetCluster, kex: str | None = None) -> None:
    """One OpenSSH login per node, all at once: the least any SSH-based check can cost."""
    procs = []
    for node in cluster:
        ssh, *rest = node.ssh_argv("true")
        options = ["-o", f"KexAlgorithms={kex}"] if kex else []
        procs.append(subprocess.Popen([ssh, *options, *rest], stdin=subprocess.DEVNULL))
    deadline = time.monotonic() + RUN_TIMEOUT
    try:
        codes = [p.wait(timeout=max(0.1, deadline - time.monotonic())) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    if any(codes):
        raise SystemExit(f"ssh floor: some logins failed: exit codes {codes}")


def clusterkit_check(inventory: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "clusterkit", "check", str(inventory), "--format", "json",
         "--skip", "network,bench,image"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    if done.returncode not in (0, 1):
        raise SystemExit(f"clusterkit check exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    reachable = sum(1 for host in report["hosts"].values() if host["reachable"])
    if reachable != len(report["hosts"]):
        raise SystemExit(f"clusterkit reached only {reachable} of {len(report['hosts'])} hosts")


def ansible_setup(inventory: Path, nodes: int) -> None:
    # Fresh control sockets per run (a cold start, like clusterkit's), persisting only 2 s so
    # no master connection outlives the benchmark.
    with tempfile.TemporaryDirectory(prefix="bench-ansible-") as control_dir:
        env = dict(
            os.environ,
            ANSIBLE_SSH_CONTROL_PATH_DIR=control_dir,
            ANSIBLE_SSH_ARGS="-C -o ControlMaster=auto -o ControlPersist=2s",
            ANSIBLE_LOCAL_TEMP=str(Path(control_dir) / "tmp"),
            ANSIBLE_NOCOLOR="1",
        )
        done = subprocess.run(
            ["ansible", "all", "-i", str(inventory), "-m", "setup", "-f", str(nodes)],
            capture_output=True, text=True, timeout=RUN_TIMEOUT, env=env, check=False,
        )  # fmt: skip
        time.sleep(2.5)  # let the persisted masters exit before their directory goes
    if done.returncode != 0:
        raise SystemExit(f"ansible exited {done.returncode}: {done.stdout[-2000:]}")


def median_seconds(name: str, fn: Callable[[], None], repeat: int) -> float:
    times = []
    for attempt in range(1, repeat + 1):
        started, busy = time.perf_counter(), busy_cpu_seconds()
        fn()
        times.append(time.perf_counter() - started)
        busy = busy_cpu_seconds() - busy
        print(
            f"  {name:12} run {attempt}: {times[-1]:7.2f} s"
            f"  (machine CPU {busy:5.2f} s: {busy / times[-1]:.1f} of {os.cpu_count()} cores)",
            flush=True,
        )
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=32)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    if shutil.which("ansible") is None:
        raise SystemExit("ansible is not on PATH (pip install ansible-core)")
    started = time.monotonic()
    with NetCluster(args.nodes) as cluster, tempfile.TemporaryDirectory() as scratch:
        print(f"{args.nodes}-node cluster built in {time.monotonic() - started:.1f} s", flush=True)
        inventory = cluster.inventory(Path(scratch) / "inventory.yaml")
        default_floor = median_seconds("ssh default", lambda: ssh_floor(cluster), args.repeat)
        floor = median_seconds(
            "ssh c25519", lambda: ssh_floor(cluster, "curve25519-sha256"), args.repeat
        )
        check = median_seconds("clusterkit", lambda: clusterkit_check(inventory), args.repeat)
        ansible = median_seconds(
            "ansible", lambda: ansible_setup(inventory, args.nodes), args.repeat
        )
    print(f"\nmedians over {args.repeat} runs on {args.nodes} hosts:")
    print(f"  ssh floor, OpenSSH default kex   {default_floor:7.2f} s")
    print(f"  ssh floor, curve25519-sha256     {floor:7.2f} s")
    print(f"  clusterkit check                 {check:7.2f} s")
    print(f"  ansible -m setup                 {ansible:7.2f} s")
    for label, ratio in (
        ("OpenSSH floor as shipped (default kex)", check / default_floor),
        ("OpenSSH floor, paramiko's kex (curve25519)", check / floor),
    ):
        verdict = "met" if ratio <= FLOOR_TARGET else "MISSED"
        print(f"clusterkit / {label:43} = {ratio:5.2f}x (target <= {FLOOR_TARGET}x): {verdict}")
    vs_ansible = ansible / check
    verdict = "met" if vs_ansible >= ANSIBLE_TARGET else "MISSED"
    label = "ansible / clusterkit"
    print(f"{label:56} = {vs_ansible:5.2f}x (target >= {ANSIBLE_TARGET}x): {verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
