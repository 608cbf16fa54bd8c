"""The bench across real hosts: network namespaces with sshd, real SSH, real torchrun and gloo.

3 of the cluster's nodes run one CPU rank each (the nodes' GPUs are replayed nvidia-smi
output; torch sees none, so gloo). Afterwards no process may remain on any node.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from clusterkit.bench.launcher import BenchOptions, BenchOutcome, launch_bench
from clusterkit.bench.nccltests import parse_table
from clusterkit.checks.model import Status
from clusterkit.inventory.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.netcluster import NetCluster

pytestmark = pytest.mark.cluster

SWEEP = {"minbytes": "256K", "maxbytes": "4M", "iters": 10, "warmup_iters": 2}


def _inventory(cluster: NetCluster, tmp_path: Path, **clusterkit) -> Path:
    return cluster.inventory(
        tmp_path / "inventory.yaml", nodes=cluster.nodes[:3], clusterkit=clusterkit or None
    )


def _launch(path: Path, seconds: float, **options) -> BenchOutcome:
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
    assert not connections.failures, connections.failures
    try:
        settings = {"backend": "gloo", "nproc_per_node": 1, "environ": {}, **SWEEP, **options}
        return launch_bench(
            connections.transports, inventory, BenchOptions(**settings), Deadline.after(seconds)
        )
    finally:
        connections.close()


def assert_nothing_left(cluster: NetCluster) -> None:
    """No torchrun, rank or node script, and no run directory, left on any node (sshd reaps
    sessions lazily, so give it a few seconds)."""
    deadline = time.monotonic() + 8
    while True:
        leftovers = {n.name: [p.command for p in n.processes()] for n in cluster.nodes}
        leftovers = {name: cmds for name, cmds in leftovers.items() if cmds}
        run_dirs = glob.glob("/tmp/clusterkit-bench-*")
        if (not leftovers and not run_dirs) or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert leftovers == {}
    assert run_dirs == []


def _by_id(outcome: BenchOutcome) -> dict:
    return {finding.id: finding for finding in outcome.findings}


def test_three_nodes_pass_and_the_table_matches_the_json(
    cluster: NetCluster, tmp_path: Path
) -> None:
    outcome = _launch(_inventory(cluster, tmp_path), 120, min_busbw=0.0001)
    findings = _by_id(outcome)
    assert findings["bench.busbw"].status is Status.OK, outcome.findings
    assert findings["bench.correctness"].status is Status.OK
    result = outcome.result
    assert result["world_size"] == 3
    assert result["gate"]["passed"] is True
    assert result["gate"]["threshold_source"] == "--min-busbw"
    assert [d["host"] for d in result["devices"]] == ["node1", "node2", "node3"]
    table = parse_table(outcome.table)
    assert [r["size"] for r in table["results"]] == [r["size"] for r in result["results"]]
    for row, ours in zip(table["results"], result["results"]):
        for place in ("out_of_place", "in_place"):  # both measured across the nodes
            assert row[place]["bus_bw"] == pytest.approx(ours[place]["bus_bw"], abs=0.006)
            assert ours[place]["nwrong"] == 0 and ours[place]["bus_bw"] > 0
    assert table["out_of_bounds"]["count"] == 0
    assert all(node.ok for node in outcome.nodes)
    assert_nothing_left(cluster)


def test_impossible_threshold_fails_with_its_source(cluster: NetCluster, tmp_path: Path) -> None:
    path = _inventory(cluster, tmp_path)
    argv = [
        sys.executable, "-m", "clusterkit", "bench", str(path), "--backend", "gloo",
        "--nproc-per-node", "1", "-b", "256K", "-e", "1M", "-n", "5", "--ssh-config",
        "/dev/null", "--timeout", "120", "--format", "json",
    ]  # fmt: skip
    env = {**os.environ, "NCCL_TESTS_MIN_BW": "100000"}
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, env=env, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    report = json.loads(done.stdout)
    busbw = next(f for f in report["findings"] if f["id"] == "bench.busbw")
    assert busbw["status"] == "fail"
    assert "NCCL_TESTS_MIN_BW=100000" in busbw["message"]
    gate = report["details"]["bench"]["result"]["gate"]
    assert gate["threshold_source"] == "NCCL_TESTS_MIN_BW"
    assert gate["threshold"] == pytest.approx(90000)  # the nccl-tests 0.9 rule
    assert_nothing_left(cluster)


def test_sweep_timeout_and_threshold_come_from_the_inventory(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """No sweep flag: `clusterkit bench` runs clusterkit.bench, as `check`'s bench stage does."""
    settings = {**SWEEP, "maxbytes": "1M", "min_busbw": 1e6, "timeout": 120}
    path = _inventory(cluster, tmp_path, bench=settings)
    argv = [
        sys.executable, "-m", "clusterkit", "bench", str(path), "--backend", "gloo",
        "--nproc-per-node", "1", "--ssh-config", "/dev/null", "--format", "json",
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 1, done.stderr[-2000:]
    result = json.loads(done.stdout)["details"]["bench"]["result"]
    assert [row["size"] for row in result["results"]] == [256 * 1024, 512 * 1024, 1024 * 1024]
    assert result["config"]["iters"] == 10
    assert result["gate"]["threshold_source"] == "inventory"
    assert_nothing_left(cluster)


def test_inventory_threshold_is_used_and_reported(cluster: NetCluster, tmp_path: Path) -> None:
    outcome = _launch(_inventory(cluster, tmp_path, bench={"min_busbw": 1e6}), 120)
    assert _by_id(outcome)["bench.busbw"].status is Status.FAIL
    assert outcome.result["gate"]["threshold_source"] == "inventory"
    assert_nothing_left(cluster)


def test_killing_the_worker_on_one_node_names_it_and_leaves_nothing(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node2's rank is SIGKILLed mid-run: the verdict names node2 within the deadline."""
    killed: list[int] = []

    def kill_node2_rank() -> None:
        end = time.monotonic() + 60
        while time.monotonic() < end:
            files = glob.glob("/tmp/clusterkit-bench-*-n1.*/rank1.kill")
            if files:
                time.sleep(8)  # torch imported, group joined, timing under way
                pid = int(Path(files[0]).read_text())
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
                return
            time.sleep(0.1)

    killer = threading.Thread(target=kill_node2_rank, daemon=True)
    killer.start()
    started = time.monotonic()
    deadline_s = 90
    outcome = _launch(_inventory(cluster, tmp_path), deadline_s, iters=100000, maxbytes="1M")
    elapsed = time.monotonic() - started
    killer.join(1)
    assert killed, "the rank on node2 never started"
    assert elapsed < deadline_s
    failed = _by_id(outcome)["bench.rank-failed"]
    assert failed.status is Status.FAIL
    assert failed.hosts == ["node2"], failed.message
    assert "rank 1 on node2 died (signal 9 SIGKILL)" in failed.message
    assert outcome.result is None
    assert_nothing_left(cluster)
