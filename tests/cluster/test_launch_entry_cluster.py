"""The launch's entry-script pre-flight on real hosts (issue 37 item 9): namespace nodes over
real SSH, each with a folder of its own, as nodes without shared storage. One node without
the script and, where the copies differ, every copy are named, with the path, and
nothing starts; once every node holds the same file the job runs.

The nodes share this machine's filesystem; `ip netns exec` binds each entry of
/etc/netns/NETNS over /etc for the node's sshd and every session it starts, so
/etc/netns/NETNS/opt is that node's own /etc/opt (its sshd restarted to take it up).
"""

from __future__ import annotations

import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cluster.test_launch_cluster import JOB, NODES, inventory, run_id_of, wait_until_clean
from tests.support.cli import run_cli
from tests.support.netcluster import NetCluster

OWN = Path("/etc/opt")  # each node's own folder, as its sessions see it


@pytest.fixture
def own_folders(cluster: NetCluster) -> Iterator[dict[str, Path]]:
    """node name -> where this machine writes that node's /etc/opt."""
    nodes = cluster.nodes[:NODES]
    folders = {node.name: Path("/etc/netns") / node.netns / OWN.name for node in nodes}
    try:
        for node in nodes:
            folders[node.name].mkdir()
            node.stop_sshd()
            node.start_sshd()
        yield folders
    finally:
        for node in nodes:
            shutil.rmtree(folders[node.name], ignore_errors=True)
            node.stop_sshd()
            node.start_sshd()


def launch_in_own(path: Path, *options: str) -> tuple[int, str, str]:
    """`launch --workdir /etc/opt -- train.py --steps 2`: the script relative to each node's
    own folder."""
    words = ["launch", str(path), "--skip", "bench", "--workdir", str(OWN), *options]
    done = run_cli([*words, "--", "train.py", "--steps", "2"], timeout=300)
    return done.status, done.stdout, done.stderr


def test_a_missing_script_and_another_file_are_named_and_nothing_starts(
    cluster: NetCluster, own_folders: dict[str, Path], tmp_path: Path
) -> None:
    job = Path(JOB).read_bytes()
    (own_folders["node1"] / "train.py").write_bytes(job)
    (own_folders["node3"] / "train.py").write_bytes(job + b"# edited on node3 only\n")
    status, stdout, stderr = launch_in_own(inventory(cluster, tmp_path), "--no-check")
    assert status == 1, stderr[-3000:]
    lines = [line for line in stderr.splitlines() if "pre-flight" in line]
    assert lines[0] == "clusterkit: pre-flight: train.py not found on node2 (/etc/opt/train.py)"
    edited = job + b"# edited on node3 only\n"
    # One copy against one: no file is on most nodes, so neither node is blamed.
    assert lines[1] == (
        "clusterkit: pre-flight: train.py differs between nodes, and no one file is on most "
        f"(node1: sha256 {sha(job)}, {len(job)} bytes; node3: sha256 {sha(edited)}, "
        f"{len(edited)} bytes)"
    )
    assert "nothing was started" in lines[2] and len(lines) == 3
    assert "launching run" not in stderr and "joined" not in stdout


def test_the_same_script_on_every_node_passes_the_pre_flight_and_the_job_runs(
    cluster: NetCluster, own_folders: dict[str, Path], tmp_path: Path
) -> None:
    job = Path(JOB).read_bytes()
    for folder in own_folders.values():
        (folder / "train.py").write_bytes(job)
    status, stdout, stderr = launch_in_own(inventory(cluster, tmp_path))
    assert status == 0, stderr[-3000:]
    assert f"train.py is the same file on 3 nodes (sha256 {sha(job)})" in stderr
    assert "check passed" in stderr and "job succeeded" in stderr
    assert all(f"node{i}/{i - 1}: done rank={i - 1}" in stdout for i in range(1, NODES + 1))
    wait_until_clean(cluster, run_id_of(stderr))


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:12]
