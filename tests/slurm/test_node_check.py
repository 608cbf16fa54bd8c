"""`clusterkit node-check --slurm-drain` on real Slurm nodes, run on the node as an admin's
health check would (logged in, the node's own GPU stand-in on PATH)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

from tests.support.slurmcluster import SlurmCluster


def node_check(slurm: SlurmCluster, node: str, *args: str) -> tuple[int, dict[str, Any], float]:
    command = slurm.net[node].ssh_argv(
        "env", f"SLURM_CONF={slurm.conf}", sys.executable, "-m", "clusterkit", "node-check",
        "--format", "json", *args,
    )  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout), time.monotonic() - started


def failing_ids(report: dict[str, Any]) -> set[str]:
    return {f["id"] for f in report["findings"] if f["status"] in ("fail", "error")}


def test_healthy_node_passes_quickly(slurm: SlurmCluster) -> None:
    status, report, _ = node_check(slurm, "node1")
    assert status == 0, failing_ids(report)
    assert list(report["hosts"]) == ["node1"]
    assert report["hosts"]["node1"]["facts"]["gpus"]["count"] == 8  # the node's own GPUs
    assert report["seconds"] < 1.0  # the check itself, without the SSH login around it


def test_broken_node_drains_itself_and_is_resumed_once_fixed(slurm: SlurmCluster) -> None:
    slurm.net["node2"].set_gpus(ecc_errors={3: 2})
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 1 and "gpu.ecc" in failing_ids(report)
    state, reason = slurm.node_state("node2")
    assert "DRAIN" in state and reason == "clusterkit: gpu.ecc"

    slurm.net["node2"].set_gpus()
    status, report, _ = node_check(slurm, "node2", "--slurm-drain")
    assert status == 0
    assert report["details"]["slurm"]["action"] == "resume"
    assert "DRAIN" not in slurm.node_state("node2")[0]


def test_node_drained_by_an_admin_stays_drained(slurm: SlurmCluster) -> None:
    slurm.run(["scontrol", "update", "nodename=node3", "state=drain", "reason=admin: fan swap"])
    slurm.net["node3"].set_gpus(mode="mismatch")
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status != 0 and report["details"]["slurm"]["action"] == "keep"
    assert slurm.node_state("node3") == ("IDLE+DRAIN", "admin: fan swap")
    slurm.net["node3"].set_gpus()
    status, report, _ = node_check(slurm, "node3", "--slurm-drain")
    assert status == 0 and report["details"]["slurm"]["action"] == "keep"
    assert slurm.node_state("node3") == ("IDLE+DRAIN", "admin: fan swap")


def test_a_hostlist_as_the_node_name_drains_nothing(slurm: SlurmCluster) -> None:
    """SLURMD_NODENAME='node[1-3]' on a failing node once drained the whole range through
    scontrol; a name that is not one node's is a one-line error before scontrol sees it."""
    slurm.net["node2"].set_gpus(ecc_errors={3: 2})
    for variable in ("SLURMD_NODENAME=node[1-3]", "SLURMD_NODENAME=node1,node3"):
        command = slurm.net["node2"].ssh_argv(
            "env", f"SLURM_CONF={slurm.conf}", variable, sys.executable, "-m", "clusterkit",
            "node-check", "--slurm-drain",
        )  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 2, done.stderr
        assert "SLURMD_NODENAME" in done.stderr and "not a single node name" in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr
    for node in slurm.node_names:
        assert "DRAIN" not in slurm.node_state(node)[0], node
