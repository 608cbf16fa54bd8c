"""A resilient `clusterkit launch` on real hosts: a node dies mid-run, the job goes on.

Four namespace nodes with sshd; the job is tests/support/ddp_job.py (DDP on gloo) on three
of them, checkpointing to a file every node sees (the nodes share this machine's
filesystem), the fourth a spare. A node "crashes" by having every process in it killed,
its sshd too, as a kernel panic or a power cut would: its connection drops, its ranks
vanish, and the surviving ranks fail on the lost peer.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import IO

import pytest

from tests.cluster.test_launch_cluster import JOB, run_id_of, wait_until_clean
from tests.support.netcluster import NetCluster, Node, kill_netns_processes

XID_79 = "NVRM: Xid (PCI:0000:18:00): 79, pid=0, name=<unknown>, GPU has fallen off the bus."


class Launch:
    """A launch running in the background; its output lines are kept as they come."""

    def __init__(
        self,
        inventory: Path | None,
        *options: str,
        job: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> None:
        argv = [
            sys.executable, "-m", "clusterkit", "launch", *([str(inventory)] if inventory else []),
            "--skip", "bench", *options, "--", JOB, *job,
        ]  # fmt: skip
        self.process = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
        )
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(self.process.stdout, self.stdout)),
            threading.Thread(target=self._read, args=(self.process.stderr, self.stderr)),
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream: IO[str] | None, lines: list[str]) -> None:
        for line in stream or ():
            lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, seconds: float = 240.0, count: int = 1) -> list[str]:
        """The stdout lines matching `pattern`, once `count` of them have come."""
        end = time.monotonic() + seconds
        regex = re.compile(pattern)
        while time.monotonic() < end:
            found = [line for line in list(self.stdout) if regex.search(line)]
            if len(found) >= count:
                return found
            if self.process.poll() is not None and not any(r.is_alive() for r in self.readers):
                break
            time.sleep(0.1)
        self.process.kill()
        pytest.fail(f"no {count} x {pattern!r}:\n" + "\n".join(self.stderr[-40:]))

    def finish(self, seconds: float = 300.0) -> tuple[int, str, str]:
        try:
            code = self.process.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
            for reader in self.readers:
                reader.join(5)
            pytest.fail("launch did not end:\n" + "\n".join(self.stderr[-60:]))
        for reader in self.readers:
            reader.join(10)
        return code, "\n".join(self.stdout), "\n".join(self.stderr)


def crash(node: Node) -> None:
    """Every process of the node killed at once, sshd included."""
    kill_netns_processes(node.netns)


def reboot_cleans(run_id: str, node_rank: int) -> None:
    """What the crashed node's reboot does to its /tmp: its run folder goes (nobody could
    reach the node to remove it, and the nodes here share this machine's /tmp)."""
    for folder in Path("/tmp").glob(f"clusterkit-launch-{run_id}-n{node_rank}.*"):
        subprocess.run(["rm", "-rf", str(folder)], check=True)


def training_job(checkpoint: Path, steps: int = 40) -> tuple[str, ...]:
    return ("--steps", str(steps), "--step-seconds", "0.25", "--checkpoint", str(checkpoint))


def hosts_of(stdout: str, pattern: str) -> set[str]:
    """The hosts whose ranks printed a line matching `pattern`."""
    return {m[1] for m in re.finditer(rf"^(node\d)/\d+: {pattern}", stdout, re.M)}


