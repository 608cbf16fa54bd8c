"""The covering mesh's retest round on 12 real nodes in two subnets: the setting lowers
`auto`'s threshold so the covering set runs at a size that builds in seconds."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_network_scale import check, failing_cells, finding
from tests.cluster.test_network_stage import run_late_go
from tests.support.netcluster import NetCluster, unavailable_reason

pytestmark = pytest.mark.cluster

NODES = 12
COVERING = {"network": {"full_mesh_up_to": 4, "connect_timeout": 2}}


@pytest.fixture(scope="module")
def small() -> Iterator[NetCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no test cluster here: {reason}")
    with NetCluster(NODES, subnets=2) as cluster:
        yield cluster


def test_a_firewalled_node_is_retested_against_every_node(
    small: NetCluster, tmp_path: Path
) -> None:
    small.reset()
    # Stateless: refuses connects to node9 and drops the answers to node9's own connects.
    small["node9"].iptables("-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "REJECT")
    inventory = small.inventory(tmp_path / "inventory.yaml", clusterkit=COVERING)
    status, report = check(inventory, "--skip", "bench,image")

    assert status == 1 and report["verdict"] == "fail"
    network = report["details"]["network"]
    mesh = network["mesh"]
    assert (mesh["mode"], mesh["covering"], mesh["full_mesh_up_to"]) == ("auto", True, 4)
    first, second = mesh["rounds"]
    assert first["pairs"] < NODES * (NODES - 1) and "node9" in first["retest_next"]
    assert second["nodes"] == NODES and second["retest_next"] == []
    others = [node.name for node in small if node.name != "node9"]
    expected = {(name, "node9") for name in others} | {("node9", name) for name in others}
    assert failing_cells(network) == expected  # every pair with node9, both ways, no other
    assert {network["matrix"][name]["node9"] for name in others} == {"refused"}
    mesh_finding = finding(report, "net.mesh")
    assert mesh_finding["status"] == "fail"
    assert f"node9 fails all {2 * len(others)} tested pairs with it" in mesh_finding["message"]
    firewall = finding(report, "net.firewall")
    assert firewall["hosts"] == ["node9"]
    assert "-A INPUT -p tcp -m tcp --dport 1024:65535 -j REJECT" in firewall["message"]
    assert finding(report, "net.subnet-cut")["status"] == "ok"


def test_mesh_full_on_the_command_line_tests_every_pair(small: NetCluster, tmp_path: Path) -> None:
    small.reset()
    inventory = small.inventory(tmp_path / "inventory.yaml", clusterkit=COVERING)
    status, report = check(inventory, "--skip", "bench,image", "--mesh", "full")

    assert status == 0, [f for f in report["findings"] if f["status"] in ("fail", "error")]
    mesh = report["details"]["network"]["mesh"]
    assert (mesh["mode"], mesh["covering"]) == ("full", False)
    assert mesh["pairs_tested"] == mesh["pairs_total"] == NODES * (NODES - 1)
    assert len(mesh["rounds"]) == 1
    assert report["details"]["network"]["matrix_lines"][0] == (
        f"TCP mesh: {NODES * (NODES - 1)} of {NODES * (NODES - 1)} node pairs tested, "
        f"{NODES * (NODES - 1)} connect"
    )


def test_a_node_handed_go_late_in_the_retest_round_reaches_every_listener(
    small: NetCluster, tmp_path: Path
) -> None:
    """Each round's listeners close only once every node has reported that round's connects:
    node9, retested against everyone, gets its second "go" 4 s after all the others finished
    theirs, and its own connects still all succeed."""
    small.reset()
    victim = small["node9"]  # refuses connects to it; its own connects and their replies pass
    victim.iptables("-A", "INPUT", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED",
                    "-j", "ACCEPT")  # fmt: skip
    victim.iptables("-A", "INPUT", "-p", "tcp", "--dport", "1024:65535", "-j", "REJECT")
    late = {"late": "node9", "delay": 4.0, "round_number": 2}
    held, _by_id, raw = run_late_go(small, tmp_path, late, mesh="auto", **COVERING)

    first, second = raw["mesh"]["rounds"]
    assert "node9" in first["retest_next"] and second["nodes"] == NODES
    assert (held.held_for or 0) >= 4.0 and second["go_spread"] >= 4.0
    others = [node.name for node in small if node is not victim]
    assert failing_cells(raw) == {(name, "node9") for name in others}
    assert {raw["matrix"]["node9"][name] for name in others} == {"ok"}
    late_connects = [c for c in raw["connects"] if c["from"] == "node9" and c["round"] == 2]
    assert late_connects and {c["result"] for c in late_connects} == {"ok"}
