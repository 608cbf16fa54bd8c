"""`clusterkit node-check --slurm-drain` on a real Slurm node whose NVMe drive reports media
errors (the nvme stand-in on the node's PATH prints nvme-cli 2.x's JSON): the node drains
itself naming the drive, and resumes once the drive is replaced."""

from __future__ import annotations

from tests.slurm.test_node_check import failing_ids, node_check
from tests.support.slurmcluster import SlurmCluster


def test_a_drive_with_media_errors_drains_naming_it_and_resumes_once_replaced(
    slurm: SlurmCluster,
) -> None:
    node = slurm.net["node2"]
    node.set_nvme([{"name": "nvme0"}, {"name": "nvme1", "smart": {"media_errors": 7}}])
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 1 and failing_ids(report) == {"host.nvme"}
    assert slurm.node_state("node2") == (
        "IDLE+DRAIN", "clusterkit: host.nvme; NVMe nvme1 media errors needs replacement"
    )  # fmt: skip

    node.set_nvme([{"name": "nvme0"}, {"name": "nvme1"}])  # the drive replaced
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "resume"
    assert "DRAIN" not in slurm.node_state("node2")[0]
