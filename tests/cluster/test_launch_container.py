"""`clusterkit launch` with `clusterkit.image`: every node runs its share inside the image.

Each of three namespace nodes has a Docker engine of its own, started in the node's network
namespace (tests/support/node_docker.py), so `--network host` means the node's network as on
a real machine. They all hold one image with python and torch made from this machine's
files (tests/support/job_image.py), whose `io.clusterkit.run-args` label carries the flags
the job must run with. The launch goes through the real check (its image stage reads the
label), `docker run` on every node over SSH, and gloo between the containers.

After every test no container may remain in any engine and no process of the job on any node.
"""

from __future__ import annotations

import importlib.metadata
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import job_image, node_docker
from tests.support.docker_env import DockerUnavailable
from tests.support.netcluster import NetCluster, parallel, process_exe
from tests.support.node_docker import NodeEngine

pytestmark = pytest.mark.docker

SUPPORT = Path(__file__).resolve().parents[1] / "support"
NODES = 3
ENGINE_DAEMONS = {node_docker.DOCKERD, node_docker.CONTAINERD}


@pytest.fixture(scope="module")
def image() -> job_image.JobImage:
    if reason := node_docker.unavailable_reason():
        pytest.skip(f"no Docker: {reason}")
    try:
        return job_image.ensure_job_image()
    except importlib.metadata.PackageNotFoundError as missing:
        pytest.skip(f"the image is made of this interpreter's torch: {missing} not installed")


@pytest.fixture(scope="module")
def engines(netcluster: NetCluster, image: job_image.JobImage) -> Iterator[list[NodeEngine]]:
    """An engine in each of the first three nodes, each holding the image."""
    try:
        started = node_docker.start_engines(netcluster, netcluster.nodes[:NODES])
    except DockerUnavailable as reason:
        pytest.skip(f"no Docker: {reason}")
    try:
        parallel(lambda engine: job_image.load(image, engine.docker_host), started)
        yield started
    finally:
        node_docker.stop_engines(netcluster, started)


@pytest.fixture
def nodes(cluster: NetCluster, engines: list[NodeEngine]) -> NetCluster:
    """The healthy cluster with CPU-only nodes: no nvidia-smi, so no `--gpus all`."""
    for node in cluster.nodes[:NODES]:
        node.set_gpus(mode="absent")
    return cluster


def inventory(
    cluster: NetCluster, tmp_path: Path, image: job_image.JobImage, **more: object
) -> Path:
    return cluster.inventory(
        tmp_path / "inventory.yaml",
        nodes=cluster.nodes[:NODES],
        clusterkit={"image": image.reference, **more},
    )


def launch_argv(path: Path, *options: str, job: tuple[str, ...] = ()) -> list[str]:
    return [
        sys.executable, "-m", "clusterkit", "launch", str(path), "--skip", "bench",
        "--workdir", str(SUPPORT), *options, "--", "ddp_job.py", *job,
    ]  # fmt: skip


def job_processes(cluster: NetCluster) -> dict[str, list[str]]:
    """What runs on each node besides sshd and its own Docker engine."""
    left = {
        node.name: [p.command for p in node.processes() if process_exe(p.pid) not in ENGINE_DAEMONS]
        for node in cluster.nodes[:NODES]
    }
    return {name: commands for name, commands in left.items() if commands}


def wait_until_clean(
    cluster: NetCluster, engines: list[NodeEngine], run_id: str, seconds: float = 30
) -> None:
    """No container in any engine, no job process on any node, no run folder of this run."""
    end = time.monotonic() + seconds
    while True:
        containers = {e.node.name: e.containers() for e in engines if e.containers()}
        processes = job_processes(cluster)
        folders = sorted(Path("/tmp").glob(f"clusterkit-launch-{run_id}-*"))
        if not (containers or processes or folders) or time.monotonic() > end:
            break
        time.sleep(0.2)
    assert containers == {}
    assert processes == {}
    assert folders == []


def run_id_of(stderr: str) -> str:
    found = re.search(r"launching run ([0-9a-f]+) on", stderr)
    assert found, stderr[-2000:]
    return found[1]


