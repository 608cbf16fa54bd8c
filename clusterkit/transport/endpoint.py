"""Where and how to reach a host: inventory values first, then ~/.ssh/config, then defaults.

paramiko only parses ssh_config; we apply HostName, User, Port, IdentityFile, ProxyJump,
ProxyCommand, StrictHostKeyChecking and UserKnownHostsFile ourselves, like OpenSSH would for
`ssh HOST`. A ProxyCommand (from the inventory's ssh arguments or the config file) gets its
`%h %p %r %n %%` tokens from the final address, port and user, each substituted inside one
argument word (it runs without a shell, as paramiko runs it). Names reach the config lookup
(whose `Match exec` runs a shell) only after the OpenSSH name check.
"""

from __future__ import annotations

import getpass
import os
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TextIO

import paramiko

from clusterkit.errors import TransportError, UsageError
from clusterkit.inventory.model import Host
from clusterkit.inventory.names import hostname_problem, username_problem
from clusterkit.keyfiles import KeyFileProblem, read_small_file
from clusterkit.transport.hostkeys import DEFAULT_KNOWN_HOSTS, policy_from_openssh

DEFAULT_CONNECT_TIMEOUT = 10.0
# The largest SSH config read: real ones are a few KiB; this bounds a /dev/zero-like file.
MAX_SSH_CONFIG_BYTES = 1024 * 1024


@dataclass(frozen=True)
class ConnectOptions:
    """Command-line settings that apply to every host (they win over the inventory)."""

    host_key_policy: str | None = None
    known_hosts: tuple[str, ...] = ()
    ssh_config: str | None = None  # None: ~/.ssh/config when it exists
    connect_timeout: float | None = None
    forks: int | None = None  # hosts connected at once; None: all of them
    # This machine's side of the run: the variables a local host's commands get, and where
    # host key warnings go (None: this process's own).
    environ: Mapping[str, str] | None = field(default=None, compare=False, repr=False)
    warnings: TextIO | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Endpoint:
    host: str  # inventory name, for messages
    address: str
    port: int
    user: str
    key_files: tuple[str, ...] = ()
    jumps: tuple[Endpoint, ...] = ()  # ProxyJump hops, outermost first
    proxy_command: tuple[str, ...] = ()  # ProxyCommand argv, tokens expanded (no jumps then)
    policy: str = "strict"
    known_hosts: tuple[str, ...] = field(default=(DEFAULT_KNOWN_HOSTS,))
    timeout: float = DEFAULT_CONNECT_TIMEOUT
    password: str | None = field(default=None, repr=False)  # the target's only, never a hop's

    @property
    def where(self) -> str:
        return f"{self.user}@{self.address}:{self.port}"


class _SSHConfig(paramiko.SSHConfig):
    """paramiko's parser, leaving ProxyCommand's tokens for us: paramiko would fill %p and %r
    from the config file alone, while the inventory's port and user win, as in OpenSSH."""

    def _tokenize(self, config: dict[str, Any], target_hostname: str, key: str, value: str) -> str:
        if key == "proxycommand":
            return value
        tokenized: str = super()._tokenize(  # type: ignore[misc]  # not in paramiko's stub
            config, target_hostname, key, value
        )
        return tokenized


def expand_home(path: str, environ: Mapping[str, str] | None = None) -> str:
    """`~/...` in the run's HOME (its Environment's), else in this process's: a run with a
    HOME of its own reads and records keys there, never in someone else's ~/.ssh."""
    home = (environ or {}).get("HOME")
    if home and (path == "~" or path.startswith("~/")):
        return home + path[1:]
    return os.path.expanduser(path)


def load_ssh_config(
    path: str | None, environ: Mapping[str, str] | None = None
) -> paramiko.SSHConfig:
    """Read the OpenSSH client config; a missing default file is an empty config, and so is
    /dev/null (`-F /dev/null`). Anything else must be a regular file, read without blocking:
    a FIFO or device is one line and exit 2, never a wait (clusterkit/keyfiles.py)."""
    if path is None:
        default = expand_home("~/.ssh/config", environ)
        if not os.path.exists(default):
            return _SSHConfig()
        return _read_ssh_config(default, default)
    return _read_ssh_config(expand_home(path, environ), path)


