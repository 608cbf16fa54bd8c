"""`clusterkit provision` for real: ansible-playbook over SSH against two Docker containers
with their own filesystems, `clusterkit check` before and after, and a second run that
changes nothing. GPU roles run in --check mode and must skip these GPU-less nodes.

Limits of this machine the assertions respect: CAP_SYS_RESOURCE is outside its bounding set,
so no container may raise memlock above the engine's 8 MiB hard limit: containers start with
a 64 KiB soft limit and the limits role is run with limits_memlock=8192 (KiB); the rise
64 KiB -> 8 MiB in a new SSH session proves limits.d reaches PAM sessions, while "unlimited"
(the role's default) stays out of reach here. The clock belongs to the host kernel, which a
container's chronyd (-x) never adjusts: the time role is shown to install and start chronyd.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.container_nodes import ContainerCluster, container_cluster
from tests.support.docker_env import DockerUnavailable

pytestmark = pytest.mark.docker

TAGS = "limits,shm,hosts,firewall,time"
MEMLOCK_KIB = 8192


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ContainerCluster]:
    if shutil.which("ansible-playbook") is None:
        pytest.skip("ansible-playbook not installed (pip install ansible-core)")
    workdir = tmp_path_factory.mktemp("provision")
    try:
        with container_cluster(
            workdir, names=("pnode1", "pnode2"), ulimits=("memlock=65536:8388608",)
        ) as nodes:
            yield nodes
    except DockerUnavailable as error:
        pytest.skip(str(error))


@pytest.fixture(scope="module")
def inventory(cluster: ContainerCluster) -> str:
    path = cluster.workdir / "inventory.yaml"
    return str(cluster.write_inventory(path, {"master": "pnode1", "interface": "eth0"}))


def _run(argv: list[str], timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


def _check(inventory: str) -> dict[str, dict[str, Any]]:
    done = _run(
        ["clusterkit", "check", inventory, "--format", "json", "--skip", "network,bench,image"],
        120,
    )
    assert done.returncode in (0, 1), done.stderr
    return {finding["id"]: finding for finding in json.loads(done.stdout)["findings"]}


def _provision(inventory: str, *extra: str) -> tuple[str, dict[str, dict[str, int]]]:
    done = _run(["clusterkit", "provision", inventory, *extra], 300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    recap = {
        host: {key: int(value) for key, value in re.findall(r"(\w+)=(\d+)", counts)}
        for host, counts in re.findall(r"^(\S+)\s+:\s+(ok=.*)$", done.stdout, re.MULTILINE)
    }
    assert set(recap) == {"pnode1", "pnode2"}, done.stdout[-2000:]
    return done.stdout, recap


def test_provision_fixes_findings_and_is_idempotent(
    cluster: ContainerCluster, inventory: str
) -> None:
    node1, node2 = cluster.nodes
    before = _check(inventory)
    assert before["env.shm"]["status"] == "warn"
    assert before["env.memlock"]["status"] == "warn"
    assert "64 KiB" in before["env.memlock"]["message"]
    assert before["env.shm"]["remedy"].endswith("--tags shm --limit pnode1,pnode2")
    assert "pnode2" not in node1.exec("cat", "/etc/hosts")  # only Docker's DNS knows it yet

    provision_args = ("--tags", TAGS, "-e", f"limits_memlock={MEMLOCK_KIB}")
    _, first = _provision(inventory, *provision_args)
    assert all(counts["changed"] > 0 and counts["failed"] == 0 for counts in first.values())

    after = _check(inventory)
    assert after["env.shm"]["status"] == "ok"
    assert f"{MEMLOCK_KIB} KiB" in after["env.memlock"]["message"]  # raised to the hard cap
    for node in cluster.nodes:
        # hosts: every node resolves every node and the master to its fabric address
        hosts_file = node.exec("cat", "/etc/hosts")
        for peer in cluster.nodes:
            assert f"{peer.address} {peer.name}" in hosts_file
            assert node.exec("getent", "hosts", peer.name).split()[0] == peer.address
        # firewall: source-limited ACCEPTs on eth0, nothing opened to everyone
        rules = node.exec("iptables", "-S", "INPUT")
        for peer in cluster.nodes:
            assert f"-s {peer.address}/32 -i eth0 -p tcp" in rules
        accepts = [line for line in rules.splitlines() if "-j ACCEPT" in line]
        assert accepts and all(" -s " in line for line in accepts), rules
        # time: chrony installed and running
        assert node.exec("pgrep", "-x", "chronyd").strip()
        # shm: boot-time size and RemoveIPC=no
        assert "size=50%" in node.exec("grep", "/dev/shm", "/etc/fstab")
        assert "RemoveIPC=no" in node.exec("cat", "/etc/systemd/logind.conf.d/90-clusterkit.conf")
    rendezvous = node1.exec("iptables", "-S", "INPUT")
    assert "--dports 29500,29400" in rendezvous  # the master only
    assert "--dports" not in node2.exec("iptables", "-S", "INPUT")

    _, second = _provision(inventory, *provision_args)
    assert all(counts["changed"] == 0 and counts["failed"] == 0 for counts in second.values())


def test_gpu_roles_skip_nodes_without_nvidia_devices(
    cluster: ContainerCluster, inventory: str
) -> None:
    output, recap = _provision(inventory, "--tags", "nvidia,container-toolkit", "--check")
    assert all(counts["changed"] == 0 for counts in recap.values())
    for task in ("nvidia : Install the NVIDIA driver", "container_toolkit : Install the toolkit"):
        block = output.split(f"TASK [{task}]", 1)[1].split("TASK [", 1)[0]
        assert "skipping: [pnode1]" in block and "skipping: [pnode2]" in block
    assert "no NVIDIA GPU on pnode1: driver role skipped" in output
