"""The mesh plan (pure): listeners first, then "go" with the ports the nodes actually bound,
so checks run at once on the same nodes never plan the same mesh port; a port held by
another process is no target and is reported as in use."""

from __future__ import annotations

from clusterkit.checks.model import Status
from clusterkit.net import analysis
from clusterkit.net.ifname import InterfaceChoice
from clusterkit.net.plan import NetworkOptions, go_messages, listen_plans
from tests.support.net_reports import facts_report, listener

OPTIONS = NetworkOptions("node1", "node1", 29500, 29400, None, extra_ports=(29611,))
HOSTS = ["node1", "node2", "node3"]
CHOICES = {
    host: InterfaceChoice("eth0", "default", None, f"10.0.0.{11 + i}", 24, 1500, True)
    for i, host in enumerate(HOSTS)
}
FACTS = {host: facts_report(master=["10.0.0.11"]) for host in HOSTS}
SSH = {host: host for host in HOSTS}


def test_the_mesh_port_is_left_to_the_kernel_and_the_users_ports_stay_fixed() -> None:
    plans = listen_plans(HOSTS, CHOICES, OPTIONS)
    assert plans["node2"]["listen"] == [
        {"port": 0, "role": "mesh"},
        {"port": 29611, "role": "extra"},
    ]
    assert [item["port"] for item in plans["node1"]["listen"]] == [0, 29611, 29500, 29400]
    assert "targets" not in plans["node1"]  # where to connect comes with "go"
    later = listen_plans(HOSTS, CHOICES, OPTIONS, round_number=2)
    assert [item["port"] for item in later["node1"]["listen"]] == [0, 29611]


def test_go_names_the_ports_each_peer_bound_and_skips_one_held_by_another_process() -> None:
    bound = {
        "node1": [listener(41001, "mesh"), listener(29611, "extra"), listener(29500, "master_port"),
                  listener(29400, "rdzv_port", "in_use")],
        "node2": [listener(41002, "mesh"), listener(29611, "extra", "in_use")],
        "node3": [listener(41003, "mesh"), listener(29611, "extra")],
    }  # fmt: skip
    go = go_messages(bound, FACTS, CHOICES, SSH, OPTIONS)
    targets = {(t["peer"], t["port"], t["role"]) for t in go["node3"]["targets"]}
    assert targets == {
        ("node1", 41001, "mesh"), ("node1", 29611, "extra"), ("node2", 41002, "mesh"),
        ("node1", 29500, "master_port"),
    }  # fmt: skip
    assert all(t["port"] != 0 for message in go.values() for t in message["targets"])
    bound["node2"] = [listener(0, "mesh"), listener(70000, "extra")]  # a node's say-so
    hostile = go_messages(bound, FACTS, CHOICES, SSH, OPTIONS)
    assert {t["peer"] for t in hostile["node3"]["targets"]} == {"node1"}
    only_pair = go_messages(bound, FACTS, CHOICES, SSH, OPTIONS, pairs={("node2", "node3")})
    assert {(t["peer"], t["port"]) for t in only_pair["node2"]["targets"]} == {
        ("node3", 41003), ("node3", 29611), ("node1", 29500)
    }  # fmt: skip
    assert {t["peer"] for t in only_pair["node3"]["targets"]} == {"node1"}  # rendezvous only


def test_a_port_in_use_is_named_as_such_never_as_a_firewall() -> None:
    holder = {"pid": 4242, "command": "python3 job.py"}
    unbound = {
        "node2": [listener(29611, "extra", "in_use", error="Address in use", holder=holder)],
        "node3": [listener(0, "mesh", "error", error="Address already in use")],
    }
    (found,) = analysis.port_findings(unbound)
    assert (found.id, found.status, found.hosts) == ("net.port-in-use", Status.FAIL,
                                                    ["node2", "node3"])  # fmt: skip
    assert "port 29611 on node2 is in use by another process (pid 4242: python3 job.py)" in (
        found.message
    )
    assert "node3 could not listen on any free port" in found.message
    assert found.remedy is not None and "iptables" not in found.remedy
    assert analysis.port_findings({}) == []
