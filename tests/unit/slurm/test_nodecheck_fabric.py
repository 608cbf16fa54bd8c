"""node-check judges its own node's fabric: NVLink links down or erroring and RDMA ports down,
with drain reasons built only from validated ids."""

from __future__ import annotations

from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.one_node import node_drain_notes, node_findings
from clusterkit.inventory.model import ClusterSettings
from clusterkit.slurm.drain import NodeState, decide
from tests.unit.bench.test_fabric import nvlink_section
from tests.unit.checks.test_checks import healthy
from tests.unit.checks.test_links import counters

NODE = "gpu07"


def port(hca: str, state: str = "ACTIVE", phys: str = "LinkUp", downed: int = 0) -> dict:
    """One HCA with port 1, as collect_infiniband reads it from sysfs."""
    return {
        "name": hca,
        "ports": [
            {"port": "1", "state": state, "phys_state": phys, "rate_gbps": 400.0,
             "rate": "400 Gb/sec (4X NDR)", "link_layer": "InfiniBand",
             "counters": {"link_downed": downed, "symbol_error": 0, "port_rcv_errors": 0,
                          "link_error_recovery": 0}},
        ],
    }  # fmt: skip


def lone_node(*hcas: dict) -> dict[str, dict[str, Any]]:
    """One healthy 8-GPU NVLink node with the given RDMA ports (all up by default)."""
    facts = healthy(1)["node1"]
    facts["nvlink"] = nvlink_section([18] * 8) | {"errors": counters()}
    facts["infiniband"] = {"devices": list(hcas) or [port(f"mlx5_{i}") for i in range(4)]}
    return {NODE: facts}


def judged(facts: dict[str, dict[str, Any]]) -> tuple[dict[str, list[Finding]], list[str]]:
    """node-check's findings by id, and the notes its drain reason would carry."""
    found = node_findings(facts, ClusterSettings(), None)
    by_id: dict[str, list[Finding]] = {}
    for finding in found:
        by_id.setdefault(finding.id, []).append(finding)
    return by_id, node_drain_notes(NODE, found, facts[NODE])


def drain_of(facts: dict[str, dict[str, Any]]) -> str:
    by_id, notes = judged(facts)
    failing = [i for i, fs in by_id.items() if any(f.status is Status.FAIL for f in fs)]
    action = decide(NodeState("IDLE", ""), failing, notes)
    return f"{action.kind}: {action.reason}"


def test_a_healthy_lone_node_passes_its_fabric_checks_with_no_note() -> None:
    by_id, notes = judged(lone_node())
    assert [f.status for f in by_id["fabric.nvlink-down"]] == [Status.OK]
    assert [f.status for f in by_id["gpu.nvlink-errors"]] == [Status.OK]
    assert [f.status for f in by_id["ib.port"]] == [Status.OK]
    assert not any(i.startswith("parity.") for i in by_id)
    assert notes == []


def test_an_nvlink_link_down_on_one_gpu_drains_naming_gpu_and_link() -> None:
    """The node's other GPUs have link 7 up: GPU 4's inactive link 7 is a fault, no peer
    node needed. Before, node-check never ran the NVLink checks and passed the node."""
    facts = lone_node()
    facts[NODE]["nvlink"]["gpus"][4]["links"][7] = None
    facts[NODE]["nvlink"]["active_links"][4] = 17
    by_id, notes = judged(facts)
    (down,) = by_id["fabric.nvlink-down"]
    assert (down.status, down.hosts) == (Status.FAIL, [NODE])
    assert "GPU 4: 17 of 18 active, links 7 inactive" in down.message
    assert notes == ["GPU 4 NVLink 7 down needs reset"]
    assert drain_of(facts) == (
        "drain: clusterkit: fabric.nvlink-down; GPU 4 NVLink 7 down needs reset"
    )


def test_every_link_down_on_a_lone_node_is_not_judged_without_peers() -> None:
    """A GPU pair bridged with some links, or a node whose fabric manager is down: alone,
    nothing says which links should be up (`check` compares the nodes)."""
    facts = lone_node()
    facts[NODE]["nvlink"] = nvlink_section([0] * 8)
    by_id, notes = judged(facts)
    assert [f.status for f in by_id["fabric.nvlink-down"]] == [Status.SKIP]
    assert notes == []


def test_many_crc_errors_drain_and_a_few_replays_only_warn() -> None:
    facts = lone_node()
    facts[NODE]["nvlink"]["errors"] = counters(g2_l17_crc=101, g5_l3_replay=4)
    by_id, notes = judged(facts)
    assert {f.status for f in by_id["gpu.nvlink-errors"]} == {Status.FAIL, Status.WARN}
    assert notes == ["GPU 2 NVLink 17 CRC errors needs reset"]
    assert drain_of(facts).startswith("drain: clusterkit: gpu.nvlink-errors; GPU 2 NVLink 17")


def test_an_ib_port_that_went_down_drains_and_an_uncabled_spare_only_warns() -> None:
    """Alone, a port never up since the driver loaded may be an unused second port (every
    node would drain at once); one whose link dropped (link_downed) or that trained without
    a subnet manager (LinkUp, INIT) is a fault."""
    facts = lone_node(
        port("mlx5_0"),
        port("mlx5_1", "DOWN", "Polling", downed=1),
        port("mlx5_2", "INIT", "LinkUp"),
        port("mlx5_3", "DOWN", "Polling"),
        port("mlx5_4", "DOWN", "Disabled"),
    )
    by_id, notes = judged(facts)
    status = {f.status: f for f in by_id["ib.port"]}
    assert set(status[Status.FAIL].found[NODE].split("; ")) == {
        "mlx5_1 port 1 DOWN/Polling", "mlx5_2 port 1 INIT/LinkUp"
    }  # fmt: skip
    assert status[Status.WARN].found[NODE].startswith("mlx5_3 port 1 DOWN/Polling (never up")
    assert "mlx5_4" not in str([f.found for f in by_id["ib.port"]])
    assert notes == [
        "IB mlx5_1 port 1 down needs link check",
        "IB mlx5_2 port 1 down needs link check",
    ]


def test_an_uncabled_spare_alone_does_not_drain() -> None:
    facts = lone_node(port("mlx5_0"), port("mlx5_1", "DOWN", "Polling"))
    assert drain_of(facts) == "keep: passes"


def test_node_text_never_reaches_the_drain_reason() -> None:
    """Names and keys from the node's facts (sysfs folder names, nvidia-smi's GPU and link
    numbers) that are not plain ids become `?`."""
    facts = lone_node(port("mlx5_0; scontrol update", "DOWN", "Polling", downed=2))
    facts[NODE]["nvlink"]["errors"] = {"1 Reason=x": {"17]": {"crc": 500}}}
    _, notes = judged(facts)
    assert notes == ["GPU ? NVLink ? CRC errors needs reset", "IB ? port 1 down needs link check"]
