"""`bench --find-slow` on real hosts: namespace nodes over SSH, real torchrun and gloo.

One node of eight is throttled to a quarter of the others' CPU (a cgroup quota and weight:
tests/support/cpushares.py), so every all-reduce it takes part in runs slower; the finder
must name that node and no other, though the machine is shared with other test runs. A
node that cannot run the worker is named as failing. Ctrl-C during a round leaves nothing.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from clusterkit.bench.findslow import find_slow_nodes
from clusterkit.bench.launcher import BenchOptions
from clusterkit.checks.model import Status
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.cli import run_cli
from tests.support.cpushares import CpuShares
from tests.support.netcluster import NetCluster, NodeProcess, pids_in_netns, unavailable_reason

pytestmark = pytest.mark.slow

NODES = 8
THROTTLED = "node5"
SLICE = 0.5  # of a core per node; the machine has 2, so the weights decide under load
THROTTLED_SLICE = SLICE / 4
SYSTEM_PYTHON = "/usr/bin/python3"  # no torch there: the worker cannot start


@pytest.fixture(scope="module")
def eight() -> Iterator[NetCluster]:
    reason = unavailable_reason() or CpuShares.reason()
    if reason:
        pytest.skip(f"needs a namespace cluster with CPU slices: {reason}")
    cluster = NetCluster(NODES)
    try:
        yield cluster
    finally:
        cluster.close()


def wait_until_nothing_runs(nodes: list, seconds: float = 15) -> dict[str, list[NodeProcess]]:
    """What still runs on the nodes once sshd has reaped its sessions (or the wait ended)."""
    give_up = time.monotonic() + seconds
    while True:
        left = {node.name: node.processes() for node in nodes}
        left = {name: found for name, found in left.items() if found}
        if not left or time.monotonic() > give_up:
            return left
        time.sleep(0.2)


def run_dirs(details: dict) -> list[str]:
    """The run directories of a find-slow run that still exist (each node removes its own)."""
    run_id = details["run_id"]
    rounds = len(details["rounds"])
    return [
        str(path)
        for r in range(1, rounds + 1)
        for g in range(1, NODES)
        for n in range(NODES)
        for path in Path("/tmp").glob(f"clusterkit-bench-{run_id}-r{r}-g{g}-n{n}.*")
    ]


def test_the_throttled_node_is_named_and_no_healthy_one(eight: NetCluster, tmp_path: Path) -> None:
    bench = {
        "minbytes": "1M", "maxbytes": "1M", "iters": 5, "warmup_iters": 1,
        "find_slow": True, "find_slow_bytes": "8M", "timeout": 1500, "join_timeout": 600,
    }  # fmt: skip
    inventory = eight.inventory(tmp_path / "inventory.yaml", clusterkit={"bench": bench})
    argv = ["bench", str(inventory), "--backend", "gloo", "--nproc-per-node", "1"]
    argv += ["--ssh-config", "/dev/null", "--format", "json"]
    with CpuShares(SLICE, weighted=True) as shares:
        for node in eight:  # sshd too: the SSH sessions of the run inherit the slice
            fraction = THROTTLED_SLICE if node.name == THROTTLED else SLICE
            shares.confine(node.name, pids_in_netns(node.netns), fraction)
        started = time.monotonic()
        done = run_cli(argv, timeout=1600)
        seconds = time.monotonic() - started
    assert done.status == 0, done.stderr[-3000:]  # a slow node warns; the gate decides
    report = json.loads(done.stdout)
    finding = next(f for f in report["findings"] if f["id"] == "bench.slow-node")
    slow = report["details"]["bench"]["find_slow"]
    assert finding["status"] == "warn", (finding, slow)
    assert finding["hosts"] == [THROTTLED], json.dumps(slow, indent=1)
    assert slow["slow"] == [THROTTLED]
    assert slow["round_count"] == slow["rounds_planned"] == 3
    assert slow["group_size"] == 2 and slow["bytes"] == 8 << 20
    for entry in slow["rounds"]:
        assert len(entry["groups"]) == 4 and entry["seconds"] > 0
        assert entry["not_ready"] == entry["no_go"] == []  # every group timed together
        assert all(g["busbw"] and g["together"] and not g["error"] for g in entry["groups"])
        mine = next(g for g in entry["groups"] if THROTTLED in g["hosts"])
        assert mine["ratio"] < 0.7, entry
    nodes = slow["nodes"]
    assert sorted(nodes) == sorted(node.name for node in eight)
    assert nodes[THROTTLED]["slow_rounds"] == nodes[THROTTLED]["rounds"] == 3
    assert nodes[THROTTLED]["median_ratio"] < 0.7
    assert f"{THROTTLED}: slow in 3 of 3 rounds" in finding["message"]
    # Every figure is rounded to the millisecond: the rounds' sum may pass the total by that.
    rounding = 0.001 * (len(slow["rounds"]) + 1)
    assert sum(entry["seconds"] for entry in slow["rounds"]) <= slow["seconds"] + rounding
    assert slow["seconds"] < seconds
    assert wait_until_nothing_runs(eight.nodes) == {}
    assert run_dirs(slow) == []


def _options(**given) -> BenchOptions:
    settings = {
        "backend": "gloo", "nproc_per_node": 1, "environ": {}, "iters": 2,
        "warmup_iters": 1, "find_slow": True, "find_slow_bytes": "256K", "join_timeout": 120,
        "find_slow_seconds": 1,
    }  # fmt: skip
    return BenchOptions(**{**settings, **given})


def test_a_node_that_cannot_run_the_worker_is_named_failing(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node3's interpreter has no torch: every group with node3 fails, and it alone is named;
    its partners' groups are stopped at once and nothing is left anywhere."""
    path = cluster.inventory(
        tmp_path / "inventory.yaml",
        host_vars={"node3": {"ansible_python_interpreter": SYSTEM_PYTHON}},
    )
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
    assert not connections.failures, connections.failures
    try:
        outcome = find_slow_nodes(
            connections.transports, inventory, _options(), Deadline.after(600)
        )
    finally:
        connections.close()
    finding = outcome.findings[0]
    assert finding.status is Status.WARN and finding.hosts == ["node3"], outcome.details
    assert finding.found["node3"]["failed_rounds"] == 3
    assert "its group failed in 3 rounds" in finding.message
    for entry in outcome.details["rounds"]:
        for group in entry["groups"]:
            assert (group["error"] is not None) == ("node3" in group["hosts"]), group
            if "node3" in group["hosts"]:
                assert "node3" in group["error"]
    assert wait_until_nothing_runs(cluster.nodes) == {}
    assert run_dirs(outcome.details) == []


