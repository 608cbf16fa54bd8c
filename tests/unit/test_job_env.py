"""The job's own variables on the nodes against the settings that were checked (recorded facts)."""

from __future__ import annotations

from clusterkit.checks.job_env import expected_world_size, job_env_findings
from clusterkit.checks.model import Status
from clusterkit.inventory.model import ClusterSettings, Expectations, Host, Inventory
from tests.unit.test_checks import facts, healthy


def inventory(n: int = 2, **settings) -> Inventory:
    hosts = tuple(Host(f"node{i}", f"10.213.3.{10 + i}") for i in range(1, n + 1))
    return Inventory("inv.yaml", hosts, ClusterSettings(**settings))


def by_id(hosts, inv) -> dict:
    return {f.id: f for f in job_env_findings(hosts, inv)}


def test_clean_environment_is_ok() -> None:
    found = by_id(healthy(2), inventory())
    assert found["env.job-vars"].status is Status.OK
    assert found["env.socket-ifname"].status is Status.OK  # eth0 is the only candidate


def test_contradicting_job_variables_fail_naming_each() -> None:
    hosts = healthy(2)
    hosts["node2"]["env"].update(
        MASTER_ADDR="10.9.9.9", MASTER_PORT="1234", WORLD_SIZE="3", RANK="1"
    )
    finding = by_id(hosts, inventory(master="node1"))["env.job-vars"]
    assert (finding.status, finding.hosts) == (Status.FAIL, ["node2"])
    for part in ("MASTER_ADDR=10.9.9.9", "MASTER_PORT=1234 (checked: 29500)",
                 "WORLD_SIZE=3 (checked: 16)", "RANK=1"):  # fmt: skip
        assert part in finding.message


def test_matching_job_variables_pass() -> None:
    hosts = healthy(2)
    for f in hosts.values():
        f["env"].update(MASTER_ADDR="10.213.3.11", MASTER_PORT="29500", WORLD_SIZE="16")
    assert by_id(hosts, inventory(master="node1"))["env.job-vars"].status is Status.OK


def test_world_size_follows_the_ranks_the_job_starts() -> None:
    assert expected_world_size(healthy(2), inventory()) == 16
    assert expected_world_size(healthy(2), inventory(expect=Expectations(gpus_per_node=4))) == 8
    cpu = {"node1": facts("probe-local-cpu"), "node2": facts("probe-local-cpu")}
    assert expected_world_size(cpu, inventory()) == 2


def test_interface_variable_against_the_setting() -> None:
    hosts = healthy(2)
    hosts["node1"]["env"]["NCCL_SOCKET_IFNAME"] = "ib0"
    finding = by_id(hosts, inventory(interface="eth0"))["env.job-vars"]
    assert "NCCL_SOCKET_IFNAME=ib0 (checked: eth0)" in finding.message


def test_several_candidate_interfaces_warn_naming_the_one_to_set() -> None:
    hosts = healthy(2)
    hosts["node2"]["network"]["interfaces"]["ens7"] = {
        "addresses": ["192.168.50.4/24"], "flags": ["BROADCAST", "UP", "LOWER_UP"],
        "mtu": 1500, "state": "up",
    }  # fmt: skip
    hosts["node2"]["network"]["interfaces"]["docker0"] = {
        "addresses": ["172.17.0.1/16"], "flags": ["UP"], "mtu": 1500, "state": "up",
    }  # fmt: skip
    inv = inventory()
    inv = Inventory(inv.path, (Host("node1", "10.213.3.11"), Host("node2", "10.213.3.11")),
                    inv.settings)  # fmt: skip
    finding = by_id(hosts, inv)["env.socket-ifname"]
    assert (finding.status, finding.hosts) == (Status.WARN, ["node2"])
    assert "ens7, eth0 could carry" in finding.message  # docker0 is not a candidate
    assert "NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0" in finding.message
    hosts["node2"]["env"]["NCCL_SOCKET_IFNAME"] = "eth0"
    assert by_id(hosts, inv)["env.socket-ifname"].status is Status.OK
    assert by_id(hosts, inventory(interface="eth0"))["env.socket-ifname"].status is Status.SKIP


def test_no_facts_is_skipped() -> None:
    assert {f.status for f in job_env_findings({}, inventory())} == {Status.SKIP}