def test_a_crashed_worker_is_left_out_and_the_job_finishes_on_the_spare(
    cluster: NetCluster, tmp_path: Path
) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    checkpoint = tmp_path / "checkpoint.pt"
    report, trace = tmp_path / "report.json", tmp_path / "trace.txt"
    launch = Launch(
        inventory, "--nnodes", "3", "--max-restarts", "1", "--check-output", str(report),
        "--format", "json", "--trace", str(trace), job=training_job(checkpoint),
    )  # fmt: skip
    launch.wait_for(r"^node3/2: step 3 ")
    assert hosts_of("\n".join(launch.stdout), "start step=0") == {"node1", "node2", "node3"}
    crash(cluster.nodes[2])
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert re.search(r"incident \S+ node fault on node3: node3 was lost", stderr), stderr[-3000:]
    assert "spare node4 taken" in stderr
    assert "recovered: every rank of attempt 1 runs" in stderr
    resumed = re.findall(r"^(node\d)/\d+: start step=(\d+) restart=1", stdout, re.M)
    assert {host for host, _ in resumed} == {"node1", "node2", "node4"}, stdout[-3000:]
    assert all(int(step) >= 3 for _, step in resumed)  # from the checkpoint, not from 0
    assert len(set(hosts_of(stdout, "done rank="))) == 3
    assert "node4/2: done rank=2 sum_of_ranks=3" in stdout
    record = json.loads(report.read_text())["details"]["launch"]
    assert record["result"] == "succeeded" and record["attempts"] == 2
    assert record["excluded"] == {"node3": "node3 was lost: no answer from its node process"}
    assert record["spares_used"] == ["node4"]
    (incident,) = record["incidents"]
    assert incident["fault"] == "node" and incident["hosts"] == ["node3"]
    assert 0 < incident["stop_s"] <= incident["recheck_s"] <= incident["running_s"]
    lines = trace.read_text().splitlines()
    assert "# nodes: 3" in lines and lines[-1].endswith(" node3")
    assert re.search(r"cost --restart-min \d+\.\d\d", stderr)
    reboot_cleans(run_id_of(stderr), 2)
    wait_until_clean(cluster, run_id_of(stderr))


def partition(node: Node, *, cut: bool = True) -> None:
    """The node cut off the network (a switch port, a cable): its own firewall drops every
    packet in and out, its processes run on and its connection neither ends nor answers.
    cut=False undoes it."""
    for chain in ("INPUT", "OUTPUT"):
        node.iptables("-I" if cut else "-D", chain, "-j", "DROP")


