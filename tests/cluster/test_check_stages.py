"""`clusterkit check` with every stage, on real hosts: the stages are wired and gate each other."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster, Node


def check_json(inventory: Path, *args: str) -> tuple[int, dict[str, Any]]:
    done = run_cli(["check", str(inventory), "--format", "json", *args], timeout=400)
    assert done.stdout, done.stderr
    return done.status, json.loads(done.stdout)


# The bench stage runs the inventory's sweep: `clusterkit bench` reads the same settings.
SWEEP = {"minbytes": "256K", "maxbytes": "1M", "iters": 5, "warmup_iters": 1}


def test_healthy_cluster_passes_every_stage(cluster: NetCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(
        tmp_path / "inv.yaml", nodes=cluster.nodes[:3], clusterkit={"bench": SWEEP}
    )
    status, report = check_json(inventory)
    bad = [f for f in report["findings"] if f["status"] in ("fail", "error")]
    assert status == 0, bad
    assert report["stages"]["network"] == "ran" and report["stages"]["bench"] == "ran"
    ids = {f["id"] for f in report["findings"] if f["status"] == "ok"}
    assert {"net.mesh", "net.rendezvous", "bench.busbw", "bench.correctness"} <= ids
    result = report["details"]["bench"]["result"]
    assert len({device["host"] for device in result["devices"]}) == 3  # one rank per node
    assert [row["size"] for row in result["results"]] == [256 * 1024, 512 * 1024, 1024 * 1024]
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
    # one dead host is one error, and the mesh counts only the nodes that took part
    errors = [f for f in report["findings"] if f["status"] == "error"]
    assert [(f["id"], f["hosts"]) for f in errors] == [("host.reachable", ["node2"])]
    assert report["counts"]["error"] == 1
    mesh = next(f for f in report["findings"] if f["id"] == "net.mesh")
    assert mesh["status"] == "ok" and "all 2 tested node pairs" in mesh["message"]
    assert "node2" not in mesh["hosts"]


def test_ctrl_c_in_the_mesh_leaves_nothing_running_or_listening(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """The master drops its rendezvous ports, so every node's connects there hang for the
    20 s connect timeout: an interrupt then lands mid-mesh, with listeners up everywhere."""
    master = cluster.nodes[0]
    master.iptables("-A", "INPUT", "-p", "tcp", "--dport", "29400:29500", "-j", "DROP")
    inventory = cluster.inventory(
        tmp_path / "inv.yaml",
        nodes=cluster.nodes[:3],
        clusterkit={"network": {"connect_timeout": 20}},
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "clusterkit", "check", str(inventory), "--skip", "bench,image"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    give_up = time.monotonic() + 60
    while time.monotonic() < give_up and 29500 not in listening(master):
        time.sleep(0.05)
    assert 29500 in listening(master), "the mesh never started"
    give_up = time.monotonic() + 20
    while time.monotonic() < give_up and not hanging_connects(cluster.nodes[:3], master):
        time.sleep(0.05)
    assert hanging_connects(cluster.nodes[:3], master), "no connect to the master is hanging"
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=30)
    assert process.returncode == 130, stderr
    give_up = time.monotonic() + 10  # sshd reaps its session children asynchronously
    while any(node.processes() for node in cluster.nodes[:3]) and time.monotonic() < give_up:
        time.sleep(0.1)
    for node in cluster.nodes[:3]:
        assert node.processes() == [], node.name
        assert listening(node) <= {22}, node.name


def hanging_connects(nodes: list[Node], to: Node) -> list[str]:
    """Connects from `nodes` to `to` that got no answer (SYN sent, none back)."""
    argv = ["ss", "-Htn", "state", "syn-sent", "dst", to.address]
    return [line for node in nodes for line in node.exec(argv, check=True).stdout.splitlines()]


def listening(node: Node) -> set[int]:
    output = node.exec(["ss", "-Hltn"], check=True).stdout
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in output.splitlines() if line}