def test_ctrl_c_during_a_round_leaves_nothing(cluster: NetCluster, tmp_path: Path) -> None:
    bench = {"minbytes": "64K", "maxbytes": "64K", "iters": 1, "warmup_iters": 0}
    inventory = cluster.inventory(tmp_path / "inventory.yaml", clusterkit={"bench": bench})
    argv = [
        sys.executable, "-m", "clusterkit", "bench", str(inventory), "--backend", "gloo",
        "--nproc-per-node", "1", "--ssh-config", "/dev/null", "--find-slow", "--timeout", "600",
    ]  # fmt: skip
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    barrier_dirs: set[str] = set()
    give_up = time.monotonic() + 300
    while time.monotonic() < give_up and process.poll() is None:
        for node in cluster.nodes:  # a group's rank, waiting for its go or measuring
            for found in node.processes():
                if "--barrier-dir" in found.argv:
                    barrier_dirs.add(found.argv[found.argv.index("--barrier-dir") + 1])
        if len(barrier_dirs) >= 2:
            break
        time.sleep(0.2)
    assert len(barrier_dirs) >= 2, "no round of groups started"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130, stderr[-2000:]
    assert wait_until_nothing_runs(cluster.nodes) == {}
    assert [path for path in barrier_dirs if os.path.exists(path)] == []
