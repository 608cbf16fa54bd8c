"""The Slurm test cluster itself: real daemons, per-node hostnames and tools, clean teardown."""

from __future__ import annotations

import os
from pathlib import Path

from tests.support.netcluster import NetCluster
from tests.support.slurmcluster import SlurmCluster


def test_one_task_per_node_sees_its_own_node(slurm: SlurmCluster) -> None:
    slurm.net["node2"].set_gpus(driver="535.129.03", cuda="12.2")
    done = slurm.run(
        ["srun", "-N3", "--ntasks-per-node=1", "-l", "sh", "-c",
         'echo "$(hostname) $SLURMD_NODENAME"; getent hosts node1;'
         " nvidia-smi | grep -o 'Driver Version: [0-9.]*'"],
    )  # fmt: skip
    by_task: dict[str, list[str]] = {}
    for line in done.stdout.splitlines():
        task, _, text = line.partition(": ")
        by_task.setdefault(task.strip(), []).append(" ".join(text.split()))
    seen = {}
    for lines in by_task.values():
        names = [line.split()[0] for line in lines if line.startswith("node")]
        seen[names[0]] = lines
    assert set(seen) == {"node1", "node2", "node3"}
    for name, words in seen.items():
        assert f"{name} {name}" in words  # hostname and Slurm's node name agree
        assert any(w.startswith("10.213.") and w.endswith(" node1") for w in words)  # /etc/hosts
        driver = "535.129.03" if name == "node2" else "550.54.15"
        assert f"Driver Version: {driver}" in words  # the node's own GPU stand-in


def test_sbatch_allocation_and_drain(slurm: SlurmCluster, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    out = tmp_path / "job.out"
    script.write_text('#!/bin/sh\nscontrol show hostnames "$SLURM_JOB_NODELIST"\n')
    job = slurm.sbatch(script, "-N3", f"--output={out}")
    assert slurm.wait_job(job) == "COMPLETED"
    assert out.read_text().split() == ["node1", "node2", "node3"]

    slurm.run(["scontrol", "update", "nodename=node2", "state=drain", "reason=testbed"])
    assert slurm.node_state("node2") == ("IDLE+DRAIN", "testbed")
    slurm.reset()
    assert slurm.node_state("node2")[0] == "IDLE"


def test_a_second_cluster_coexists_and_leaves_nothing(slurm: SlurmCluster) -> None:
    with NetCluster(1) as net, SlurmCluster(net) as other:
        assert other.port != slurm.port and other.conf != slurm.conf
        assert other.run(["srun", "-N1", "hostname"]).stdout.split() == ["node1"]
        daemons = [process.pid for process in other._daemons]
        directory = other.dir
    for pid in daemons:
        assert not os.path.exists(f"/proc/{pid}"), f"daemon {pid} survived close()"
    assert not directory.exists()
    assert slurm.run(["srun", "-N3", "true"]).returncode == 0  # the first one is untouched
