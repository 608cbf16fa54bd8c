"""A Docker engine inside each node of a NetCluster, so `docker run --network host` on a node
lands in that node's network, as on a real machine.

Nodes share this machine's one dockerd, whose containers live in the root network namespace:
a job run there would not see the node's address or interface. So each node gets a dockerd
of its own, started inside the node's network namespace only (`nsenter --net`: the mounts
stay this machine's, which dockerd needs for /sys/fs/cgroup), with its own data root, exec
root, pidfile and unix socket, no bridge and no iptables rules (it must not fight the
machine's engine over docker0 or the FORWARD chain). The node's sessions reach it through
DOCKER_HOST (NetCluster's per-node environment).

    engines = start_engines(cluster)      # one per node, in parallel
    ...
    stop_engines(cluster, engines)        # containers, daemons, mounts and folders gone
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from tests.support.docker_env import DockerUnavailable, _engine_answers, _tail
from tests.support.netcluster import NetCluster, Node, parallel

DOCKERD = "/usr/sbin/dockerd"
CONTAINERD = "/usr/bin/containerd"
START_SECONDS = 90.0
STOP_SECONDS = 30.0


@dataclass
class NodeEngine:
    """One node's dockerd: `docker_host` is what the node's DOCKER_HOST says."""

    node: Node
    root: Path
    exec_root: Path
    process: subprocess.Popen[bytes]

    @property
    def socket(self) -> Path:
        return self.root / "docker.sock"

    @property
    def docker_host(self) -> str:
        return f"unix://{self.socket}"

    def docker(self, *argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """The docker CLI against this engine, from this machine."""
        return subprocess.run(
            ["docker", "-H", self.docker_host, *argv],
            capture_output=True, text=True, timeout=timeout, check=False,
        )  # fmt: skip

    def containers(self) -> list[str]:
        """Names of every container the engine holds, running or not."""
        done = self.docker("ps", "-a", "--format", "{{.Names}}")
        assert done.returncode == 0, done.stderr
        return sorted(done.stdout.split())


def unavailable_reason() -> str | None:
    for tool in (DOCKERD, CONTAINERD, "docker", "nsenter", "ldd"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install docker.io util-linux)"
    return None


def start_engine(node: Node) -> NodeEngine:
    """dockerd in the node's network namespace; returns once it answers."""
    if reason := unavailable_reason():
        raise DockerUnavailable(reason)
    root = node.dir / "docker"
    exec_root = root / "x"  # containerd's socket lives under it: unix paths are short
    if len(str(exec_root / "containerd" / "containerd.sock")) > 100:
        raise RuntimeError(f"{exec_root}: too long a path for containerd's socket")
    root.mkdir(exist_ok=True)
    engine_log = node.dir / "dockerd.log"
    # The node's network, and its /etc/hosts (which `--network host` containers copy) in a
    # mount namespace of the engine's own; /sys stays this machine's, with its cgroups.
    argv = [
        "nsenter", f"--net=/run/netns/{node.netns}", "--",
        "unshare", "--mount", "--propagation", "private", "--",
        "sh", "-c", 'mount --bind "$0" /etc/hosts && exec "$@"', str(node.hosts_path),
        DOCKERD,
        "--host", f"unix://{root / 'docker.sock'}",
        "--data-root", str(root / "data"),
        "--exec-root", str(exec_root),
        "--pidfile", str(root / "dockerd.pid"),
        "--bridge", "none",
        "--iptables=false",
        "--ip6tables=false",
    ]  # fmt: skip
    with open(engine_log, "ab") as log:
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True
        )
    engine = NodeEngine(node, root, exec_root, process)
    deadline = time.monotonic() + START_SECONDS
    while not _engine_answers(engine.docker_host):
        if process.poll() is not None or time.monotonic() > deadline:
            stop_engine(engine)
            raise RuntimeError(f"dockerd in {node.name} did not answer: {_tail(engine_log)}")
        time.sleep(0.2)
    return engine


def start_engines(cluster: NetCluster, nodes: list[Node] | None = None) -> list[NodeEngine]:
    """An engine in every node (or those given), DOCKER_HOST set for the nodes' sessions.
    The cluster's reset leaves the daemons running while they are registered here."""
    members = nodes if nodes is not None else cluster.nodes
    engines: list[NodeEngine] = []
    try:
        for engine in parallel(start_engine, members):
            engines.append(engine)
    except BaseException:
        stop_engines(cluster, engines)
        raise
    cluster.daemons |= {DOCKERD, CONTAINERD}
    for engine in engines:
        engine.node.set_environment(DOCKER_HOST=engine.docker_host)
    return engines


def stop_engine(engine: NodeEngine) -> None:
    """Containers first (dockerd stops them on TERM), then the daemon. Its mounts live in
    its own mount namespace and end with it."""
    process = engine.process
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(STOP_SECONDS)
    shutil.rmtree(engine.root, ignore_errors=True)


def stop_engines(cluster: NetCluster, engines: list[NodeEngine]) -> None:
    for engine in engines:
        engine.node.set_environment()
    parallel(stop_engine, engines)
    cluster.daemons -= {DOCKERD, CONTAINERD}
