"""A hang whose cause is a stopped rank: node3's rank is sent SIGSTOP while the job trains
on three namespace nodes (DDP on gloo under torchrun, tests/support/ddp_job.py), and the
others wait for it in their all_reduce. The stopped rank can write no stack and no flight
record until it is continued: the hang's report comes without waiting for them, and says
the rank is stopped; the stop continues it after its TERM, so it ends at once."""

from __future__ import annotations

import contextlib
import os
import re
import signal
from pathlib import Path

from clusterkit.node.launch import FLIGHT_SECONDS
from tests.cluster.test_launch_cluster import run_id_of, wait_until_clean
from tests.cluster.test_launch_resilient import Launch
from tests.cluster.test_launch_watch import wait_stderr
from tests.support.netcluster import NetCluster, pids_in_netns


def environ(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return []


def rank_pid(netns: str, rank: int) -> int:
    """The rank's process: a torchrun worker with that RANK whose parent is none."""
    workers = {
        pid
        for pid in pids_in_netns(netns)
        if any(v.startswith(b"GROUP_RANK=") for v in environ(pid))
    }
    for pid in workers:
        parent = int(Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()[1])
        if f"RANK={rank}".encode() in environ(pid) and parent not in workers:
            return pid
    raise AssertionError(f"no rank {rank} in {netns}: {sorted(workers)}")


def test_a_stopped_rank_is_reported_at_once_and_named_stopped(
    cluster: NetCluster, tmp_path: Path
) -> None:
    nodes = cluster.nodes[:3]
    inventory = cluster.inventory(tmp_path / "inventory.yaml", nodes=nodes)
    launch = Launch(
        inventory, "--hang-timeout", "8", "--stacks", "faulthandler",
        job=("--steps", "400", "--step-seconds", "0.25"),
    )  # fmt: skip
    launch.wait_for(r"^node3/2: step 3 ")
    pid = rank_pid(nodes[2].netns, 2)
    try:
        os.kill(pid, signal.SIGSTOP)
        wait_stderr(launch, r"collecting every rank's stack", 60.0)
        reported = wait_stderr(launch, r"clusterkit: incident .* node fault on node3", 60.0)
        code, _, stderr = launch.finish()
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    # The stacks collected and every rank stopped: waiting for the stopped rank took the
    # faulthandler bound (3 s), the flight recorder's (5 s) and the stop's grace (its TERM
    # pending until the whole grace ended in KILL), 13 s here before.
    assert reported < FLIGHT_SECONDS, reported
    assert code == 124, stderr[-3000:]
    odd = re.search(r"odd one out: rank 2 on node3 no stack \((.*)\)$", stderr, re.M)
    assert odd and "its process is stopped (state T)" in odd[1], stderr[-3000:]
    assert "no stacks from" not in stderr  # node3 answered, for its stopped rank too
    wait_until_clean(cluster, run_id_of(stderr))
