"""The resolved inventory: hosts with their connection parameters and cluster settings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Host:
    """One inventory host, connection variables already resolved with Ansible precedence."""

    name: str  # inventory name (what reports show)
    address: str  # ansible_host, default: name
    port: int | None = None  # ansible_port; None = ssh default (22 or ~/.ssh/config)
    user: str | None = None  # ansible_user
    key_file: str | None = None  # ansible_ssh_private_key_file / ansible_private_key_file
    proxy_jump: str | None = None  # from ansible_ssh_common_args/extra_args -J / ProxyJump
    strict_host_key_checking: str | None = None  # from -o StrictHostKeyChecking=..., as written
    user_known_hosts_file: str | None = None  # from -o UserKnownHostsFile=...
    connection: str = "ssh"  # ansible_connection: "ssh" (also paramiko/smart) or "local"
    python_interpreter: str | None = None  # ansible_python_interpreter
    ssh_timeout: float | None = None  # ansible_ssh_timeout / ansible_timeout
    groups: tuple[str, ...] = ()  # every group the host belongs to, "all" included
    vars: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    @property
    def is_local(self) -> bool:
        return self.connection == "local"


@dataclass(frozen=True)
class Expectations:
    """Optional pins (`clusterkit.expect`); parity is checked with or without them."""

    gpus_per_node: int | None = None
    driver: str | None = None  # version constraint, e.g. ">=550" or "550.54.15"
    cuda: str | None = None
    torch: str | None = None
    nccl: str | None = None
    python: str | None = None


@dataclass(frozen=True)
class ClusterSettings:
    """clusterkit's own settings, from the `clusterkit` variable (Ansible ignores it)."""

    master: str | None = None  # inventory host name or address; None = first host
    master_port: int = 29500
    rdzv_port: int = 29400
    interface: str | None = None  # what NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME will name
    expect: Expectations = field(default_factory=Expectations)
    image: str | None = None  # cluster image by tag or digest
    raw: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass(frozen=True)
class Inventory:
    path: str | None  # None for the embedded local default
    hosts: tuple[Host, ...]
    settings: ClusterSettings = field(default_factory=ClusterSettings)
    # What Ansible would only warn about (skipped keys, non-group entries), "file:line: text".
    warnings: tuple[str, ...] = field(default=(), compare=False)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    @property
    def master(self) -> Host:
        """The master host: settings.master when it names an inventory host, else the first."""
        wanted = self.settings.master
        for host in self.hosts:
            if wanted in (host.name, host.address):
                return host
        return self.hosts[0]
