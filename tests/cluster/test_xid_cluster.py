"""Xid events in a node's kernel log, end to end: node-local dmesg/journalctl stand-ins print
the real formats (test nodes share the host's kernel), the probe reads them over SSH."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.test_check_spine import check, finding
from tests.support.netcluster import NetCluster

FALLEN = "NVRM: Xid (PCI:0000:{bus}:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus."  # noqa: E501
APP = "NVRM: Xid (PCI:0000:{bus}:00): 13, pid=2345, name=python3, Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"  # noqa: E501


def gpu_bus(cluster: NetCluster, node_index: int, gpu: int) -> tuple[str, str]:
    """(the kernel log's bus byte, nvidia-smi's pci.bus_id) of one stand-in GPU."""
    bus_id = cluster.nodes[node_index].gpu_state()["gpus"][gpu]["pci.bus_id"]
    return bus_id.split(":")[1].lower(), bus_id


def xid_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["id"] == "gpu.xid"]


def test_xid_79_on_one_node_fails_that_node_naming_the_gpu(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    bus, bus_id = gpu_bus(cluster, 1, 1)
    cluster.nodes[1].set_kernel_log([FALLEN.format(bus=bus)])
    status, report, _ = check(cluster_inventory)
    failing = [f for f in xid_findings(report) if f["status"] == "fail"]
    assert [f["hosts"] for f in failing] == [["node2"]], xid_findings(report)
    assert f"GPU 1 (0000:{bus}:00" in failing[0]["message"] and "Xid 79" in failing[0]["message"]
    assert "reboot" in failing[0]["remedy"] and status != 0
    assert bus_id.lower().endswith(f":{bus}:00.0")


def test_xid_13_warns_and_a_healthy_cluster_has_no_failing_xid(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    _, healthy, _ = check(cluster_inventory)
    assert [f["status"] for f in xid_findings(healthy)] == ["ok"]
    bus, _ = gpu_bus(cluster, 0, 0)
    cluster.nodes[0].set_kernel_log([APP.format(bus=bus)])
    _, report, _ = check(cluster_inventory)
    warned = finding(report, "gpu.xid", "warn")
    assert warned["hosts"] == ["node1"] and "Xid 13" in warned["message"]
    assert not [f for f in xid_findings(report) if f["status"] == "fail"]


def test_restricted_dmesg_falls_back_to_journalctl(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    bus, _ = gpu_bus(cluster, 2, 0)
    cluster.nodes[2].set_kernel_log([FALLEN.format(bus=bus)], dmesg_restricted=True)
    _, report, _ = check(cluster_inventory)
    failed = finding(report, "gpu.xid", "fail")
    assert failed["hosts"] == ["node3"]
    assert report["hosts"]["node3"]["facts"]["kernel_log"]["source"] == "journalctl"


MCE_FATAL = "mce: [Hardware Error]: CPU 0: Machine Check: 0 Bank 1: b000000000000000"
NULL_ARGV = (
    "process 'x' launched '/tmp/NVRM: Xid (PCI:0000:{bus}:00): 79, pid=0, GPU has fallen off "
    "the bus.' with NULL argv: empty string added"
)


def test_a_machine_check_fails_its_node_and_a_users_exec_path_fails_none(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    """The host's own fault comes from the same kernel-log read; text any user can put in the
    kernel log (the path of an exec with an empty argv) was read as an Xid 79 before."""
    bus, _ = gpu_bus(cluster, 0, 0)
    cluster.nodes[0].set_kernel_log([NULL_ARGV.format(bus=bus)])
    cluster.nodes[1].set_kernel_log([MCE_FATAL])
    status, report, _ = check(cluster_inventory)
    failed = finding(report, "host.mce", "fail")
    assert failed["hosts"] == ["node2"] and "b000000000000000" in failed["message"]
    assert not [f for f in xid_findings(report) if f["status"] != "ok"], xid_findings(report)
    assert report["hosts"]["node1"]["facts"]["kernel_log"]["events"] == []
    assert status == 1
