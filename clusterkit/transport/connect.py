"""Open one connection per host, in parallel and bounded, and keep them for every stage."""

from __future__ import annotations

import logging
import os
import select
import shlex
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TextIO

import paramiko

from clusterkit.errors import TransportError
from clusterkit.inventory.model import Host, Inventory
from clusterkit.transport.base import Deadline, Transport
from clusterkit.transport.endpoint import (
    ConnectOptions,
    Endpoint,
    load_ssh_config,
    resolve_endpoint,
)
from clusterkit.transport.fdlimit import (
    PROXY_DESCRIPTORS,
    descriptors_needed,
    ensure_descriptors,
    host_descriptors,
)
from clusterkit.transport.hostkeys import HostKeyVerifier
from clusterkit.transport.local import LocalTransport
from clusterkit.transport.pool import parallel
from clusterkit.transport.ssh import SSHTransport, open_client

log = logging.getLogger(__name__)


@dataclass
class Connections:
    """The connected hosts (in inventory order) and why the others could not be reached."""

    transports: dict[str, Transport] = field(default_factory=dict)
    failures: dict[str, TransportError] = field(default_factory=dict)
    # host -> what known_hosts disagreed with, for keys accepted only because checking is off
    key_notices: dict[str, str] = field(default_factory=dict)

    def cancel(self) -> None:
        """Ctrl-C: make every running remote command kill its process group and return."""
        for transport in self.transports.values():
            cancel = getattr(transport, "cancel", None)
            if cancel is not None:
                cancel()

    def close(self) -> None:
        for transport in self.transports.values():
            transport.close()


def connect_host(host: Host, options: ConnectOptions, config: paramiko.SSHConfig) -> Transport:
    """Connect to one host (through its jump hosts), or raise a classified TransportError."""
    if host.is_local and not host.problem:
        environ = dict(options.environ) if options.environ is not None else None
        return LocalTransport(host.name, env=environ)
    endpoint = resolve_endpoint(host, options, config)  # refuses a host with a problem
    deadline = Deadline.after(endpoint.timeout)
    hops: list[paramiko.SSHClient] = []
    sock: paramiko.ProxyCommand | paramiko.Channel | None = None
    try:
        sock = _proxy_command(endpoint) if endpoint.proxy_command else None
        for hop in endpoint.jumps:
            hops.append(_open_hop(hop, deadline, sock, options.warnings))
            sock = _tunnel(hops[-1], hop, _next(endpoint, hop), deadline)
        client = open_client(endpoint, _verifier(endpoint, options.warnings), deadline, sock)
    except BaseException:
        for opened in reversed(hops):
            opened.close()
        if isinstance(sock, paramiko.ProxyCommand):
            sock.close()  # kills the command: nothing outlives a failed connect
        raise
    return SSHTransport(host.name, client, hops)


def _open_hop(
    hop: Endpoint,
    deadline: Deadline,
    sock: paramiko.ProxyCommand | paramiko.Channel | None,
    warnings: TextIO | None,
) -> paramiko.SSHClient:
    """Connect to a jump host. One that does not resolve or has no route is the bastion's
    problem: the hint names it and where ProxyJump is set, not the node's ansible_host."""
    try:
        return open_client(hop, _verifier(hop, warnings), deadline, sock)
    except TransportError as error:
        if error.kind != "unreachable":
            raise
        raise TransportError(
            error.host,
            error.kind,
            error.detail,  # the host reads "node (via bastion)" already
            hint=f"check the ProxyJump host {hop.address} (ansible_ssh_common_args -J or "
            "ProxyJump, or its HostName in ~/.ssh/config) and that this machine can reach it",
        ) from None


class _PolledProxyCommand(paramiko.ProxyCommand):
    """paramiko's ProxyCommand, read with poll instead of select: on a large cluster its
    pipe's descriptor number passes select's limit of 1024 and every read would fail."""

    def recv(self, size: int) -> bytes:
        buffer = b""
        stdout = self.process.stdout
        assert stdout is not None
        poller = select.poll()
        poller.register(stdout, select.POLLIN)
        start = time.monotonic()
        try:
            while len(buffer) < size:
                wait = None
                if self.timeout is not None:
                    left = self.timeout - (time.monotonic() - start)
                    if left <= 0:
                        if buffer:
                            return buffer  # a partial read, as paramiko's own returns
                        raise TimeoutError()
                    wait = max(1, int(left * 1000))
                if poller.poll(wait):
                    chunk = os.read(stdout.fileno(), size - len(buffer))
                    if not chunk:
                        return buffer  # the command exited: end of stream
                    buffer += chunk
            return buffer
        except TimeoutError:
            raise
        except OSError as error:
            raise paramiko.ProxyCommandFailure(
                " ".join(self.cmd), error.strerror or str(error)
            ) from None


