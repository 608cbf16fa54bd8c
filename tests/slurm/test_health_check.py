"""slurmd itself runs `clusterkit node-check --slurm-drain` as its HealthCheckProgram.

A Slurm cluster of its own (2 nodes): its health check drains any node made broken, which would
disturb the tests sharing the session's cluster.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.support import netcluster, slurmcluster
from tests.support.netcluster import NetCluster
from tests.support.slurmcluster import SlurmCluster

INTERVAL = 1  # seconds: the smallest HealthCheckInterval
DEADLINE = 30.0  # generous: slurmctld sends the health check on its own schedule


@pytest.fixture(scope="module")
def checked_slurm() -> Iterator[SlurmCluster]:
    reason = netcluster.unavailable_reason() or slurmcluster.unavailable_reason()
    if reason:
        pytest.skip(f"real Slurm cluster unavailable: {reason}")
    with NetCluster(2) as net, SlurmCluster(net, health_check_interval=INTERVAL) as built:
        yield built


def wait_for(condition: Callable[[], bool], what: str, slurm: SlurmCluster) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not seen after {DEADLINE:g} s; {slurm.logs()}")
        time.sleep(0.2)


def health_report(slurm: SlurmCluster, node: str) -> Path:
    return slurm.net[node].dir / "health-check.json"


def next_health_check(slurm: SlurmCluster, node: str) -> Callable[[], bool]:
    """True once slurmd has run the health check on `node` again after this call."""
    path = health_report(slurm, node)
    before = path.stat().st_mtime_ns if path.exists() else 0
    return lambda: path.exists() and path.stat().st_mtime_ns > before


def test_slurmd_health_check_drains_a_broken_node_and_resumes_it(
    checked_slurm: SlurmCluster,
) -> None:
    slurm = checked_slurm
    ran = next_health_check(slurm, "node2")
    wait_for(ran, "a first health check on node2", slurm)
    assert json.loads(health_report(slurm, "node2").read_text())["exit_status"] == 0
    assert "DRAIN" not in slurm.node_state("node2")[0]

    slurm.net["node2"].set_gpus(ecc_errors={3: 2})
    wait_for(lambda: "DRAIN" in slurm.node_state("node2")[0], "node2 drained", slurm)
    assert slurm.node_state("node2")[1] == "clusterkit: gpu.ecc"
    assert "clusterkit: gpu.ecc" in slurm.run(["sinfo", "-R", "-h", "-o", "%n %E"]).stdout
    assert "DRAIN" not in slurm.node_state("node1")[0]  # the healthy node is left alone

    slurm.net["node2"].set_gpus()
    wait_for(lambda: "DRAIN" not in slurm.node_state("node2")[0], "node2 resumed", slurm)
    assert slurm.node_state("node2")[1] == ""


def test_slurmd_health_check_leaves_an_admin_drain_alone(checked_slurm: SlurmCluster) -> None:
    slurm = checked_slurm
    slurm.run(["scontrol", "update", "nodename=node1", "state=drain", "reason=admin: fan swap"])
    try:
        for _ in range(2):  # two full checks: a resume would have happened by then
            wait_for(next_health_check(slurm, "node1"), "a health check on node1", slurm)
        assert json.loads(health_report(slurm, "node1").read_text())["exit_status"] == 0
        assert slurm.node_state("node1") == ("IDLE+DRAIN", "admin: fan swap")
    finally:
        slurm.run(["scontrol", "update", "nodename=node1", "state=resume"], check=False)
