"""Private key files are read by clusterkit, within bounds: a key path naming a FIFO once
hung a run for good (Ctrl-C and SIGTERM could not end it) and /dev/zero was read to 2 GB,
because paramiko opened and read the path itself."""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import paramiko
import pytest

from clusterkit.errors import InventoryError, TransportError
from clusterkit.keyfiles import MAX_KEY_BYTES, KeyFileProblem, read_key_file
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline
from clusterkit.transport.endpoint import Endpoint
from clusterkit.transport.hostkeys import HostKeyVerifier
from clusterkit.transport.ssh import open_client
from tests.support.cli import run_cli


def hostile_files(tmp_path: Path) -> dict[str, tuple[str, str]]:
    """name -> (path, what the error says about it)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    big = tmp_path / "big"
    big.write_bytes(b"-" * (MAX_KEY_BYTES + 1))
    return {
        "fifo": (str(fifo), "not a regular file (a FIFO)"),
        "zero": ("/dev/zero", "not a regular file (a character device)"),
        "directory": (str(tmp_path), "not a regular file (a directory)"),
        "big": (str(big), f"{MAX_KEY_BYTES + 1} bytes, more than a key file's {MAX_KEY_BYTES}"),
    }


def inventory_with_key(tmp_path: Path, key: str) -> Path:
    path = tmp_path / "inv.yml"
    host = {"ansible_host": "127.0.0.1", "ansible_ssh_private_key_file": key}
    path.write_text(json.dumps({"all": {"hosts": {"n1": host}}}))
    return path


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory", "big"])
def test_the_inventory_refuses_a_key_file_that_cannot_be_one(tmp_path: Path, kind: str):
    path, said = hostile_files(tmp_path)[kind]
    with pytest.raises(InventoryError) as raised:
        load_inventory(str(inventory_with_key(tmp_path, path)))
    message = str(raised.value)
    assert f"ansible_ssh_private_key_file: {path}: {said} (host n1)" in message


def test_a_missing_key_file_is_left_to_the_connection(tmp_path: Path):
    inventory = load_inventory(str(inventory_with_key(tmp_path, str(tmp_path / "absent"))))
    assert inventory.hosts[0].key_file == str(tmp_path / "absent")


def test_check_with_a_fifo_key_ends_at_once_with_one_line(tmp_path: Path):
    path, _ = hostile_files(tmp_path)["fifo"]
    inventory = inventory_with_key(tmp_path, path)
    started = time.monotonic()
    done = run_cli(["check", "-i", inventory], timeout=60)
    assert time.monotonic() - started < 30
    assert done.status == 2 and done.stderr.count("\n") == 1, done.stderr
    assert f"{path}: not a regular file (a FIFO) (host n1)" in done.stderr


@pytest.mark.parametrize("kind", ["fifo", "zero", "directory", "big"])
def test_read_key_file_refuses_without_blocking(tmp_path: Path, kind: str):
    path, said = hostile_files(tmp_path)[kind]
    started = time.monotonic()
    with pytest.raises(KeyFileProblem, match=said.split(" (")[0]):
        read_key_file(path)
    assert time.monotonic() - started < 5


# -- at connect time (ssh_config's IdentityFile, or a file swapped after loading) -------------


class _AnyKey(paramiko.ServerInterface):
    """Accepts any public key and records it."""

    def __init__(self, seen: list[paramiko.PKey]) -> None:
        self.seen = seen

    def check_auth_publickey(self, username: str, key: paramiko.PKey) -> int:
        self.seen.append(key)
        return paramiko.AUTH_SUCCESSFUL

    def get_allowed_auths(self, username: str) -> str:
        return "publickey"


@pytest.fixture
def server() -> Iterator[tuple[int, paramiko.PKey, list[paramiko.PKey]]]:
    host_key = paramiko.RSAKey.generate(2048)
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[paramiko.PKey] = []
    transports: list[paramiko.Transport] = []

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            transport = paramiko.Transport(conn)
            transports.append(transport)
            transport.add_server_key(host_key)
            transport.start_server(server=_AnyKey(seen))

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1], host_key, seen
    listener.close()
    for transport in transports:
        transport.close()


def _connect(server, tmp_path: Path, key: str, password: str | None = None) -> None:
    port, host_key, _ = server
    known = tmp_path / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_key.get_name()} {host_key.get_base64()}\n")
    endpoint = Endpoint(host="n1", address="127.0.0.1", port=port, user="root",
                        key_files=(key,), known_hosts=(str(known),), password=password)  # fmt: skip
    client = open_client(endpoint, HostKeyVerifier("strict", [str(known)]), Deadline.after(10))
    client.close()


def test_a_fifo_key_at_connect_time_is_an_error_naming_host_and_file(server, tmp_path: Path):
    path, said = hostile_files(tmp_path)["fifo"]
    outcome: list[BaseException | None] = []

    def attempt() -> None:
        try:
            _connect(server, tmp_path, path)
            outcome.append(None)
        except BaseException as error:  # reported below, in the test's own thread
            outcome.append(error)

    worker = threading.Thread(target=attempt, daemon=True)  # the old code never returned
    worker.start()
    worker.join(15)
    assert outcome, "opening the key file blocked"
    error = outcome[0]
    assert isinstance(error, TransportError), error
    assert (error.host, error.kind) == ("n1", "auth")
    assert f"key file {path}: {said}" in error.detail


def test_dev_zero_at_connect_time_is_refused_unread(server, tmp_path: Path):
    started = time.monotonic()
    with pytest.raises(TransportError, match="character device"):
        _connect(server, tmp_path, "/dev/zero")
    assert time.monotonic() - started < 5


def test_an_encrypted_key_opens_with_the_password_as_before(server, tmp_path: Path):
    key = paramiko.RSAKey.generate(2048)
    path = tmp_path / "id_rsa"
    key.write_private_key_file(str(path), password="s3cret")
    _connect(server, tmp_path, str(path), password="s3cret")
    assert server[2][-1].get_fingerprint() == key.get_fingerprint()


def test_a_key_swapped_for_a_fifo_after_loading_is_caught_at_connect(server, tmp_path: Path):
    path = tmp_path / "id_rsa"
    paramiko.RSAKey.generate(2048).write_private_key_file(str(path))
    inventory = load_inventory(str(inventory_with_key(tmp_path, str(path))))
    assert inventory.hosts[0].key_file == str(path)
    path.unlink()
    os.mkfifo(path)
    with pytest.raises(TransportError, match="a FIFO"):
        _connect(server, tmp_path, str(path))