def _descriptors(host: Host, options: ConnectOptions, config: paramiko.SSHConfig) -> int:
    """What the host will hold open here (see fdlimit): a local host, a command's pipes."""
    if host.is_local and not host.problem:
        return PROXY_DESCRIPTORS
    try:
        endpoint = resolve_endpoint(host, options, config)
    except TransportError:
        return 0  # refused in connect_host, never connected
    return host_descriptors(1 + len(endpoint.jumps), bool(endpoint.proxy_command))


def _proxy_command(endpoint: Endpoint) -> paramiko.ProxyCommand:
    """Start the ProxyCommand (no shell: its argv was expanded word by word)."""
    try:
        return _PolledProxyCommand(shlex.join(endpoint.proxy_command))
    except (OSError, paramiko.SSHException) as error:
        raise TransportError(
            endpoint.host,
            "proxy",
            f"cannot start ProxyCommand {shlex.join(endpoint.proxy_command)!r}: {error}",
            hint="check the command in ansible_ssh_common_args or ~/.ssh/config",
        ) from None


def _next(endpoint: Endpoint, hop: Endpoint) -> Endpoint:
    index = endpoint.jumps.index(hop)
    return endpoint.jumps[index + 1] if index + 1 < len(endpoint.jumps) else endpoint


def _tunnel(
    client: paramiko.SSHClient, hop: Endpoint, target: Endpoint, deadline: Deadline
) -> paramiko.Channel:
    transport = client.get_transport()
    assert transport is not None
    try:
        return transport.open_channel(
            "direct-tcpip",
            (target.address, target.port),
            ("127.0.0.1", 0),
            timeout=max(0.1, deadline.remaining()),
        )
    except (paramiko.SSHException, OSError, EOFError) as error:
        raise TransportError(
            target.host,
            "proxy",
            f"jump host {hop.address} could not reach {target.address}:{target.port}: {error}",
            hint="check ProxyJump and that the jump host can reach the node",
        ) from None


_verifiers: dict[tuple[str, tuple[str, ...]], HostKeyVerifier] = {}
_verifiers_lock = threading.Lock()


def _verifier(endpoint: Endpoint, warnings: TextIO | None) -> HostKeyVerifier:
    """One verifier per (policy, files): known_hosts is read once per run, not per host.
    Hosts connect in parallel: without the lock two of them could each make one, and the
    notices (a changed key under policy off) of the one replaced would be lost."""
    key = (endpoint.policy, endpoint.known_hosts)
    with _verifiers_lock:
        verifier = _verifiers.get(key)
        if verifier is None:
            verifier = _verifiers[key] = HostKeyVerifier(
                endpoint.policy, list(endpoint.known_hosts), warnings
            )
        return verifier


def connect_all(
    inventory: Inventory,
    options: ConnectOptions,
    *,
    on_done: Callable[[str, TransportError | None], None] | None = None,
) -> Connections:
    """Connect to every host (at most options.forks at once); first make sure this process
    may open the descriptors they will hold (UsageError, nothing connected, if not)."""
    _verifiers.clear()
    config = load_ssh_config(options.ssh_config, options.environ)
    need = descriptors_needed(_descriptors(host, options, config) for host in inventory.hosts)
    ensure_descriptors(len(inventory.hosts), need)

    def attempt(host: Host) -> Transport:
        started = time.monotonic()
        try:
            transport = connect_host(host, options, config)
        except TransportError as error:
            log.info("%s: not connected (%s): %s", host.name, error.kind, error.detail)
            if on_done:
                on_done(host.name, error)
            raise
        log.info("%s: connected in %.2f s", host.name, time.monotonic() - started)
        if on_done:
            on_done(host.name, None)
        return transport

    connections = Connections()
    results = parallel(attempt, inventory.hosts, workers=options.forks)
    for host, result in zip(inventory.hosts, results):
        if isinstance(result, TransportError):
            connections.failures[host.name] = result
        elif isinstance(result, BaseException):
            connections.failures[host.name] = TransportError(
                host.name, "protocol", f"connection failed: {result}"
            )
        else:
            connections.transports[host.name] = result
    for verifier in _verifiers.values():
        for host_name, what in verifier.notices:
            connections.key_notices.setdefault(host_name, what)
    return connections


@contextmanager
def connected(
    inventory: Inventory,
    options: ConnectOptions,
    *,
    on_done: Callable[[str, TransportError | None], None] | None = None,
) -> Iterator[Connections]:
    connections = connect_all(inventory, options, on_done=on_done)
    try:
        yield connections
    except KeyboardInterrupt:
        connections.cancel()
        raise
    finally:
        connections.close()
