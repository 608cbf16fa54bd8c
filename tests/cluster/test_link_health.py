"""NVLink error counters and InfiniBand ports through the real probe on the test cluster."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.test_check_spine import check, finding
from tests.support.netcluster import NetCluster


def test_nvlink_errors_named_on_one_node_and_no_ib_finding(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    """node2's GPU 3 link 5 replays; node3 has NVLink and no errors; no node has RDMA ports."""
    links = [26.562] * 18
    cluster.nodes[1].set_gpus(nvlink=links, overrides={3: {"nvlink_errors": {"5": {"replay": 12}}}})
    cluster.nodes[2].set_gpus(nvlink=links)
    _, report, _ = check(cluster_inventory)
    errors = finding(report, "gpu.nvlink-errors", "warn")
    assert errors["hosts"] == ["node2"]
    assert "GPU 3 (" in errors["message"] and "link 5: 12 replay errors" in errors["message"]
    assert not [f for f in report["findings"] if f["id"] == "gpu.nvlink-errors"
                and f["status"] not in ("ok", "warn")]  # fmt: skip
    assert finding(report, "fabric.nvlink-down")["status"] == "ok"
    assert [f["status"] for f in report["findings"] if f["id"] == "ib.port"] == []
    facts = report["hosts"]["node1"]["facts"]["nvlink"]
    assert "errors" not in facts  # no NVLink: no second nvidia-smi call
