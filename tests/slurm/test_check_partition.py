"""`clusterkit check --slurm-partition P` from outside any allocation, on a real Slurm."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.support.cli import CliRun, run_cli
from tests.support.slurmcluster import SlurmCluster


def check(slurm: SlurmCluster, *args: str) -> CliRun:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    env["SLURM_CONF"] = str(slurm.conf)  # a login node: Slurm's client, no allocation
    return run_cli(["check", *args], env=env, timeout=300)


def test_partition_nodes_are_the_ones_checked(slurm: SlurmCluster, tmp_path: Path) -> None:
    # A partition of two of the three nodes: the inventory (SSH parameters) holds all three,
    # so only the partition can narrow the check down to node1 and node2.
    slurm.run(["scontrol", "create", "PartitionName=half", "Nodes=node1,node2", "State=UP"])
    try:
        slurm.net["node2"].set_gpus(ecc_errors={5: 3})
        inventory = slurm.net.inventory(tmp_path / "inv.yaml")
        done = check(
            slurm, str(inventory), "--slurm-partition", "half", "--skip", "bench",
            "--format", "json",
        )  # fmt: skip
    finally:
        slurm.run(["scontrol", "delete", "PartitionName=half"], check=False)
    assert done.stdout, done.stderr
    report = json.loads(done.stdout)
    assert done.status == 1
    assert set(report["hosts"]) == {"node1", "node2"}
    for name, entry in report["hosts"].items():
        assert entry["facts"]["hostname"]["hostname"] == name  # really reached that node
    ecc = [f for f in report["findings"] if f["id"] == "gpu.ecc" and f["status"] == "fail"]
    assert ecc and ecc[0]["hosts"] == ["node2"]
    assert slurm.jobs() == []  # SSH: no allocation asked for


def test_unknown_partition_is_a_one_line_error(slurm: SlurmCluster, tmp_path: Path) -> None:
    inventory = slurm.net.inventory(tmp_path / "inv.yaml")
    done = check(slurm, str(inventory), "--slurm-partition", "nosuch")
    assert done.status == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Partition nosuch not found" in lines[0], done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
