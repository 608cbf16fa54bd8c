"""The cost of one probe option to `clusterkit check`: the same check with the option on
("with") and off ("anchor"), alternating, medians compared.

Both variants start the same way (the benchmark script as a child, which sets the probe
option and calls clusterkit's own main), so the difference is the option's work alone. The
GPU-health and host-device benchmarks differ only in the option, the nodes' set-up and how
a report shows the work was done (or skipped).
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from benchmarks.machine import busy_cpu_seconds
from tests.support.netcluster import NetCluster, Node, unavailable_reason

RUN_TIMEOUT = 300.0
SKIP = "network,bench,image"
# (the report, whether the option was on) -> why the run did not do what its variant says
Verify = Callable[[dict[str, Any], bool], "str | None"]
Runs = dict[bool, list[tuple[float, float]]]


def parser(doc: str, repeat: int) -> argparse.ArgumentParser:
    """The arguments both benchmarks take; each adds its own set-up's."""
    found = argparse.ArgumentParser(description=doc.splitlines()[0])
    found.add_argument("--nodes", type=int, default=4)
    found.add_argument("--repeat", type=int, default=repeat)
    found.add_argument("--child", nargs=2, metavar=("on|off", "INVENTORY"), help=argparse.SUPPRESS)
    return found


def child(option: str, on: str, inventory: str) -> int:
    """`clusterkit check` with the probe option set (the parent's two variants)."""
    from clusterkit.__main__ import main as clusterkit_main
    from clusterkit.inventory.model import ProbeSettings

    shipped = ProbeSettings.options

    def options(self: ProbeSettings) -> dict[str, object]:
        return {**shipped(self), option: on == "on"}

    ProbeSettings.options = options  # type: ignore[method-assign]
    return clusterkit_main(["check", inventory, "--format", "json", "--skip", SKIP])


def run_check(script: str, inventory: Path, on: bool, verify: Verify) -> tuple[float, float]:
    """One `check` in a child process: its wall time (interpreter start included) and the
    seconds its report gives (the check itself)."""
    argv = [sys.executable, script, "--child", "on" if on else "off", str(inventory)]
    started = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        raise SystemExit(f"check exited {done.returncode}: {done.stderr[-2000:]}")
    report = json.loads(done.stdout)
    if not all(host["reachable"] for host in report["hosts"].values()):
        raise SystemExit("check did not reach every host")
    wrong = verify(report, on)
    if wrong:
        raise SystemExit(wrong)
    return wall, float(report["seconds"])


def measure(script: str, inventory: Path, repeat: int, verify: Verify) -> Runs:
    """Alternating runs (the order flips every round), after one warm-up of each (page
    cache, sshd, bytecode)."""
    run_check(script, inventory, True, verify)
    run_check(script, inventory, False, verify)
    runs: Runs = {True: [], False: []}
    for attempt in range(1, repeat + 1):
        for on in (True, False) if attempt % 2 else (False, True):
            busy = busy_cpu_seconds()
            wall, own = run_check(script, inventory, on, verify)
            busy = busy_cpu_seconds() - busy
            runs[on].append((wall, own))
            cores = f"machine CPU {busy:5.2f} s of {os.cpu_count()} cores"
            label = "with" if on else "anchor"
            print(f"  {label:6} run {attempt}: {wall:6.3f} s, report {own:6.3f} s  ({cores})",
                  flush=True)  # fmt: skip
    return runs


def verdict(runs: Runs, labels: tuple[str, str], heading: str, target: float) -> int:
    """The medians, each variant labelled (anchor, with), and the ratio against the target:
    0 when it is met."""
    wall = {on: statistics.median(w for w, _ in runs[on]) for on in runs}
    own = {on: statistics.median(o for _, o in runs[on]) for on in runs}
    ratio = wall[True] / wall[False]
    print(f"\nmedians over {len(runs[True])} alternating runs, {heading}, check --skip {SKIP}:")
    for on, label in zip((False, True), labels):
        print(f"  {label:30}  {wall[on]:6.3f} s  (report: {own[on]:6.3f} s)")
    print(f"report seconds, with / anchor = {own[True] / own[False]:5.3f}x")
    print(f"with / anchor = {ratio:5.3f}x (target <= {target}x): "
          f"{'met' if ratio <= target else 'MISSED'}")  # fmt: skip
    return 0 if ratio <= target else 1


def on_cluster(
    script: str, args: argparse.Namespace, set_up: Callable[[Node], None], verify: Verify
) -> Runs:
    """The runs of `measure` on a namespace cluster of `args.nodes` (as root), each node set
    up by `set_up` first."""
    reason = unavailable_reason()
    if reason:
        raise SystemExit(f"needs the namespace cluster: {reason}")
    with NetCluster(args.nodes) as cluster, tempfile.TemporaryDirectory() as scratch:
        for node in cluster:
            set_up(node)
        inventory = cluster.inventory(Path(scratch) / "inventory.yaml")
        return measure(script, inventory, args.repeat, verify)
