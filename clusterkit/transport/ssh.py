"""SSH transport on paramiko: one connection per host, every step bounded by a deadline."""

from __future__ import annotations

import errno
import logging
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import paramiko

from clusterkit.errors import TransportError
from clusterkit.transport.base import (
    DEFAULT_OUTPUT_CAP,
    CommandResult,
    Deadline,
    PumpedProcess,
    Transport,
    remote_command,
    split_pgid,
)
from clusterkit.transport.endpoint import Endpoint
from clusterkit.transport.hostkeys import HostKeyVerifier
from clusterkit.transport.keys import ReadKeysClient, read_keys
from clusterkit.transport.pool import register_cancellable
from clusterkit.transport.watchdog import WATCHDOG

log = logging.getLogger(__name__)

# Whether process group $g still has a member that is not a zombie. `kill -0` alone counts
# zombies, and members orphaned by the group's end wait for init to reap them (over a second
# where init is slow), which would hold every interrupt for the whole 2 s grace. Reading every
# /proc/*/stat costs time on a busy node, so it runs at three points only, not every 0.1 s.
_GROUP_LIVE = (
    "live() { [ -r /proc/self/stat ] || return 0; "
    "for f in /proc/[0-9]*/stat; do { read -r s < $f; } 2>/dev/null || continue; "
    's=${s##*") "}; set -- $s; [ "$3" = "$g" ] && [ "$1" != Z ] && return 0; done; '
    "return 1; };"
)
_CHUNK = 65536
_KILL_SECONDS = 5.0


# How long a stopped command's wrapper may take to say its process group (it prints that
# first thing; only a busy node is slower).
PGID_WAIT_SECONDS = 5.0


# The longest a command's wait sleeps without news from the channel; cancel() wakes it at
# once (its eventfd), so this only bounds how late a command whose exit status came without
# an end of output (a background child holding stdout) is noticed.
_WAIT_SECONDS = 1.0


class _QuietTransport(paramiko.Transport):
    """paramiko's Transport, its reader thread waking once a second rather than ten times
    to see whether it was closed (its only use: data wakes it at once, keepalives are 15 s):
    idle connections cost 0.32 ms of CPU per host and second at 0.1 s, 0.05 ms at 1 s."""

    _active_check_timeout = 1.0


def _quiet_transport(sock: Any, **options: Any) -> paramiko.Transport:
    return _QuietTransport(sock, **options)


class _Verify(paramiko.MissingHostKeyPolicy):
    """paramiko's client knows no keys here: every key comes to us, known or not."""

    def __init__(self, verifier: HostKeyVerifier, endpoint: Endpoint) -> None:
        self.verifier, self.endpoint = verifier, endpoint

    def missing_host_key(
        self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey
    ) -> None:
        ep = self.endpoint
        self.verifier.verify(ep.host, ep.address, ep.port, key)


def _classify(host: str, where: str, error: BaseException, deadline: Deadline) -> TransportError:
    """Turn a socket/paramiko exception into a TransportError with a next step."""
    if isinstance(error, TransportError):
        return error
    log.debug("%s: connecting to %s failed", host, where, exc_info=error)
    if isinstance(error, paramiko.BadHostKeyException):
        return TransportError(host, "hostkey-changed", f"host key for {where} has changed")
    if isinstance(error, (paramiko.AuthenticationException, paramiko.PasswordRequiredException)):
        return TransportError(
            host,
            "auth",
            f"authentication failed at {where}: {error}",
            hint="check ansible_user and ansible_ssh_private_key_file (or ansible_password), "
            "or load the key into ssh-agent",
        )
    if isinstance(error, paramiko.SSHException) and "No authentication methods" in str(error):
        return TransportError(
            host,
            "auth",
            f"no key or password to log in at {where} with",
            hint="set ansible_ssh_private_key_file or ansible_password, or load a key into "
            "ssh-agent",
        )
    if isinstance(error, ConnectionRefusedError):
        return TransportError(
            host, "refused", f"connection refused by {where}", hint="is sshd running there?"
        )
    if isinstance(error, socket.gaierror):
        return TransportError(
            host,
            "unreachable",
            f"cannot resolve {where}: {error.strerror}",
            hint="check ansible_host",
        )
    if isinstance(error, OSError) and error.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH):
        return TransportError(
            host, "unreachable", f"no route to {where}", hint="check the address and routing"
        )
    if isinstance(error, (socket.timeout, TimeoutError)) or deadline.expired:
        return TransportError(
            host,
            "timeout",
            f"no answer from {where} within the connect deadline",
            hint="the host is down, or a firewall drops SSH packets",
        )
    if isinstance(error, paramiko.ProxyCommandFailure):
        return TransportError(
            host,
            "proxy",
            f"ProxyCommand for {where} failed: {error}",
            hint="check the ProxyCommand and that it can reach the node",
        )
    if isinstance(error, EOFError):
        return TransportError(
            host,
            "protocol",
            f"SSH to {where} failed: the server closed the connection during the handshake",
            hint="is that port an SSH server, and does it accept this client?",
        )
    what = str(error) or type(error).__name__
    return TransportError(host, "protocol", f"SSH to {where} failed: {what}")


