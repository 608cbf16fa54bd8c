"""The dcgm stage end to end: a stand-in `dcgmi` on each test node replays a recorded
`dcgmi diag -j` document (tests/fixtures/dcgm/), clusterkit runs it over SSH on every node."""

from __future__ import annotations

from pathlib import Path

from tests.cluster.test_check_spine import check
from tests.support.netcluster import NetCluster

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "dcgm"


def dcgm_findings(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["id"] == "dcgm.diag"]


def test_a_failing_gpu_on_node2_is_named_on_node2_only_and_a_node_without_dcgmi_warns(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    for node in cluster.nodes:
        node.set_dcgm(FIXTURES / "dcgm4_r3_pass_8gpu.json")
    cluster.nodes[1].set_dcgm(FIXTURES / "dcgm4_r2_fail_8gpu.json", exit_code=226)
    cluster.nodes[3].set_dcgm(None)
    status, report, _ = check(cluster_inventory, "--dcgm-level", "2")
    findings = dcgm_findings(report)
    bad = {
        (f["found"]["test"], f["found"]["gpu"]): f
        for f in findings
        if f["status"] in ("fail", "warn") and f["found"]
    }
    assert set(bad) == {("software", 0), ("pcie", 2), ("memory", 5)}, findings
    assert all(f["hosts"] == ["node2"] for f in bad.values())
    assert "node2 GPU 2" in bad["pcie", 2]["message"] and status != 0
    # Asked for and not run on node4: a warning that says so, never a quiet skip.
    missing = [f for f in findings if "did NOT run" in f["message"]]
    assert [(f["status"], f["hosts"]) for f in missing] == [("warn", ["node4"])]
    assert report["stages"]["dcgm"] == "ran"
    assert [node.dcgm_calls() for node in cluster.nodes[:3]] == [["diag -r 2 -j"]] * 3


def test_without_a_level_the_stage_does_not_run(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    for node in cluster.nodes:
        node.set_dcgm(FIXTURES / "dcgm4_r2_fail_8gpu.json")
    _, report, _ = check(cluster_inventory)
    assert dcgm_findings(report) == [] and "dcgm" not in report["stages"]
    assert all(node.dcgm_calls() == [] for node in cluster.nodes)


def test_a_stopped_host_engine_is_one_error_with_the_remedy(
    cluster: NetCluster, cluster_inventory: Path
) -> None:
    for node in cluster.nodes:
        node.set_dcgm(FIXTURES / "no_hostengine.txt", exit_code=250)
    status, report, _ = check(cluster_inventory, "--dcgm-level", "1")
    errors = [f for f in dcgm_findings(report) if f["status"] == "error"]
    assert len(errors) == 1 and errors[0]["hosts"] == [n.name for n in cluster.nodes]
    assert "systemctl start nvidia-dcgm" in errors[0]["remedy"] and status != 0
