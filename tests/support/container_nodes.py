"""Docker containers that stand in for cluster nodes: each has its own filesystem, network
stack, hostname and sshd, so playbooks can change /etc, limits and firewalls for real without
touching this machine.

The node image is built once FROM the debootstrapped base (tests/support/docker_env.py) with
openssh-server, python3, iptables, sudo and procps. Each container makes fresh host keys at
start; the test's known_hosts file records them, so SSH stays strict. Containers get
NET_ADMIN (iptables) and SYS_ADMIN (remount /dev/shm), powers a real node's root has.
CAP_SYS_RESOURCE is not in this machine's bounding set: no container can raise a hard limit
above the engine's own (memlock 8 MiB here), so tests pick soft limits below it.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.support.docker_env import _locked, ensure_base_image, ensure_dockerd, image_exists

NODE_IMAGE = "clusterkit/sshd-node:bookworm-2"
LABEL = "clusterkit.test=container-nodes"
_DOCKERFILE = """\
FROM {base}
RUN apt-get update \\
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \\
      openssh-server python3 iptables sudo procps \\
 && rm -rf /var/lib/apt/lists/* \\
 && mkdir -p /run/sshd /root/.ssh && chmod 700 /root/.ssh \\
 && printf '%s\\n' 'PermitRootLogin prohibit-password' 'PasswordAuthentication no' \\
      'UsePAM yes' \\
      > /etc/ssh/sshd_config.d/clusterkit-test.conf
CMD ["/bin/sh", "-c", "rm -f /etc/ssh/ssh_host_* && ssh-keygen -A -q && exec /usr/sbin/sshd -D -e"]
"""


def _docker(*argv: str, timeout: float = 60, stdin: bytes | None = None) -> str:
    done = subprocess.run(
        ["docker", *argv], input=stdin, capture_output=True, timeout=timeout, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(
            f"docker {argv[0]} failed: {done.stderr.decode(errors='replace')[-800:]}"
        )
    return done.stdout.decode()


def ensure_node_image(wait: float = 600.0) -> str:
    """The sshd node image, built once (apt inside the build reaches the Debian mirror)."""
    base = ensure_base_image()
    if image_exists(NODE_IMAGE):
        return NODE_IMAGE
    with _locked("sshd-node-image", timeout=wait):
        if not image_exists(NODE_IMAGE):
            dockerfile = _DOCKERFILE.format(base=base).encode()
            _docker(
                "build", "--network", "host", "-t", NODE_IMAGE, "-", stdin=dockerfile, timeout=wait
            )
    return NODE_IMAGE


@dataclass
class ContainerNode:
    name: str  # inventory name
    container: str
    address: str

    def exec(self, *argv: str, timeout: float = 60) -> str:
        return _docker("exec", self.container, *argv, timeout=timeout)


@dataclass
class ContainerCluster:
    nodes: list[ContainerNode]
    network: str
    workdir: Path
    key: Path
    known_hosts: Path
    containers: list[str] = field(default_factory=list)

    def write_inventory(self, path: Path, settings: dict[str, Any] | None = None) -> Path:
        """An Ansible YAML inventory for these nodes: root over strict SSH, system python."""
        common = f"-o UserKnownHostsFile={self.known_hosts} -o StrictHostKeyChecking=yes"
        group_vars: dict[str, Any] = {
            "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.key),
            "ansible_ssh_common_args": common,
            "ansible_python_interpreter": "/usr/bin/python3",
        }
        if settings is not None:
            group_vars["clusterkit"] = settings
        document = {
            "all": {
                "vars": group_vars,
                "hosts": {node.name: {"ansible_host": node.address} for node in self.nodes},
            }
        }
        path.write_text(yaml.safe_dump(document, sort_keys=False))
        return path


def _wait_for_ssh(address: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            probe.settimeout(1.0)
            if probe.connect_ex((address, 22)) == 0:
                banner = b""
                with contextlib.suppress(OSError):
                    banner = probe.recv(64)
                if banner.startswith(b"SSH-"):
                    return
        time.sleep(0.2)
    raise TimeoutError(f"sshd on {address}:22 did not answer")


@contextlib.contextmanager
def container_cluster(
    workdir: Path,
    names: Sequence[str] = ("node1", "node2"),
    ulimits: Sequence[str] = (),
    wait: float = 60.0,
) -> Iterator[ContainerCluster]:
    """Start one container per name on a fresh user-defined network; remove all on exit.
    `ulimits` are docker --ulimit values (e.g. memlock=65536:8388608) for sshd and its sessions."""
    ensure_dockerd()
    image = ensure_node_image()
    run_id = uuid.uuid4().hex[:8]
    network = f"ck-nodes-{run_id}"
    key = workdir / "id_ed25519"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)],
        check=True,
        timeout=30,
        stdin=subprocess.DEVNULL,
    )
    authorized = workdir / "authorized_keys"
    authorized.write_text(Path(f"{key}.pub").read_text())
    authorized.chmod(0o600)
    cluster = ContainerCluster([], network, workdir, key, workdir / "known_hosts")
    _docker("network", "create", "--label", LABEL, network)
    try:
        for name in names:
            container = f"ck-{run_id}-{name}"
            cluster.containers.append(container)  # removed even if `run` fails midway
            _docker(
                "run", "-d", "--name", container, "--hostname", name, "--network", network,
                "--label", LABEL, "--cap-add", "NET_ADMIN", "--cap-add", "SYS_ADMIN",
                *(f"--ulimit={limit}" for limit in ulimits),
                "-v", f"{authorized}:/root/.ssh/authorized_keys:ro", image,
            )  # fmt: skip
            address = _docker(
                "inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                container,
            ).strip()  # fmt: skip
            cluster.nodes.append(ContainerNode(name, container, address))
        deadline = time.monotonic() + wait
        lines = []
        for node in cluster.nodes:
            _wait_for_ssh(node.address, deadline)
            public = node.exec("cat", "/etc/ssh/ssh_host_ed25519_key.pub").split()
            lines.append(f"{node.address} {public[0]} {public[1]}\n")
        cluster.known_hosts.write_text("".join(lines))
        yield cluster
    finally:
        for container in cluster.containers:
            with contextlib.suppress(Exception):
                _docker("rm", "-f", container, timeout=60)
        with contextlib.suppress(Exception):
            _docker("network", "rm", network, timeout=60)