def test_the_job_runs_in_the_image_on_every_node_as_one_job(
    nodes: NetCluster, engines: list[NodeEngine], image: job_image.JobImage, tmp_path: Path
) -> None:
    done = subprocess.run(
        launch_argv(inventory(nodes, tmp_path, image), job=("--steps", "3")),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "check passed" in done.stderr
    master = nodes.nodes[0].address
    shm = 1 << 30  # --shm-size 1g, from the image's run-args label
    for rank, node in enumerate(nodes.nodes[:NODES]):
        joined = (
            f"{node.name}/{rank}: joined rank={rank} world={NODES} master={master}:29500 "
            f"node_rank={rank} ifname=eth0"
        )
        assert joined in done.stdout, done.stdout[-3000:]
        assert f"{node.name}/{rank}: where container=True user=0:0 shm={shm}" in done.stdout
        assert f"{node.name}/{rank}: done rank={rank} sum_of_ranks=3" in done.stdout
    assert "job succeeded" in done.stderr
    wait_until_clean(nodes, engines, run_id_of(done.stderr))


def test_ctrl_c_leaves_no_container_on_any_node(
    nodes: NetCluster, engines: list[NodeEngine], image: job_image.JobImage, tmp_path: Path
) -> None:
    argv = launch_argv(
        inventory(nodes, tmp_path, image, image_run_args=list(image.run_args)),
        "--no-check",
        job=("--steps", "100000", "--step-seconds", "0.1"),
    )
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert process.stdout is not None
    seen: set[str] = set()
    for line in process.stdout:  # every rank trains before the interrupt
        if re.match(r"node\d/\d: step ", line):
            seen.add(line.split(":", 1)[0])
        if len(seen) == NODES:
            break
    assert seen == {"node1/0", "node2/1", "node3/2"}
    running = {e.node.name: e.containers() for e in engines}
    for index, (name, containers) in enumerate(sorted(running.items())):
        assert len(containers) == 1 and containers[0].endswith(f"-n{index}"), running
        assert containers[0].startswith("clusterkit-launch-"), (name, containers)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=90)
    assert process.returncode == 130, stderr[-2000:]
    assert "clusterkit: interrupted" in stderr
    wait_until_clean(nodes, engines, run_id_of(stderr))


def test_ctrl_c_while_the_engines_create_the_containers_leaves_none(
    nodes: NetCluster, engines: list[NodeEngine], image: job_image.JobImage, tmp_path: Path
) -> None:
    """Interrupted as soon as `docker run` starts on a node: a CLI killed while its engine
    still creates the container would leave it created, never started, never removed."""
    argv = launch_argv(
        inventory(nodes, tmp_path, image, image_run_args=list(image.run_args)),
        "--no-check",
        job=("--steps", "100000"),
    )
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    end = time.monotonic() + 120
    while not any(
        p.argv[:2] == ("docker", "run") for node in nodes.nodes[:NODES] for p in node.processes()
    ):
        assert process.poll() is None and time.monotonic() < end, "docker run never started"
        time.sleep(0.01)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=90)
    assert process.returncode == 130, stderr[-2000:]
    wait_until_clean(nodes, engines, run_id_of(stderr))


def test_a_crashing_rank_is_named_and_no_container_outlives_the_job(
    nodes: NetCluster, engines: list[NodeEngine], image: job_image.JobImage, tmp_path: Path
) -> None:
    done = subprocess.run(
        launch_argv(
            inventory(nodes, tmp_path, image, image_run_args=list(image.run_args)),
            "--no-check",
            job=("--signal-rank", "2", "--signal-name", "SEGV", "--steps", "100000",
                 "--step-seconds", "0.1"),
        ),
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 128 + signal.SIGSEGV, done.stderr[-3000:]
    assert "rank 2 on node3 was killed by SIGSEGV" in done.stderr
    assert "done rank=" not in done.stdout
    wait_until_clean(nodes, engines, run_id_of(done.stderr))