def _read_ssh_config(path: str, shown: str) -> paramiko.SSHConfig:
    if os.path.realpath(path) == os.devnull:
        return _SSHConfig()
    try:
        text = read_small_file(path, MAX_SSH_CONFIG_BYTES, "an SSH config's")
    except KeyFileProblem as problem:
        raise UsageError(f"{shown}: cannot read SSH config: {problem}") from None
    return _SSHConfig.from_text(text)


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
    if host.problem:
        raise TransportError(
            host.name, "inventory", host.problem, hint="write the connection value itself"
        )
    _check_name(host.name, host.address, hostname_problem)
    entry = config.lookup(host.address)
    policy = (
        options.host_key_policy
        or policy_from_openssh(host.strict_host_key_checking)
        or policy_from_openssh(entry.get("stricthostkeychecking"))
        or "strict"
    )
    user_file = host.user_known_hosts_file or _first(entry.get("userknownhostsfile"))
    files = [user_file or DEFAULT_KNOWN_HOSTS, DEFAULT_KNOWN_HOSTS, *options.known_hosts]
    # the first is where accept-new records keys
    known = tuple(dict.fromkeys(expand_home(f, options.environ) for f in files))
    timeout = options.connect_timeout or host.ssh_timeout or _float(entry.get("connecttimeout"))
    keys = (host.key_file,) if host.key_file else tuple(entry.get("identityfile", ()))
    jump_spec, command = _proxy_settings(host, entry)
    jumps: tuple[Endpoint, ...] = ()
    if jump_spec and jump_spec.lower() != "none":
        jumps = tuple(
            _jump_endpoint(host.name, hop.strip(), options, config, policy, known, timeout)
            for hop in jump_spec.split(",")
        )
    address = entry.get("hostname", host.address)
    port = int(host.port or entry.get("port") or 22)
    user = host.user or entry.get("user") or getpass.getuser()
    proxy: tuple[str, ...] = ()
    if command and command.strip().lower() != "none" and not jumps:
        proxy = proxy_argv(host.name, command, address, port, user, host.address)
    return Endpoint(
        host=host.name,
        address=address,
        port=port,
        user=user,
        key_files=tuple(expand_home(k, options.environ) for k in keys),
        jumps=jumps,
        proxy_command=proxy,
        policy=policy,
        known_hosts=known,
        timeout=timeout or DEFAULT_CONNECT_TIMEOUT,
        password=host.password,
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
    _check_name(name, address, hostname_problem)
    if user:
        _check_name(name, user, username_problem)
    entry = config.lookup(address)
    return Endpoint(
        host=f"{name} (via {spec})",
        address=entry.get("hostname", address),
        port=int(port or entry.get("port") or 22),
        user=user or entry.get("user") or getpass.getuser(),
        key_files=tuple(expand_home(k, options.environ) for k in entry.get("identityfile", ())),
        policy=policy,
        known_hosts=known,
        timeout=timeout or DEFAULT_CONNECT_TIMEOUT,
    )


def _proxy_settings(host: Host, entry: paramiko.SSHConfigDict) -> tuple[str | None, str | None]:
    """(ProxyJump, ProxyCommand): the inventory's (Ansible's ssh command line) beat the config
    file's, and within one source ProxyJump wins over ProxyCommand, as they exclude each other."""
    if host.proxy_jump:
        return host.proxy_jump, None
    if host.proxy_command:
        return None, host.proxy_command
    jump = entry.get("proxyjump")
    return (jump, None) if jump else (None, entry.get("proxycommand"))


def _check_name(host: str, value: str, problem_of: Callable[[str], str | None]) -> None:
    """The last guard before a name reaches ssh_config (Match exec) or a ProxyCommand."""
    problem = problem_of(value)
    if problem:
        raise TransportError(host, "inventory", f"{value!r} {problem}; OpenSSH refuses it")


def proxy_argv(
    host: str, command: str, address: str, port: int, user: str, original: str
) -> tuple[str, ...]:
    """ProxyCommand as an argument list, `%h %p %r %n %%` expanded inside each word."""
    try:
        words = shlex.split(command)
    except ValueError as error:
        raise TransportError(host, "proxy", f"ProxyCommand {command!r}: {error}") from None
    if not words:
        raise TransportError(host, "proxy", "ProxyCommand is empty")
    tokens = {"h": address, "p": str(port), "r": user, "n": original, "%": "%"}

    def expand(word: str) -> str:
        out, index = [], 0
        while index < len(word):
            char = word[index]
            if char == "%" and index + 1 < len(word) and word[index + 1] in tokens:
                out.append(tokens[word[index + 1]])
                index += 2
            else:
                out.append(char)
                index += 1
        return os.path.expanduser("".join(out))

    return tuple(expand(word) for word in words)


def _first(value: str | list[str] | None) -> str | None:
    if isinstance(value, list):
        return value[0] if value else None
    return value.split()[0] if value else None


def _float(value: str | None) -> float | None:
    try:
        return float(value) if value else None
    except ValueError:
        return None
