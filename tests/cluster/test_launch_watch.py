"""The hardware watch during a real run: four namespace nodes, DDP on gloo under torchrun
(tests/support/ddp_job.py) on three of them, the fourth a spare. A fault is written into a
node's kernel-log stand-in (`Node.set_kernel_log`, re-read on every call) while the job
trains, in the exact shape the NVIDIA driver logs it."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.cluster.test_launch_cluster import run_id_of, wait_until_clean
from tests.cluster.test_launch_resilient import Launch, hosts_of, training_job
from tests.support.netcluster import NetCluster

# node3's first GPU (the stand-in numbers buses from 0x18 plus the 1-based node number), node1's.
NODE3_GPU = "0000:1b:00"
NODE1_GPU = "0000:19:00"
# gloo's default process-group timeout (torch 2.13): how long the job alone would wait.
GLOO_TIMEOUT_S = 1800.0


def xid(bus: str, code: int, text: str) -> str:
    return f"NVRM: Xid (PCI:{bus}): {code}, pid=0, name=<unknown>, {text}"


def wait_stderr(launch: Launch, pattern: str, seconds: float) -> float:
    """Seconds until a stderr line matches `pattern` (fails after `seconds`)."""
    start = time.monotonic()
    regex = re.compile(pattern)
    while time.monotonic() - start < seconds:
        if any(regex.search(line) for line in list(launch.stderr)):
            return time.monotonic() - start
        if launch.process.poll() is not None:
            break
        time.sleep(0.05)
    launch.process.kill()
    pytest.fail(f"no {pattern!r} within {seconds:g} s:\n" + "\n".join(launch.stderr[-40:]))


def test_an_xid_79_mid_run_stops_the_job_in_seconds_and_it_resumes_on_the_spare(
    cluster: NetCluster, tmp_path: Path
) -> None:
    inventory = cluster.inventory(tmp_path / "inventory.yaml")
    checkpoint, report = tmp_path / "checkpoint.pt", tmp_path / "report.json"
    launch = Launch(
        inventory, "--nnodes", "3", "--max-restarts", "1", "--check-output", str(report),
        "--format", "json", job=training_job(checkpoint, steps=80),
    )  # fmt: skip
    launch.wait_for(r"^node3/2: step 3 ")
    node3 = cluster.nodes[2]
    node3.set_kernel_log([xid(NODE3_GPU, 79, "GPU has fallen off the bus.")])
    seen = wait_stderr(launch, r"node3: node fault during the run: Xid 79", 30.0)
    assert seen < 10.0, seen  # the watch reads the log every 2 s; gloo would wait 1800 s
    stopped = wait_stderr(launch, r"incident \S+ node fault on node3", 60.0)
    assert stopped < GLOO_TIMEOUT_S / 30
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert re.search(r"incident \S+ node fault on node3: node3 during the run: Xid 79", stderr)
    assert "spare node4 taken" in stderr
    resumed = re.findall(r"^(node\d)/\d+: start step=(\d+) restart=1", stdout, re.M)
    assert {host for host, _ in resumed} == {"node1", "node2", "node4"}, stdout[-3000:]
    assert all(int(step) >= 3 for _, step in resumed)  # from the checkpoint, not from 0
    assert len(hosts_of(stdout, "done rank=")) == 3
    record = json.loads(report.read_text())["details"]["launch"]
    (incident,) = record["incidents"]
    assert incident["fault"] == "node" and incident["hosts"] == ["node3"]
    assert "Xid 79" in record["excluded"]["node3"]
    wait_until_clean(cluster, run_id_of(stderr))


def test_a_warning_or_another_nodes_device_does_not_stop_the_job(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """An application's Xid (13) warns once and is kept; an Xid naming a GPU the node's
    facts do not list (node1's, in node3's log) is dropped: a node speaks for itself."""
    inventory = cluster.inventory(tmp_path / "inventory.yaml", nodes=cluster.nodes[:3])
    logs, report = tmp_path / "logs", tmp_path / "report.json"
    launch = Launch(
        inventory, "--log-dir", str(logs), "--check-output", str(report), "--format", "json",
        job=training_job(tmp_path / "checkpoint.pt", steps=60),
    )  # fmt: skip
    launch.wait_for(r"^node3/2: step 3 ")
    cluster.nodes[2].set_kernel_log([
        xid(NODE3_GPU, 13, "Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0)"),
        xid(NODE1_GPU, 79, "GPU has fallen off the bus."),
    ])  # fmt: skip
    wait_stderr(launch, r"node3: warning during the run: Xid 13", 30.0)
    wait_stderr(launch, rf"node3: dropped: hardware: xid names '{NODE1_GPU}', not this", 30.0)
    code, stdout, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    assert len(re.findall("warning during the run", stderr)) == 1
    assert "node fault" not in stderr and len(hosts_of(stdout, "done rank=")) == 3
    record = json.loads(report.read_text())["details"]["launch"]
    assert record["result"] == "succeeded" and record["attempts"] == 1
    assert [h["status"] for h in record["hardware"]] == ["warn"]
    watch_logs = list(logs.rglob("watch.txt"))
    assert watch_logs and "Xid 13" in watch_logs[0].read_text()
    wait_until_clean(cluster, run_id_of(stderr))
