"""`clusterkit check` with every stage, on real hosts: the stages are wired and gate each other."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.support.netcluster import NetCluster


def check_json(inventory: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = subprocess.run(
        [sys.executable, "-m", "clusterkit", "check", str(inventory), "--format", "json", *args],
        capture_output=True, text=True, timeout=400, check=False,
    )  # fmt: skip
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_healthy_cluster_passes_every_stage(cluster: NetCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(tmp_path / "inv.yaml", nodes=cluster.nodes[:3])
    status, report = check_json(inventory)
    bad = [f for f in report["findings"] if f["status"] in ("fail", "error")]
    assert status == 0, bad
    assert report["stages"]["network"] == "ran" and report["stages"]["bench"] == "ran"
    ids = {f["id"] for f in report["findings"] if f["status"] == "ok"}
    assert {"net.mesh", "net.rendezvous", "bench.busbw", "bench.correctness"} <= ids
    result = report["details"]["bench"]["result"]
    assert len({device["host"] for device in result["devices"]}) == 3  # one rank per node
    assert all(not node.processes() for node in cluster.nodes)


def test_blocked_ports_fail_the_network_and_skip_the_bench(
    cluster: NetCluster, tmp_path: Path
) -> None:
    node3, node1 = cluster.nodes[2], cluster.nodes[0]
    node3.iptables(
        "-I", "INPUT", "-p", "tcp", "-s", node1.address, "--dport", "1024:65535", "-j", "REJECT",
    )  # fmt: skip
    inventory = cluster.inventory(tmp_path / "inv.yaml", nodes=cluster.nodes[:3])
    status, report = check_json(inventory)
    assert status == 1
    mesh = [f for f in report["findings"] if f["id"] == "net.mesh" and f["status"] == "fail"]
    assert mesh and "node3" in mesh[0]["hosts"]
    assert "network stage failed" in report["stages"]["bench"]
    assert "net.mesh" in report["stages"]["bench"]
    assert "bench" not in report["details"]
    assert all(not node.processes() for node in cluster.nodes)


def test_unreachable_host_skips_the_bench_and_is_incomplete(
    cluster: NetCluster, tmp_path: Path
) -> None:
    cluster.nodes[1].stop_sshd()
    inventory = cluster.inventory(tmp_path / "inv.yaml", nodes=cluster.nodes[:3])
    status, report = check_json(inventory, "--connect-timeout", "3")
    assert status == 3 and report["verdict"] == "incomplete"
    assert "not every host could be reached" in report["stages"]["bench"]
