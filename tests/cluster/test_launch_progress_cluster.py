"""`clusterkit launch` judges a running job by its progress on real hosts: a silent job that
advances runs to its end, a desynced job whose logging thread keeps printing is hung and its
flight records say where the ranks parted, and a node slowed down (a cgroup CPU quota) is
named as the straggler while the job runs, and no other node is.

The ranks report through the launch's sitecustomize thread (torch's flight recorder counters,
gloo on CPU); nothing in tests/support/ddp_job.py knows about it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cluster.test_launch_cluster import inventory, launch, run_id_of, wait_until_clean
from tests.cluster.test_launch_resilient import Launch, hosts_of
from tests.support.cpushares import CpuShares
from tests.support.netcluster import NetCluster, pids_in_netns


def test_a_silent_job_that_advances_runs_to_its_end(cluster: NetCluster, tmp_path: Path) -> None:
    """It prints nothing for 20 s, twice the hang timeout: printing was the only sign that
    counted, and such a job was stopped as hung (and a healthy node blamed). The timeout
    leaves a step slowed tenfold by a loaded machine room to advance in."""
    done = launch(
        inventory(cluster, tmp_path),
        "--hang-timeout", "10",
        job=("--quiet", "--steps", "40", "--step-seconds", "0.5"),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "job succeeded" in done.stderr and "hung" not in done.stderr
    assert "step " not in done.stdout  # it was silent indeed
    wait_until_clean(cluster, run_id_of(done.stderr))


def test_a_desynced_job_that_keeps_printing_is_hung_where_its_ranks_parted(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """Rank 1 skips one all_reduce; a logging thread in every rank goes on printing. The job
    is hung, the flight records name the collective and the rank, and they are kept."""
    logs = tmp_path / "logs"
    done = launch(
        inventory(cluster, tmp_path),
        "--hang-timeout", "8", "--log-dir", str(logs),
        job=("--skip-rank", "1", "--chatty", "--steps", "3"),
    )  # fmt: skip
    assert done.returncode == 124, done.stderr[-3000:]
    assert "still here" in done.stdout  # it printed all along
    hung = re.search(r"the job hung \(no rank advanced for 8 s .*?\): (.*)", done.stderr)
    assert hung, done.stderr[-3000:]
    parted = re.search(
        r"collective #(\d+) of process group 0 differs: ranks 0,2 \(node1, node3\) called "
        r"all_reduce \[\[1\]\]; rank 1 \(node2\) called \w+ \[\[\d+\]\]",  # DDP's own
        hung[1],
    )
    assert parted, hung[1]
    for host, rank in (("node1", 0), ("node2", 1), ("node3", 2)):
        record = json.loads((logs / "attempt-0" / f"flight-{host}-{rank}.json").read_text())
        assert record["rank"] == rank
        assert any(entry["seq"] == int(parted[1]) for entry in record["entries"])
    wait_until_clean(cluster, run_id_of(done.stderr))


THROTTLED = "node3"


def test_a_throttled_node_is_named_the_straggler_and_the_job_moves_off_it(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node3 gets a tenth of a core while the job computes 150 ms of CPU a step: every other
    rank waits for it. It is named once, alone, while the job runs; with --straggler-fault
    the job stops as a node fault and resumes on the spare, node4, from its checkpoint."""
    reason = CpuShares.reason()
    if reason:
        pytest.skip(f"needs CPU slices for one node: {reason}")
    path = cluster.inventory(tmp_path / "inventory.yaml")
    checkpoint = tmp_path / "checkpoint.pt"
    job = ("--steps", "60", "--compute-ms", "150", "--checkpoint", str(checkpoint))
    with CpuShares(0.1) as shares:
        node3 = next(node for node in cluster.nodes if node.name == THROTTLED)
        shares.confine(THROTTLED, pids_in_netns(node3.netns))
        run = Launch(path, "--nnodes", "3", "--max-restarts", "1", "--straggler-fault", job=job)
        run.wait_for(r"^node4/\d+: start step=", seconds=300)
        code, stdout, stderr = run.finish()
    assert code == 0, stderr[-3000:]
    named = [
        line for line in stderr.splitlines() if re.match(r"clusterkit: \w+ is a straggl", line)
    ]
    assert len(named) == 1 and named[0].startswith(f"clusterkit: {THROTTLED} is a straggler")
    slower = re.search(r"about (\d+(?:\.\d)?)x slower", named[0])
    assert slower and float(slower[1]) >= 2, named[0]
    assert re.search(rf"node fault on {THROTTLED}: {THROTTLED} is a straggler", stderr)
    assert "spare node4 taken" in stderr
    assert hosts_of(stdout, "done rank=") == {"node1", "node2", "node4"}
    wait_until_clean(cluster, run_id_of(stderr))
