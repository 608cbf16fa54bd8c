"""GPU hardware faults on one node each, end to end through the real probe over SSH: the
stand-in nvidia-smi answers the health fields as drivers print them."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.test_check_spine import check, finding
from tests.support.netcluster import NetCluster

HEALTH_IDS = ("gpu.row-remap", "gpu.retired-pages", "gpu.pcie-width", "gpu.clock-reasons")


def test_a_healthy_idle_cluster_has_no_gpu_health_finding(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    """Idle GPUs: PCIe gen 1 of 5, clock reason 0x1, retired pages [N/A]: all normal."""
    _, report, _ = check(cluster_inventory)
    health = [f for f in report["findings"] if f["id"] in HEALTH_IDS]
    assert sorted(f["id"] for f in health) == sorted(HEALTH_IDS)
    assert {f["status"] for f in health} == {"ok"}
    device = report["hosts"]["node1"]["facts"]["gpus"]["devices"][0]
    assert device["pcie.link.gen.current"] == "1" and device["remapped_rows.pending"] == "No"


def test_each_gpu_fault_is_named_on_its_node_only(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    node2, node3, node4 = cluster.nodes[1], cluster.nodes[2], cluster.nodes[3]
    node2.set_gpus(overrides={3: {"remapped_rows.pending": "Yes",
                                  "remapped_rows.uncorrectable": 1}})  # fmt: skip
    node3.set_gpus(overrides={5: {"pcie.link.width.current": 8}})
    # an older driver: knows only clocks_throttle_reasons.active, and no remap fields
    # ... and all 8 GPUs in HW thermal slowdown at 88 C: one line, the GPUs folded
    hot = {"clocks_event_reasons.active": "0x0000000000000048", "temperature.gpu": 88}
    node4.set_gpus(
        driver="525.147.05",
        overrides={index: hot for index in range(8)},
        unknown_fields=["clocks_event_reasons.active", "remapped_rows.failure"],
    )
    status, report, _ = check(cluster_inventory)
    assert status == 1
    remap = finding(report, "gpu.row-remap", "fail")
    assert remap["hosts"] == ["node2"]
    bus = node2.gpu_state()["gpus"][3]["pci.bus_id"]
    assert f"GPU 3 ({bus}, serial " in remap["message"] and "row remap pending" in remap["message"]
    assert "nvidia-smi -r -i 3" in remap["remedy"]
    width = finding(report, "gpu.pcie-width", "warn")
    assert width["hosts"] == ["node3"] and "GPU 5 " in width["message"]
    assert "x8 of x16" in width["message"]
    clocks = finding(report, "gpu.clock-reasons", "fail")
    assert clocks["hosts"] == ["node4"]
    assert "node4: GPUs 0-7: clocks slowed: HW slowdown, HW thermal slowdown" in clocks["message"]
    assert "GPU 88 C" in clocks["message"] and "--per-node" in clocks["remedy"]
    gpus4 = report["hosts"]["node4"]["facts"]["gpus"]
    assert gpus4["count"] == 8 and gpus4["fields_unknown"] == ["remapped_rows.failure"]