def test_a_partitioned_node_is_lost_and_the_outage_counts_from_its_last_word(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node3 drops every packet mid-run. With the default node timeout it is found lost,
    the job resumes on the spare while node3 is still cut off (nothing waits on its dead
    connection), and the incident and the trace count the outage from node3's last sign of
    life: the detection comes about the node timeout after it, and running_s includes that."""
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    checkpoint = tmp_path / "checkpoint.pt"
    report, trace = tmp_path / "report.json", tmp_path / "trace.txt"
    launch = Launch(
        inventory, "--nnodes", "3", "--max-restarts", "1", "--check-output", str(report),
        "--format", "json", "--trace", str(trace), job=training_job(checkpoint),
    )  # fmt: skip
    launch.wait_for(r"^node3/2: step 3 ")
    node3 = cluster.nodes[2]
    partition(node3)
    try:
        launch.wait_for(r"^node4/2: start step=([3-9]|\d\d+) restart=1")
    finally:
        partition(node3, cut=False)
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert re.search(r"incident \S+ node fault on node3: node3 was lost", stderr), stderr[-3000:]
    assert re.search(r"recovered: every rank of attempt 1 runs, [\d.]+ s after the fault "
                     r"\(last heard [\d.]+ s before it was detected\)", stderr)  # fmt: skip
    assert "node4/2: done rank=2 sum_of_ranks=3" in stdout
    record = json.loads(report.read_text())["details"]["launch"]
    (incident,) = record["incidents"]
    assert incident["fault"] == "node" and incident["hosts"] == ["node3"]
    # Silent since its last byte; found lost once the default timeout (10 s) had passed.
    assert 10.0 <= incident["detect_s"] < 25.0, incident
    assert incident["onset"] <= incident["detected"]
    assert incident["detect_s"] < incident["stop_s"] <= incident["recheck_s"]
    assert incident["recheck_s"] <= incident["running_s"]
    assert trace.read_text().splitlines()[-1] == f"{incident['onset']} node3"
    # Back on the network, node3 finds its connection gone and stops its own share.
    wait_until_clean(cluster, run_id_of(stderr), seconds=150)


def test_a_crashed_master_hands_over_to_a_healthy_node(cluster: NetCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    checkpoint = tmp_path / "checkpoint.pt"
    launch = Launch(inventory, "--nnodes", "3", "--max-restarts", "1", job=training_job(checkpoint))
    launch.wait_for(r"^node1/0: step 3 ")
    crash(cluster.nodes[0])
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert re.search(r"node fault on node1: node1 was lost", stderr)
    master = cluster.nodes[1].address
    assert re.search(rf"attempt 1 on node2, node3, node4 \(master {master}:29500\)", stderr)
    assert re.search(rf"^node2/0: joined rank=0 world=3 master={master}:29500", stdout, re.M)
    assert re.search(r"^node4/2: start step=([3-9]|\d\d+) restart=1", stdout, re.M), stdout[-2000:]
    assert "node4/2: done rank=2" in stdout
    reboot_cleans(run_id_of(stderr), 0)
    wait_until_clean(cluster, run_id_of(stderr))


def test_a_node_failing_the_check_is_left_out_before_the_start(
    cluster: NetCluster, tmp_path: Path
) -> None:
    cluster.nodes[1].set_kernel_log([XID_79])
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    launch = Launch(inventory, "--nnodes", "3", job=("--steps", "2"))
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert re.search(r"node2 failed the check, left out: gpu\.xid", stderr), stderr[-3000:]
    # Said in words, not as a verdict of a check that refused: who is left out, and that the
    # job goes ahead on the others.
    assert "the check failed on node2: the job goes ahead without it, on 3 nodes" in stderr
    assert "verdict:" not in stdout + stderr, stdout[-2000:]
    assert hosts_of(stdout, "done rank=") == {"node1", "node3", "node4"}
    assert "node2/" not in stdout
    wait_until_clean(cluster, run_id_of(stderr))
    # Without --nnodes every node must pass: nothing starts.
    refused = Launch(inventory, job=("--steps", "2"))
    code, stdout, stderr = refused.finish()
    assert code == 1 and "nothing was started" in stderr and "joined" not in stdout


def test_a_rank_that_raises_is_a_job_fault_and_is_not_retried(
    cluster: NetCluster, tmp_path: Path
) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    started = time.monotonic()
    launch = Launch(
        inventory, "--nnodes", "3", "--max-restarts", "2",
        job=("--fail-rank", "1", "--steps", "50", "--step-seconds", "0.1"),
    )  # fmt: skip
    code, stdout, stderr = launch.finish()
    assert code == 1, stderr[-3000:]
    assert re.search(r"job fault on node2 rank 1: rank 1 on node2 exited with status 1", stderr)
    assert "a job fault is not retried (--max-restarts-on-errors)" in stderr
    assert "RuntimeError: rank 1 fails on purpose" in stderr
    assert len(re.findall(r"^node2/1: start step=0", stdout, re.M)) == 1  # one attempt only
    assert "node4/" not in stdout  # no spare was spent on a bug
    assert time.monotonic() - started < 200
    wait_until_clean(cluster, run_id_of(stderr))


def test_a_job_fault_is_retried_only_as_often_as_allowed(
    cluster: NetCluster, tmp_path: Path
) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    launch = Launch(
        inventory, "--max-restarts-on-errors", "1", job=("--fail-rank", "1", "--steps", "5"),
    )  # fmt: skip
    code, stdout, stderr = launch.finish()
    assert code == 1, stderr[-3000:]
    assert "run again on the same nodes (job restart 1)" in stderr
    assert len(re.findall(r"^node2/1: start step=0 restart=\d", stdout, re.M)) == 2
    wait_until_clean(cluster, run_id_of(stderr))


def test_with_no_spare_left_the_job_carries_on_with_fewer_nodes(
    cluster: NetCluster, tmp_path: Path
) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    checkpoint = tmp_path / "checkpoint.pt"
    launch = Launch(
        inventory, "--nnodes", "3:4", "--max-restarts", "1", job=training_job(checkpoint)
    )
    launch.wait_for(r"^node4/3: step 3 ")
    crash(cluster.nodes[3])
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert "no spare; re-checking, then attempt 1 on 3 nodes" in stderr
    assert "node3/2: done rank=2 sum_of_ranks=3" in stdout  # a world of three now
    reboot_cleans(run_id_of(stderr), 3)
    wait_until_clean(cluster, run_id_of(stderr))


def test_a_spare_that_fails_the_recheck_is_not_used(cluster: NetCluster, tmp_path: Path) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    checkpoint = tmp_path / "checkpoint.pt"
    launch = Launch(inventory, "--nnodes", "2", "--max-restarts", "1", job=training_job(checkpoint))
    launch.wait_for(r"^node2/1: step 3 ")
    cluster.nodes[2].set_kernel_log([XID_79])  # the first spare breaks while it waits
    crash(cluster.nodes[1])
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert re.search(r"node3 fails the re-check, left out: gpu\.xid", stderr), stderr[-3000:]
    assert hosts_of(stdout, "done rank=") == {"node1", "node4"}
    assert "node3/" not in stdout
    reboot_cleans(run_id_of(stderr), 1)
    wait_until_clean(cluster, run_id_of(stderr))
