"""Servers that stall must never stall us: deadlines hold in the phases paramiko leaves open."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import paramiko
import pytest

from clusterkit.errors import TransportError
from clusterkit.transport.base import Deadline
from clusterkit.transport.endpoint import Endpoint
from clusterkit.transport.hostkeys import HostKeyVerifier
from clusterkit.transport.ssh import SSHTransport, open_client


class _SilentOnExec(paramiko.ServerInterface):
    """Accepts anyone and opens sessions, then never answers an exec request."""

    def __init__(self, release: threading.Event) -> None:
        self.release = release

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"

    def check_channel_request(self, kind: str, chanid: int) -> int:
        return paramiko.OPEN_SUCCEEDED

    def check_channel_exec_request(self, channel, command) -> bool:
        self.release.wait(30)  # the reply never comes while the client waits
        return False


@pytest.fixture
def stalling_server() -> Iterator[tuple[int, paramiko.PKey]]:
    key = paramiko.Ed25519Key.generate() if hasattr(paramiko.Ed25519Key, "generate") else None
    if key is None:
        key = paramiko.RSAKey.generate(2048)
    listener = socket.create_server(("127.0.0.1", 0))
    release = threading.Event()
    transports: list[paramiko.Transport] = []
    channels: list[paramiko.Channel | None] = []

    def serve() -> None:
        try:
            conn, _ = listener.accept()
        except OSError:
            return
        transport = paramiko.Transport(conn)
        transports.append(transport)
        transport.add_server_key(key)
        transport.start_server(server=_SilentOnExec(release))
        channels.append(transport.accept(10))  # held: a collected channel closes itself

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield listener.getsockname()[1], key
    release.set()
    listener.close()
    for transport in transports:
        transport.close()


def _connect_to(server: tuple[int, paramiko.PKey], tmp_path) -> SSHTransport:
    """An authenticated transport to the stalling server (it accepts any key)."""
    port, key = server
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {key.get_name()} {key.get_base64()}\n")
    client_key = tmp_path / "id_rsa"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(client_key))
    endpoint = Endpoint(host="stall", address="127.0.0.1", port=port, user="root",
                        key_files=(str(client_key),), known_hosts=(str(known),))  # fmt: skip
    client = open_client(endpoint, HostKeyVerifier("strict", [str(known)]), Deadline.after(10))
    transport = SSHTransport("stall", client)
    return transport


def test_exec_request_without_answer_is_bounded(
    stalling_server: tuple[int, paramiko.PKey], tmp_path
) -> None:
    transport = _connect_to(stalling_server, tmp_path)
    try:
        started = time.monotonic()
        with pytest.raises(TransportError) as caught:
            transport.run(["true"], deadline=Deadline.after(2))
        assert time.monotonic() - started < 10  # the server would keep us 30 s
        assert caught.value.kind == "timeout", caught.value
        assert caught.value.host == "stall"
    finally:
        transport.close()


def test_a_long_lived_command_still_starts_by_its_start_deadline(
    stalling_server: tuple[int, paramiko.PKey], tmp_path
) -> None:
    """The network stage starts node processes that live a minute; a server that never
    answers the exec request must fail the first step's bound, not the process's life."""
    transport = _connect_to(stalling_server, tmp_path)
    try:
        started = time.monotonic()
        with pytest.raises(TransportError) as caught:
            transport.start(["true"], deadline=Deadline.after(60), start_by=Deadline.after(2))
        assert time.monotonic() - started < 10  # not the 60 s of the process's life
        assert caught.value.kind == "timeout", caught.value
    finally:
        transport.close()


def test_server_that_never_speaks_is_bounded_by_the_connect_deadline(tmp_path) -> None:
    listener = socket.create_server(("127.0.0.1", 0))  # accepts TCP, never says a word
    try:
        endpoint = Endpoint(host="mute", address="127.0.0.1", port=listener.getsockname()[1],
                            user="root", known_hosts=(str(tmp_path / "none"),))  # fmt: skip
        started = time.monotonic()
        with pytest.raises(TransportError) as caught:
            open_client(endpoint, HostKeyVerifier("strict", []), Deadline.after(1.5))
        assert time.monotonic() - started < 5
        assert caught.value.kind == "timeout"
    finally:
        listener.close()
