"""The job's own variables on the nodes against the settings that were checked (recorded facts)."""

from __future__ import annotations

from clusterkit.checks.job_env import expected_world_size, job_env_findings
from clusterkit.checks.model import Status
from clusterkit.inventory.model import ClusterSettings, Expectations, Host, Inventory
from tests.unit.checks.test_checks import facts, healthy


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


def nic(address: str | None, kind: str | None, state: str = "up") -> dict:
    """One interface as the probe records it (collector.collect_network)."""
    return {
        "addresses": [address] if address else [], "flags": ["BROADCAST", "UP", "LOWER_UP"],
        "mtu": 1500, "state": state, "kind": kind,
    }  # fmt: skip


def crowded_node(hosts: dict, host: str, eth0: str) -> None:
    """A GPU node as found: its NIC and IPoIB next to a libvirt-style bridge named br0, the
    docker bridge, a container's veth, and a test cluster's bridge whose name sorts first."""
    hosts[host]["network"] = {
        "interfaces": {
            "lo": {**nic("127.0.0.1/8", "loopback", "unknown"), "flags": ["LOOPBACK", "UP"]},
            "eth0": nic(eth0, "device"),
            "ib0": nic("192.168.100." + eth0.split(".")[3].split("/")[0] + "/24", "device"),
            "br0": nic("192.168.122.1/24", "bridge"),
            "ck2344abr": nic("10.213.9.1/24", "bridge"),
            "docker0": nic("172.17.0.1/16", "bridge"),
            "veth3f2a": nic("169.254.7.1/16", "virtual"),
        },
        "routes": [
            {"dst": "default", "dev": "eth0"},
            {"dst": "10.213.3.0/24", "dev": "eth0"},
            {"dst": "192.168.100.0/24", "dev": "ib0"},
            {"dst": "192.168.122.0/24", "dev": "br0"},
            {"dst": "10.213.9.0/24", "dev": "ck2344abr"},
        ],
    }


def test_bridges_veths_and_tunnels_are_no_candidates_whatever_their_names() -> None:
    """A bridge named ck2344abr (no virbr/br- prefix) was recommended, sorting first."""
    hosts = healthy(2)
    for host, address in (("node1", "10.213.3.11/24"), ("node2", "10.213.3.12/24")):
        crowded_node(hosts, host, address)
    hosts["node2"]["network"]["interfaces"]["tun0"] = nic("10.8.0.2/24", "tun")
    finding = by_id(hosts, inventory())["env.socket-ifname"]
    assert (finding.status, finding.hosts) == (Status.WARN, ["node1", "node2"])
    assert "node2: eth0, ib0 could carry" in finding.message
    assert "NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0" in finding.message
    for virtual in ("br0", "ck2344abr", "docker0", "veth3f2a", "tun0"):
        assert virtual not in finding.message


def test_the_interface_routing_to_the_master_is_named_for_host_names() -> None:
    """Inventory addresses that are names, not IPs: the node's route to the master's own
    address decides, not the alphabetically first candidate (ens1 here)."""
    hosts = healthy(2)
    for host, address in (("node1", "10.213.3.11/24"), ("node2", "10.213.3.12/24")):
        crowded_node(hosts, host, address)
        hosts[host]["network"]["interfaces"]["ens1"] = nic("10.50.0.7/24", "device")
    named = Inventory(
        "inv.yaml", (Host("node1", "gpu1.example"), Host("node2", "gpu2.example")),
        ClusterSettings(),
    )  # fmt: skip
    finding = by_id(hosts, named)["env.socket-ifname"]
    assert "node2: ens1, eth0, ib0 could carry" in finding.message
    assert "set NCCL_SOCKET_IFNAME=eth0 GLOO_SOCKET_IFNAME=eth0" in finding.message
    hosts["node2"]["network"]["routes"].insert(0, {"dst": "10.213.3.11", "dev": "ib0"})
    finding = by_id(hosts, named)["env.socket-ifname"]
    assert "node2: ens1, eth0, ib0 could carry the collectives; set NCCL_SOCKET_IFNAME=ib0" in (
        finding.message
    )  # a host route wins over the subnet's


def test_a_bridge_that_carries_the_route_to_the_master_is_the_one() -> None:
    """A host whose NIC is enslaved to br0 (the address lives on the bridge): br0 it is."""
    hosts = healthy(2)
    crowded_node(hosts, "node2", "10.213.3.12/24")
    interfaces = hosts["node2"]["network"]["interfaces"]
    interfaces["br0"] = interfaces.pop("eth0")
    interfaces["br0"]["kind"] = "bridge"
    interfaces["eth0"] = nic(None, "device")
    hosts["node2"]["network"]["routes"] = [
        {"dst": "default", "dev": "br0"}, {"dst": "10.213.3.0/24", "dev": "br0"},
    ]  # fmt: skip
    finding = by_id(hosts, inventory())["env.socket-ifname"]
    assert (finding.status, finding.hosts) == (Status.WARN, ["node2"])
    assert "node2: br0, ib0 could carry the collectives; set NCCL_SOCKET_IFNAME=br0" in (
        finding.message
    )


def test_a_veth_is_the_interface_where_it_is_the_only_one() -> None:
    """A container's (or the test cluster's) eth0 is a veth: with nothing better it is the
    node's interface; next to the NIC that reaches the master it is not a second candidate,
    though it is where it carries the master's route."""
    hosts = healthy(2)
    for f in hosts.values():
        f["network"]["interfaces"]["eth0"]["kind"] = "virtual"
    assert by_id(hosts, inventory())["env.socket-ifname"].status is Status.OK
    interfaces = hosts["node2"]["network"]["interfaces"]
    interfaces["ens5"] = nic("10.213.3.12/24", "device")
    interfaces["eth0"]["addresses"] = ["172.18.0.2/16"]
    assert by_id(hosts, inventory())["env.socket-ifname"].status is Status.OK
    interfaces["ens5"]["addresses"] = ["10.7.0.4/16"]
    interfaces["eth0"]["addresses"] = ["10.213.3.12/24"]
    finding = by_id(hosts, inventory())["env.socket-ifname"]
    assert "node2: ens5, eth0 could carry the collectives; set NCCL_SOCKET_IFNAME=eth0" in (
        finding.message
    )
