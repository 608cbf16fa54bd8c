"""The host's own faults and the GPU thresholds, end to end through the real probe over SSH:
an `nvme` stand-in on one node's PATH prints `nvme list -o json` and `nvme smart-log -o json`
as nvme-cli 2.x does (tests/support/fake_nvme.py), the nvidia-smi stand-in the temperature
margin and firmware versions as drivers print them."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.test_check_spine import check, finding
from tests.support.netcluster import NetCluster


def test_a_media_error_on_one_node_fails_that_node_only(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    node2, node3 = cluster.nodes[1], cluster.nodes[2]
    node2.set_nvme([{"name": "nvme0"}, {"name": "nvme1", "smart": {"media_errors": 3}}])
    node3.set_nvme([{"name": "nvme0"}, {"name": "nvme1"}])
    status, report, _ = check(cluster_inventory)
    assert status == 1
    nvme = finding(report, "host.nvme", "fail")
    assert nvme["hosts"] == ["node2"]
    assert "nvme1 (SAMSUNG MZQL23T8HCLS-00A07, serial S64HNE0R000001): 3 media" in nvme["message"]
    assert "replace the drive" in nvme["remedy"]
    facts3 = report["hosts"]["node3"]["facts"]["nvme"]
    assert [d["media_errors"] for d in facts3["devices"]] == [0, 0]
    assert report["hosts"]["node1"]["facts"]["nvme"]["reason"] == "nvme not found"


def test_a_hot_gpu_and_an_odd_vbios_are_named_on_their_nodes(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    node3, node4 = cluster.nodes[2], cluster.nodes[3]
    node3.set_gpus(overrides={2: {"temperature.gpu": 88, "temperature.gpu.tlimit": -1}})
    node4.set_gpus(overrides={i: {"vbios_version": "96.00.74.00.0C"} for i in range(8)})
    status, report, _ = check(cluster_inventory)
    assert status == 1
    hot = finding(report, "gpu.temperature", "fail")
    assert hot["hosts"] == ["node3"] and "GPU 2 " in hot["message"]
    assert "GPU at 88 C, 1 C past its maximum operating temperature" in hot["message"]
    vbios = finding(report, "parity.vbios", "warn")
    assert vbios["hosts"] == ["node4"] and "node4 has 96.00.74.00.0C" in vbios["message"]
    assert finding(report, "parity.inforom", "ok")["expected"] == "G520.0200.00.05"
    assert finding(report, "gpu.sram-ecc", "ok")
