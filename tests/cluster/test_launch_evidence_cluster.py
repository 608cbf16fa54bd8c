"""Evidence per attempt and the job's error explained, on real hosts.

Three namespace nodes run tests/support/ddp_job.py with a layer its forward() never uses:
real DDP raises its unused-parameters error at step 1 on every rank. With
--max-restarts-on-errors 1 the job runs twice; with --log-dir each attempt keeps its own rank
and torchrun logs, each incident names its attempt's folder, and the failure's report ends
with clusterkit's remedy for that error.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

from tests.cluster.test_launch_cluster import NODES, inventory, launch, run_id_of, wait_until_clean
from tests.cluster.test_launch_resilient import Launch, crash, reboot_cleans, training_job
from tests.support.netcluster import NetCluster

DDP_ERROR = "Expected to have finished reduction in the prior iteration"


def test_each_attempt_keeps_its_evidence_and_the_error_is_explained(
    cluster: NetCluster, tmp_path: Path
) -> None:
    logs, report = tmp_path / "logs", tmp_path / "report.json"
    done = launch(
        inventory(cluster, tmp_path), "--max-restarts-on-errors", "1", "--log-dir", str(logs),
        "--check-output", str(report), "--format", "json",
        job=("--unused-parameter", "--steps", "3"),
    )  # fmt: skip
    assert done.returncode == 1, done.stderr[-4000:]
    folders = [os.path.realpath(logs / f"attempt-{n}") for n in range(2)]
    assert "run again on the same nodes (job restart 1)" in done.stderr
    assert re.search(
        rf"incident \S+ job fault on node\d rank \d: .*\(evidence in {re.escape(folders[0])}\)",
        done.stderr,
    ), done.stderr[-3000:]
    assert f"(evidence in {folders[1]})" in done.stderr  # the second failure, not retried
    for attempt, folder in enumerate(folders):
        for rank, node in enumerate(cluster.nodes[:NODES]):
            log = (Path(folder) / f"{node.name}-{rank}.log").read_text()
            assert f"start step=0 restart={attempt}" in log, log[-2000:]
            assert DDP_ERROR in log
            assert (Path(folder) / f"{node.name}-torchrun.log").exists()
    remedies = [line for line in done.stderr.splitlines() if "clusterkit: remedy: " in line]
    assert len(remedies) == 1, done.stderr[-3000:]
    assert "DDP found parameters that got no gradient" in remedies[0]
    assert "find_unused_parameters=True" in remedies[0] and DDP_ERROR not in remedies[0]
    assert (logs / "outcome.txt").read_text().count("clusterkit: remedy: ") == 1
    record = json.loads(report.read_text())["details"]["launch"]
    assert [i["evidence_dir"] for i in record["incidents"]] == folders
    assert record["evidence_dir"] == folders[1]
    assert record["first_failure"]["remedy"]["id"] == "ddp-unused-parameters"
    assert all(i["fault"] == "job" for i in record["incidents"])  # no node was blamed
    wait_until_clean(cluster, run_id_of(done.stderr))


def test_a_node_crash_keeps_the_failed_attempts_logs_beside_the_restarts(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node3 crashes mid-run and node4 takes its place: the lines node3's rank printed before
    the crash stay in attempt-0, the restart's go to attempt-1, and the incident says so."""
    logs = tmp_path / "logs"
    launch = Launch(
        cluster.inventory(tmp_path / "inventory.yaml"), "--nnodes", "3", "--max-restarts", "1",
        "--log-dir", str(logs), job=training_job(tmp_path / "checkpoint.pt", steps=20),
    )  # fmt: skip
    launch.wait_for(r"^node3/2: step 3 ")
    crash(cluster.nodes[2])
    code, _, stderr = launch.finish()
    assert code == 0, stderr[-4000:]
    first, second = (os.path.realpath(logs / f"attempt-{n}") for n in range(2))
    assert re.search(
        rf"node fault on node3: node3 was lost.*\(evidence in {re.escape(first)}\)", stderr
    ), stderr[-3000:]
    crashed = (Path(first) / "node3-2.log").read_text()
    assert "start step=0 restart=0" in crashed and "step 3 loss" in crashed
    spare = (Path(second) / "node4-2.log").read_text()
    assert "restart=1" in spare and "done rank=2" in spare
    assert not (Path(second) / "node3-2.log").exists()  # node3 was left out
    assert "start step=0 restart=0" in (Path(first) / "node1-0.log").read_text()
    assert "restart=1" in (Path(second) / "node1-0.log").read_text()  # not overwritten
    reboot_cleans(run_id_of(stderr), 2)
    wait_until_clean(cluster, run_id_of(stderr))
