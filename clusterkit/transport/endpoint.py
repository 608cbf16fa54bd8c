"""Where and how to reach a host: inventory values first, then ~/.ssh/config, then defaults.

paramiko only parses ssh_config; we apply HostName, User, Port, IdentityFile, ProxyJump,
StrictHostKeyChecking and UserKnownHostsFile ourselves, like OpenSSH would for `ssh HOST`.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass, field
from pathlib import Path

import paramiko

from clusterkit.errors import UsageError
from clusterkit.inventory.model import Host
from clusterkit.transport.hostkeys import DEFAULT_KNOWN_HOSTS, policy_from_openssh

DEFAULT_CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class ConnectOptions:
    """Command-line settings that apply to every host (they win over the inventory)."""

    host_key_policy: str | None = None
    known_hosts: tuple[str, ...] = ()
    ssh_config: str | None = None  # None: ~/.ssh/config when it exists
    connect_timeout: float | None = None
    forks: int = 64


@dataclass(frozen=True)
class Endpoint:
    host: str  # inventory name, for messages
    address: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()
    jumps: tuple[Endpoint, ...] = ()  # ProxyJump hops, outermost first
    policy: str = "strict"
    known_hosts: tuple[str, ...] = field(default=(DEFAULT_KNOWN_HOSTS,))
    timeout: float = DEFAULT_CONNECT_TIMEOUT

    @property
    def where(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


def load_ssh_config(path: str | None) -> paramiko.SSHConfig:
    """Read the OpenSSH client config; a missing default file is an empty config."""
    if path is None:
        default = Path("~/.ssh/config").expanduser()
        if not default.is_file():
            return paramiko.SSHConfig()
        return paramiko.SSHConfig.from_path(str(default))
    try:
        return paramiko.SSHConfig.from_path(os.path.expanduser(path))
    except OSError as error:
        raise UsageError(f"{path}: cannot read SSH config: {error.strerror}") from None


def _split_user_host_port(spec: str) -> tuple[str | None, str, int | None]:
    """Parse a ProxyJump hop: [user@]host[:port], with [v6]:port."""
    user, _, rest = spec.rpartition("@")
    port: int | None = None
    if rest.startswith("["):
        address, _, tail = rest[1:].partition("]")
        if tail.startswith(":") and tail[1:].isdigit():
            port = int(tail[1:])
    else:
        address, sep, port_text = rest.partition(":")
        if sep and port_text.isdigit():
            port = int(port_text)
        elif sep:
            address = rest
    return user or None, address, port


def resolve_endpoint(host: Host, options: ConnectOptions, config: paramiko.SSHConfig) -> Endpoint:
    """Combine inventory variables, ssh_config and command-line options for one host."""
    entry = config.lookup(host.address)
    policy = (
        options.host_key_policy
        or policy_from_openssh(host.strict_host_key_checking)
        or policy_from_openssh(entry.get("stricthostkeychecking"))
        or "strict"
    )
    user_file = host.user_known_hosts_file or _first(entry.get("userknownhostsfile"))
    files = [user_file or DEFAULT_KNOWN_HOSTS, DEFAULT_KNOWN_HOSTS, *options.known_hosts]
    known = tuple(dict.fromkeys(files))  # the first is where accept-new records keys
    timeout = options.connect_timeout or host.ssh_timeout or _float(entry.get("connecttimeout"))
    keys = (host.key_file,) if host.key_file else tuple(entry.get("identityfile", ()))
    proxy = host.proxy_jump or entry.get("proxyjump")
    jumps: tuple[Endpoint, ...] = ()
    if proxy and proxy.lower() != "none":
        jumps = tuple(
            _jump_endpoint(host.name, hop.strip(), options, config, policy, known, timeout)
            for hop in proxy.split(",")
        )
    return Endpoint(
        host=host.name,
        address=entry.get("hostname", host.address),
        port=int(host.port or entry.get("port", 22)),
        user=host.user or entry.get("user") or getpass.getuser(),
        key_files=tuple(os.path.expanduser(k) for k in keys),
        jumps=jumps,
        policy=policy,
        known_hosts=known,
        timeout=timeout or DEFAULT_CONNECT_TIMEOUT,
    )


def _jump_endpoint(
    name: str,
    spec: str,
    options: ConnectOptions,
    config: paramiko.SSHConfig,
    policy: str,
    known: tuple[str, ...],
    timeout: float | None,
) -> Endpoint:
    user, address, port = _split_user_host_port(spec)
    entry = config.lookup(address)
    return Endpoint(
        host=f"{name} (via {spec})",
        address=entry.get("hostname", address),
        port=int(port or entry.get("port", 22)),
        user=user or entry.get("user") or getpass.getuser(),
        key_files=tuple(os.path.expanduser(k) for k in entry.get("identityfile", ())),
        policy=policy,
        known_hosts=known,
        timeout=timeout or DEFAULT_CONNECT_TIMEOUT,
    )


def _first(value: str | list[str] | None) -> str | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value.split()[0] if value else None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