class _ConnectAttempt:
    """A connection being opened. cancel() (Ctrl-C, SIGTERM) aborts it at once: the TCP
    connect polls for it, and closing the socket ends any SSH phase paramiko is in."""

    def __init__(self) -> None:
        self.cancelled = threading.Event()
        self.sock: socket.socket | paramiko.Channel | paramiko.ProxyCommand | None = None
        register_cancellable(self)

    def cancel(self) -> None:
        self.cancelled.set()
        if self.sock is not None:
            self.sock.close()


def _interrupted(host: str) -> TransportError:
    return TransportError(host, "interrupted", "interrupted while connecting")


def _connect_tcp(
    address: str, port: int, deadline: Deadline, attempt: _ConnectAttempt
) -> socket.socket:
    """socket.create_connection that an interrupt can abort (a dropped SYN otherwise holds
    the thread, and so the exit, until the connect deadline)."""
    last_error: OSError = TimeoutError("timed out")
    for family, kind, proto, _, target in socket.getaddrinfo(address, port, 0, socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        attempt.sock = sock
        sock.setblocking(False)
        code = sock.connect_ex(target)
        poller = select.poll()
        poller.register(sock, select.POLLOUT)
        while code == errno.EINPROGRESS:
            if attempt.cancelled.is_set():
                sock.close()
                raise InterruptedError("interrupted while connecting")
            if deadline.expired:
                sock.close()
                raise TimeoutError("timed out")
            if poller.poll(min(100, int(deadline.remaining() * 1000) + 1)):
                code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code == 0:
            sock.setblocking(True)
            sock.settimeout(max(0.1, deadline.remaining()))
            return sock
        sock.close()
        last_error = OSError(code, os.strerror(code))
    raise last_error


def open_client(
    endpoint: Endpoint,
    verifier: HostKeyVerifier,
    deadline: Deadline,
    sock: socket.socket | paramiko.Channel | paramiko.ProxyCommand | None = None,
) -> paramiko.SSHClient:
    """Connect and authenticate, never past the deadline: a watchdog closes the socket if
    the server accepts TCP and then stalls in any phase paramiko does not time itself."""
    where = endpoint.where
    keys = read_keys(endpoint.host, endpoint.key_files)  # before anything is opened
    attempt = _ConnectAttempt()
    if sock is None:
        try:
            sock = _connect_tcp(endpoint.address, endpoint.port, deadline, attempt)
        except OSError as error:
            if isinstance(error, InterruptedError) or attempt.cancelled.is_set():
                raise _interrupted(endpoint.host) from None
            raise _classify(endpoint.host, where, error, deadline) from None
    attempt.sock = sock
    if attempt.cancelled.is_set():
        sock.close()
    watchdog = WATCHDOG.after(deadline.remaining(), sock.close)
    client = ReadKeysClient(keys)
    client.set_missing_host_key_policy(_Verify(verifier, endpoint))
    remaining = max(0.1, deadline.remaining())
    try:
        client.connect(
            hostname=endpoint.address,
            port=endpoint.port,
            username=endpoint.user,
            key_filename=list(keys) or None,  # type: ignore[arg-type]  # the stub says str
            look_for_keys=not keys,
            allow_agent=not keys,
            password=endpoint.password,  # tried after the keys, as ssh does with sshpass
            timeout=remaining,
            banner_timeout=remaining,
            auth_timeout=remaining,
            channel_timeout=remaining,
            sock=sock,
            transport_factory=_quiet_transport,
        )
    except BaseException as error:
        client.close()
        if isinstance(error, KeyboardInterrupt):
            raise
        if attempt.cancelled.is_set():  # its socket was closed under it: not the host's fault
            raise _interrupted(endpoint.host) from None
        raise _classify(endpoint.host, where, error, deadline) from None
    finally:
        watchdog.cancel()
    # Connected: a later Ctrl-C is SSHTransport.cancel's to handle (kill the remote groups
    # first). The attempt stays registered for as long as this frame lives, which a reference
    # cycle can stretch until the garbage collector runs; its cancel must not then close the
    # live connection's socket under the commands whose groups are still to be killed.
    attempt.sock = None
    transport = client.get_transport()
    if transport is not None:
        transport.set_keepalive(15)
    return client


class SSHTransport(Transport):
    """Runs commands over one authenticated paramiko connection (reused by every stage)."""

    def __init__(
        self,
        host: str,
        client: paramiko.SSHClient,
        hops: Sequence[paramiko.SSHClient] = (),
    ) -> None:
        self.host = host
        self._client = client
        self._hops = list(hops)  # jump-host connections, closed after the client
        self._cancelled = threading.Event()
        # Wakes every wait on this host's channels when cancelled (one descriptor per host).
        self._wake: int | None = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._wake_lock = threading.Lock()
        register_cancellable(self)

    def cancel(self) -> None:
        """Make every running command kill its remote process group and return."""
        self._cancelled.set()
        with self._wake_lock:
            if self._wake is not None:
                os.eventfd_write(self._wake, 1)

    def start(
        self,
        argv: Sequence[str],
        *,
        deadline: Deadline,
        output_cap: int = DEFAULT_OUTPUT_CAP,
        start_by: Deadline | None = None,
    ) -> SSHProcess:
        started = time.monotonic()
        by = start_by or deadline
        log.debug("%s: run %s (%.0f s left)", self.host, argv[0], deadline.remaining())
        channel = self._open_channel(by)
        try:
            self._exec(channel, remote_command(argv, deadline.remaining()), by)
        except BaseException:
            channel.close()
            raise
        return SSHProcess(self, channel, output_cap, started)

    def _exec(self, channel: paramiko.Channel, command: str, deadline: Deadline) -> None:
        """Start a command, bounded: paramiko waits for the server's answer to an exec request
        without a timeout, so a watchdog closes the channel (which wakes it) at the deadline."""
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            channel.close()

        watchdog = WATCHDOG.after(deadline.remaining(), expire)
        try:
            channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as error:
            if fired.is_set():
                raise TransportError(
                    self.host, "timeout", "the server did not start the command before the deadline"
                ) from None
            raise TransportError(
                self.host, "protocol", f"cannot start the command: {error}"
            ) from None
        finally:
            watchdog.cancel()

    def _open_channel(self, deadline: Deadline) -> paramiko.Channel:
        transport = self._client.get_transport()
        if transport is None or not transport.is_active():
            raise TransportError(self.host, "unreachable", "the SSH connection was lost")
        limit = max(0.1, min(deadline.remaining(), 15.0))
        expires = time.monotonic() + limit
        try:
            return transport.open_session(timeout=limit)
        except (paramiko.SSHException, OSError, EOFError) as error:
            if time.monotonic() >= expires:
                raise TransportError(
                    self.host, "timeout", f"the server did not open a channel within {limit:.0f} s"
                ) from None
            raise TransportError(self.host, "protocol", f"cannot open a channel: {error}") from None

    def _kill_group(self, pgid: int | None) -> None:
        """Kill the remote process group over a fresh channel; `timeout -k` is the backstop."""
        if pgid is None or pgid <= 1:
            return
        # TERM lets the node side clean up (the probe kills its tools' own groups); KILL
        # follows once the group is gone or 2 s have passed.
        # `kill -TERM -PGID`, not `kill -TERM -- -PGID`: dash's kill does not take `--`.
        script = f"g={pgid}; {_GROUP_LIVE} kill -TERM -$g 2>/dev/null; i=0; " + (
            "while [ $i -lt 20 ] && kill -0 -$g 2>/dev/null; do sleep 0.1; i=$((i+1)); "
            "case $i in 2|6|12) live || break;; esac; done; "
            "kill -KILL -$g 2>/dev/null; true"
        )
        deadline = Deadline.after(_KILL_SECONDS)
        try:
            channel = self._open_channel(deadline)
        except TransportError:
            return
        try:
            self._exec(channel, script, deadline)
            # The kill script prints nothing; whatever a login script prints is drained all
            # the same (both streams), so a full window can never hold the exit status back.
            while not channel.exit_status_ready() and not deadline.expired:
                while channel.recv_ready():
                    channel.recv(_CHUNK)
                while channel.recv_stderr_ready():
                    channel.recv_stderr(_CHUNK)
                time.sleep(0.02)
        except TransportError:
            return
        finally:
            channel.close()

    def close(self) -> None:
        self._client.close()
        for hop in reversed(self._hops):
            hop.close()
        with self._wake_lock:
            if self._wake is not None:
                os.close(self._wake)
                self._wake = None


def _wait_readable(channel: paramiko.Channel, seconds: float, wake: int | None = None) -> None:
    """Wait until the channel has something to read, `wake` is signalled, or `seconds`.
    poll, not select: a large cluster's connections and channel pipes take descriptors
    past select's 1024."""
    poller = select.poll()
    poller.register(channel, select.POLLIN)
    if wake is not None:
        poller.register(wake, select.POLLIN)
    poller.poll(max(0, int(seconds * 1000)) or 1)


class SSHProcess(PumpedProcess):
    """A command started over SSH (see RemoteProcess). At a deadline, or when the transport
    is cancelled, the remote process group is killed."""

    def __init__(
        self, transport: SSHTransport, channel: paramiko.Channel, cap: int, started: float
    ) -> None:
        super().__init__(transport.host, cap)
        self._transport, self._channel, self._started = transport, channel, started
        channel.setblocking(False)

    def _conclude(self, *, exited: bool) -> CommandResult:
        """The exit status, or at the deadline the remote process group killed."""
        pgid, stderr = split_pgid(bytes(self._err))
        if not exited and pgid is None:
            pgid, stderr = split_pgid(self._await_pgid())
        if exited:
            exit_code: int | None = self._channel.recv_exit_status()
        else:
            self._transport._kill_group(pgid)
            exit_code = None
        result = CommandResult(
            self.host,
            exit_code,
            bytes(self._out),
            stderr,
            not exited,
            self._truncated,
            time.monotonic() - self._started,
        )
        log.debug(
            "%s: exit %s after %.2f s%s",
            self.host,
            exit_code,
            result.duration,
            " (deadline: process group killed)" if not exited else "",
        )
        return result

    def _release(self) -> None:
        self._channel.close()

    def _pump(self, done: Callable[[], bool], deadline: Deadline) -> bool:
        channel = self._channel
        while not done():
            if self._transport._cancelled.is_set():
                pgid, _ = split_pgid(self._await_pgid())
                self._transport._kill_group(pgid)
                self._channel.close()
                self._result = CommandResult(self.host, None, bytes(self._out), b"", True)
                raise TransportError(self.host, "interrupted", "interrupted; remote command killed")
            remaining = deadline.remaining()
            if remaining <= 0:
                return False
            self._feed()
            if self._pending:
                wait = 0.005  # the channel's send window: no event tells when it opens
            elif self._exited_at is not None:
                wait = 0.1  # exited without an end of output: look again shortly
            else:
                wait = _WAIT_SECONDS
            _wait_readable(channel, min(remaining, wait), self._transport._wake)
            self._feed()
            while channel.recv_ready():
                self._keep(self._out, channel.recv(_CHUNK))
            while channel.recv_stderr_ready():
                self._keep(self._err, channel.recv_stderr(_CHUNK))
            if channel.exit_status_ready():
                self._exited_at = self._exited_at or time.monotonic()
                drained = not channel.recv_ready() and not channel.recv_stderr_ready()
                # A background child may hold stdout open after exit: do not wait for it long.
                if drained and (channel.eof_received or time.monotonic() - self._exited_at > 0.5):
                    return self._closing or done()
        return True

    def _feed(self) -> None:
        channel = self._channel
        if self._pending and channel.send_ready():
            try:
                sent = channel.send(self._pending[:_CHUNK])
            except TimeoutError:
                sent = 0
            except OSError:  # the channel closed: the command stopped reading
                sent = len(self._pending)
            self._pending = self._pending[sent:]
        if self._closing and not self._pending and not channel.eof_sent:
            channel.shutdown_write()

    def _await_pgid(self) -> bytes:
        """Stopped before the wrapper reported its process group: give it a few seconds to
        (a loaded node takes that long to start a shell), so the command can still be killed
        rather than left to its node-side timeout."""
        channel, err = self._channel, self._err
        limit = time.monotonic() + PGID_WAIT_SECONDS
        while b"\n" not in err and time.monotonic() < limit and not channel.closed:
            _wait_readable(channel, 0.1)
            while channel.recv_stderr_ready():
                err += channel.recv_stderr(_CHUNK)
            while channel.recv_ready():
                channel.recv(_CHUNK)
        return bytes(err)
