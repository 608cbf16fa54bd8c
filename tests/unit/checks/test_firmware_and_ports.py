"""GPU firmware parity (VBIOS, InfoROM) and the inventory's expected RDMA ports: what nodes
report, judged against each other and against `clusterkit.expect`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from clusterkit.checks import static_findings
from clusterkit.checks.links import ib_expect_findings
from clusterkit.checks.model import Status
from clusterkit.checks.parity import firmware_parity_findings
from clusterkit.inventory.model import Expectations
from tests.unit.checks.test_checks import healthy
from tests.unit.checks.test_gpu_health_recordings import facts as recorded_facts
from tests.unit.inventory.test_inventory_settings import error, load


def with_firmware(vbios: str, inforom: str = "G520.0200.00.05") -> dict[str, Any]:
    """The recorded H100 (a-560.35.03-h100.txt) with its firmware versions as given."""
    node = recorded_facts(n=("a-560.35.03-h100.txt", 0))["n"]
    for gpu in node["gpus"]["devices"]:
        gpu.update({"vbios_version": vbios, "inforom.img": inforom})
    return node


def test_the_recorded_firmware_is_one_value_per_node_and_the_same_passes() -> None:
    hosts = {f"n{i}": with_firmware("96.00.A5.00.01") for i in range(3)}
    found = {f.id: f for f in firmware_parity_findings(hosts)}
    assert found["parity.vbios"].status is Status.OK
    assert found["parity.vbios"].expected == "96.00.A5.00.01"
    assert found["parity.inforom"].expected == "G520.0200.00.05"


def test_an_odd_vbios_or_inforom_warns_naming_the_node() -> None:
    hosts = {
        "n1": with_firmware("96.00.A5.00.01"),
        "n2": with_firmware("96.00.A5.00.01"),
        "n3": with_firmware("96.00.74.00.0C", "G520.0200.00.04"),
    }
    found = {f.id: f for f in firmware_parity_findings(hosts)}
    for check_id in ("parity.vbios", "parity.inforom"):
        assert (found[check_id].status, found[check_id].hosts) == (Status.WARN, ["n3"])
    assert "n3 has 96.00.74.00.0C" in found["parity.vbios"].message
    assert "flash" in (found["parity.vbios"].remedy or "")


def test_gpus_of_one_node_that_differ_show_both() -> None:
    node = with_firmware("96.00.A5.00.01")
    node["gpus"]["devices"].append(
        {**node["gpus"]["devices"][0], "vbios_version": "96.00.74.00.0C"}
    )
    found = {f.id: f for f in firmware_parity_findings({"n1": node, "n2": with_firmware("x")})}
    assert "96.00.74.00.0C, 96.00.A5.00.01" in found["parity.vbios"].message


def test_nodes_without_firmware_versions_give_no_finding() -> None:
    assert firmware_parity_findings(healthy(2)) == []


# -- expect.infiniband -------------------------------------------------------------------------


def port(hca: str, state: str = "ACTIVE", rate: float = 400.0, phys: str = "LinkUp") -> dict:
    """One port as the probe reads /sys/class/infiniband/HCA/ports/1 (state `4: ACTIVE`,
    rate `400 Gb/sec (4X NDR)`)."""
    return {"name": hca, "ports": [{"port": "1", "state": state, "phys_state": phys,
            "rate_gbps": rate, "rate": f"{rate:g} Gb/sec (4X NDR)", "counters": {}}]}  # fmt: skip


def ib(*devices: dict) -> dict[str, Any]:
    return {"infiniband": {"devices": list(devices)}}


def test_ports_short_of_the_inventory_fail_naming_each_port() -> None:
    hosts = {
        "ok": ib(port("mlx5_0"), port("mlx5_1")),
        "down": ib(port("mlx5_0"), port("mlx5_1", "DOWN", 0, "Polling")),
        "slow": ib(port("mlx5_0"), port("mlx5_1", rate=200.0)),
        "none": ib(),
    }
    (finding,) = ib_expect_findings(hosts, Expectations(ib_ports=2, ib_rate_gbps=400))
    assert (finding.id, finding.status) == ("expect.infiniband", Status.FAIL)
    assert finding.hosts == ["down", "slow", "none"]
    assert finding.found["down"] == "1 of 2 RDMA ports up (mlx5_1 port 1 DOWN/Polling)"
    assert finding.found["slow"] == "mlx5_1 port 1 at 200 Gb/s (200 Gb/sec (4X NDR)) below 400 Gb/s"
    assert finding.found["none"] == "0 of 2 RDMA ports up"


def test_a_port_missing_on_every_node_is_still_held_to_the_inventory() -> None:
    """ib.port compares nodes: the same port down everywhere is 'unused' to it. The pin is
    not fooled, and one node alone (node-check) is judged the same."""
    hosts = {f"n{i}": ib(port("mlx5_0"), port("mlx5_1", "DOWN", 0, "Polling")) for i in range(3)}
    (finding,) = ib_expect_findings(hosts, Expectations(ib_ports=2))
    assert (finding.status, finding.hosts) == (Status.FAIL, ["n0", "n1", "n2"])
    (alone,) = ib_expect_findings({"n0": hosts["n0"]}, Expectations(ib_ports=2))
    assert alone.status is Status.FAIL
    static = {f.id: f for f in static_findings(hosts, Expectations(ib_ports=2))}
    assert static["expect.infiniband"].status is Status.FAIL


def test_met_or_unset_expectations() -> None:
    hosts = {"a": ib(port("mlx5_0"), port("mlx5_1", rate=800.0))}
    (finding,) = ib_expect_findings(hosts, Expectations(ib_ports=2, ib_rate_gbps=400))
    assert finding.status is Status.OK
    assert finding.message == (
        "every node meets clusterkit.expect: 2 RDMA ports up, each at 400 Gb/s or more"
    )
    (rate_only,) = ib_expect_findings(hosts, Expectations(ib_rate_gbps=800))
    assert rate_only.found == {
        "a": "mlx5_0 port 1 at 400 Gb/s (400 Gb/sec (4X NDR)) below 800 Gb/s"
    }
    assert ib_expect_findings(hosts, Expectations()) == []
    failed = {"a": {"infiniband": {"error": "timeout"}}}
    (skipped,) = ib_expect_findings(failed, Expectations(ib_ports=1))
    assert skipped.status is Status.SKIP


def test_the_settings_are_read_and_checked(tmp_path: Path) -> None:
    inventory = load(
        tmp_path,
        """
        all:
          hosts: {n1: {}}
          vars:
            clusterkit:
              expect: {ib_ports: 8, ib_rate_gbps: 400}
        """,
    )
    assert (inventory.settings.expect.ib_ports, inventory.settings.expect.ib_rate_gbps) == (8, 400)
    message = error(
        tmp_path,
        """
        all:
          hosts: {n1: {}}
          vars:
            clusterkit:
              expect: {ib_ports: lots}
        """,
    )
    assert "expect.ib_ports" in message and "0..64" in message
