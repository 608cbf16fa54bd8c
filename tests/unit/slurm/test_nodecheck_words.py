"""node-check speaks of the one node it judges, and its remedies fit where it runs: on the
node, with a settings file that is no inventory (issue 37, items 5 and 13)."""

from __future__ import annotations

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.one_node import node_findings, one_node
from clusterkit.inventory.model import ClusterSettings
from tests.unit.checks.test_checks import healthy


def test_a_fix_names_this_node_and_no_settings_file_as_an_inventory() -> None:
    facts = {"gpu07": healthy(2, node2="env-bad")["node2"]}
    found = node_findings(facts, ClusterSettings(), "/etc/clusterkit/settings.yaml")
    fixed = [f for f in found if f.fix is not None and f.status is not Status.OK]
    assert {f.id for f in fixed} >= {"env.shm", "env.memlock"}, [f.id for f in found]
    for finding in fixed:
        remedy = finding.remedy or ""
        assert "settings.yaml" not in remedy, remedy
        assert remedy.startswith("where the cluster's inventory is: clusterkit provision INVENTORY")
        assert remedy.split(" --limit ", 1)[1].split(";")[0] == "gpu07", remedy


def test_messages_speak_of_one_node() -> None:
    said = one_node(
        [
            Finding("gpu.ecc", Status.SKIP, "not checked: no host has NVIDIA GPUs"),
            Finding("host.memory-free", Status.OK, "10% of memory available on every node"),
            Finding("fabric.nvlink-down", Status.SKIP, "not checked: no node reports NVLink"),
        ]
    )  # fmt: skip
    assert [f.message for f in said] == [
        "not checked: this node has no NVIDIA GPU",
        "10% of memory available on this node",
        "not checked: this node reports no NVLink",
    ]
