"""The network stage on 96 real nodes in two routed subnets (past the old pool of 64):
`--mesh auto` tests a covering set, passes a healthy cluster, and still finds and names a
node whose firewall drops the mesh and rendezvous ports, and a cut between the subnets.

One cluster for the module (building 96 nodes is the expensive part), reset between tests.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import Session
from clusterkit.net.steps import run_network_stage
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster, unavailable_reason

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NODES = 96
NODE_PYTHON = "/usr/bin/python3"
SETTINGS = {"network": {"connect_timeout": 2}}


@pytest.fixture(scope="module")
def big() -> Iterator[NetCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no test cluster here: {reason}")
    with NetCluster(NODES, subnets=2, start_timeout=60) as cluster:
        yield cluster


def subnet(cluster: NetCluster, index: int) -> str:
    return f"{cluster.subnets[index]}.0/24"


def run_stage(cluster: NetCluster, tmp_path: Path) -> tuple[dict[str, Finding], dict[str, Any]]:
    """The stage over real SSH with --mesh auto; findings by id."""
    path = cluster.inventory(
        tmp_path / "inventory.yaml", python_interpreter=NODE_PYTHON, clusterkit=SETTINGS
    )
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null", forks=NODES))
    assert not connections.failures
    try:
        session = Session(inventory, transports=connections.transports, workers=NODES)
        result = run_network_stage(session, Deadline.after(120), mesh="auto")
        findings, raw = result.findings, result.details
    finally:
        connections.close()
    by_id = {item.id: item for item in findings}
    assert len(by_id) == len(findings)  # each id once
    return by_id, raw


def check(inventory: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """The real CLI (in-process) with a JSON report."""
    done = run_cli(["check", str(inventory), "--format", "json", *args], timeout=300)
    assert done.stdout, f"no report; stderr: {done.stderr}"
    return done.status, json.loads(done.stdout)


def finding(report: dict[str, Any], check_id: str) -> dict[str, Any]:
    (match,) = [f for f in report["findings"] if f["id"] == check_id]
    return match


def failing_cells(raw: dict[str, Any]) -> set[tuple[str, str]]:
    return {
        (src, dst)
        for src, row in raw["matrix"].items()
        for dst, cell in row.items()
        if cell not in ("ok", "untested")
    }


def test_96_nodes_pass_a_healthy_check_with_a_covering_mesh(
    big: NetCluster, tmp_path: Path
) -> None:
    inventory = big.inventory(tmp_path / "inventory.yaml", clusterkit=SETTINGS)
    status, report = check(inventory, "--skip", "bench,image", "--mesh", "auto")
    assert status == 0, [f for f in report["findings"] if f["status"] in ("fail", "error")]
    network = report["details"]["network"]
    mesh = network["mesh"]
    assert mesh["covering"] and mesh["pairs_total"] == NODES * (NODES - 1)
    assert 4 * NODES < mesh["pairs_tested"] < mesh["pairs_total"] / 5
    (only_round,) = mesh["rounds"]
    assert only_round["nodes"] == NODES  # every node got "go" in the one barrier step
    assert mesh["cuts"] == [] and mesh["retested"] == []
    assert (
        f"of {NODES * (NODES - 1)} node pairs tested (covering set)" in (network["matrix_lines"][0])
    )
    assert report["stages"]["network"] == "ran"
    mesh_finding = finding(report, "net.mesh")
    assert mesh_finding["status"] == "ok"
    assert mesh_finding["hosts"] == [node.name for node in big]
    assert f"(of {NODES * (NODES - 1)} that exist: a covering set)" in mesh_finding["message"]
    assert finding(report, "net.subnet-cut")["status"] == "ok"
    assert finding(report, "net.rendezvous")["status"] == "ok"
    for row in network["matrix"].values():  # each node tested with peers of both subnets
        assert len(row) >= 5 and set(row.values()) == {"ok"}


def test_nodes_dropping_the_rendezvous_and_the_mesh_ports_are_named(
    big: NetCluster, tmp_path: Path
) -> None:
    """The master drops the rendezvous ports; node60 (other subnet, no neighbour of the
    master) drops every high port: found by the covering set, and node60's pairs named
    exactly by its retest against every node."""
    big.reset()
    big["node1"].iptables("-A", "INPUT", "-p", "tcp", "-m", "multiport", "--dports",
                          "29500,29400", "-j", "DROP")  # fmt: skip
    victim = big["node60"]
    victim.iptables("-A", "INPUT", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
                    "-j", "ACCEPT")  # fmt: skip
    victim.iptables("-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "DROP")
    by_id, raw = run_stage(big, tmp_path)

    rendezvous = by_id["net.rendezvous"]
    assert rendezvous.status is Status.FAIL
    assert {(item["from"], item["port"]) for item in rendezvous.found} == {
        (node.name, port) for node in big for port in (29500, 29400)
    }
    others = [node.name for node in big if node is not victim]
    assert failing_cells(raw) == {(name, "node60") for name in others}  # retested: exact
    mesh = by_id["net.mesh"]
    assert mesh.status is Status.FAIL
    assert "node60 fails all" not in mesh.message  # its own connects work
    assert mesh.message.startswith(f"{len(others)} of ")
    firewall = by_id["net.firewall"]
    assert firewall.hosts == ["node1", "node60"]
    assert "node1: INPUT rule -A INPUT -p tcp -m multiport --dports 29500,29400 -j DROP" in (
        firewall.message
    )
    assert "node60: INPUT rule -A INPUT -p tcp -m tcp --dport 1024:65535 -j DROP" in (
        firewall.message
    )
    assert by_id["net.subnet-cut"].status is Status.OK
    rounds = raw["mesh"]["rounds"]
    assert len(rounds) == 2 and "node60" in rounds[0]["retest_next"]
    assert raw["mesh"]["pairs_tested"] < raw["mesh"]["pairs_total"] / 3


def test_a_cut_between_the_two_subnets_is_one_finding(big: NetCluster, tmp_path: Path) -> None:
    big.reset()
    big.cut(0, 1)
    by_id, raw = run_stage(big, tmp_path)

    cut = by_id["net.subnet-cut"]
    assert cut.status is Status.FAIL
    assert [item["subnets"] for item in cut.found] == [sorted([subnet(big, 0), subnet(big, 1)])]
    assert f"{subnet(big, 0)} <-> {subnet(big, 1)}" in cut.message or (
        f"{subnet(big, 1)} <-> {subnet(big, 0)}" in cut.message
    )
    assert cut.found[0]["nodes"] == NODES and cut.found[0]["explained_by"] == []
    assert by_id["net.mesh"].status is Status.OK  # no pair fails but those across the cut
    assert "across cut subnets" in by_id["net.mesh"].message
    rendezvous = by_id["net.rendezvous"]
    assert rendezvous.status is Status.FAIL
    assert f"{len(big.segment(1))} nodes of {subnet(big, 1)}, cut off from node1's" in (
        rendezvous.message
    )
    assert "net.firewall" not in by_id
    assert raw["mesh"]["retested"] == []  # a cut is confirmed, not retested pair by pair
    assert len(raw["mesh"]["rounds"]) == 2
    across = {(a, b) for a in big.segment(0) for b in big.segment(1)}
    assert failing_cells(raw) <= {(a.name, b.name) for a, b in across} | {
        (b.name, a.name) for a, b in across
    }
    assert any(line.startswith("  cut: ") for line in raw["matrix_lines"])
    assert len(raw["matrix_lines"]) == 2
