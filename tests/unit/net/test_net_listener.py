"""The mesh listener (clusterkit/node/net.py) on loopback: many peers at once from one thread,
a silent peer that must not stall the others, a foreign client turned away, and the
listeners' lifetime in a mesh round: up until the control side answers the mesh report."""

from __future__ import annotations

import json
import os
import queue
import select
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from clusterkit.node import net as node
from clusterkit.node.net import Listener


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def listener() -> Iterator[Listener]:
    listener = Listener(_free_port(), "mesh", "node1", peer_seconds=2.0)
    listener.bind()
    assert listener.state == "ok", listener.error
    stop = time.monotonic() + 20
    thread = threading.Thread(target=listener.serve, args=(lambda: stop,), daemon=True)
    thread.start()
    yield listener
    stop = 0.0
    thread.join(5)
    listener.close()
    assert not thread.is_alive()


def _connect(port: int, name: str) -> tuple[str, str]:
    return node.connect_once({"address": "127.0.0.1", "port": port}, None, 5.0, name, 5.0)


def test_many_peers_at_once_are_all_answered(listener: Listener) -> None:
    # A silent peer is given far longer than this test needs: every answer below must then
    # come while it is still pending, however slow the machine.
    listener.peer_seconds = 60.0
    silent = socket.create_connection(("127.0.0.1", listener.port))  # connects, never speaks
    try:
        results: dict[str, tuple[str, str]] = {}
        names = [f"peer{i}" for i in range(120)]
        threads = [
            threading.Thread(target=lambda n=n: results.__setitem__(n, _connect(listener.port, n)))
            for n in names
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert all(results.get(n) == ("ok", "node1") for n in names), results
        assert listener.seen == set(names)
        silent.setblocking(False)
        with pytest.raises(BlockingIOError):  # still open and waiting: it held no one up
            silent.recv(64)
    finally:
        silent.close()


def test_silent_peer_is_let_go_and_foreign_client_turned_away(listener: Listener) -> None:
    with socket.create_connection(("127.0.0.1", listener.port)) as silent:
        silent.settimeout(listener.peer_seconds + 3)
        started = time.monotonic()
        assert silent.recv(64) == b""  # closed by the listener, not left open
        assert time.monotonic() - started >= listener.peer_seconds - 0.2
    with socket.create_connection(("127.0.0.1", listener.port)) as foreign:
        foreign.settimeout(5)
        foreign.sendall(b"GET / HTTP/1.0\r\n\r\n")
        assert foreign.recv(64) == b""
    assert listener.seen == set()


def test_a_slow_answer_after_a_squeezed_connect_is_still_the_peer() -> None:
    """A connect made at the end of the window gets a tiny budget; the handshake after it has
    its own, so a listener answering late (a node short of CPU) is not called a stranger."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def answer_late() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(256)
                time.sleep(0.6)  # longer than the connect budget below
                conn.sendall(node.HANDSHAKE + b" node2\n")
                conn.recv(16)

        thread = threading.Thread(target=answer_late, daemon=True)
        thread.start()
        target = {"address": "127.0.0.1", "port": port}
        assert node.connect_once(target, None, 0.2, "node1", 10.0) == ("ok", "node2")
        thread.join(10)


def test_inbox_reads_answers_and_treats_stop_eof_and_silence_alike() -> None:
    """The node waits for the control side's answers; each wait is bounded and anything but
    an answer (stop, end of input, silence) ends the session rather than hanging it."""
    read_end, write_end = os.pipe()
    try:
        inbox = node.Inbox(wait=5.0, fd=read_end)
        os.write(write_end, b'{"go": true}\n{"name": "node2", "listen": []}\n')
        assert inbox.next() == {"go": True}
        assert inbox.next() == {"name": "node2", "listen": []}  # the second, already buffered
        os.write(write_end, b'{"stop"')
        os.write(write_end, b": true}\n")  # a line split across reads
        assert inbox.next() is None

        quiet = node.Inbox(wait=0.3, fd=read_end)
        started = time.monotonic()
        assert quiet.next() is None
        assert 0.25 <= time.monotonic() - started < 3
        os.close(write_end)
        write_end = -1
        assert inbox.next() is None  # end of input: the control side went away
    finally:
        os.close(read_end)
        if write_end >= 0:
            os.close(write_end)


class Round:
    """node.mesh_rounds in a thread, talked to as the control side would over a pipe."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, wait: float) -> None:
        self.reports: queue.Queue[dict[str, Any]] = queue.Queue()
        monkeypatch.setattr(node, "emit", self.reports.put)
        self.read_end, self.write_end = os.pipe()
        self.port = _free_port()
        inbox = node.Inbox(wait=wait, fd=self.read_end)
        self.thread = threading.Thread(target=node.mesh_rounds, args=(inbox,), daemon=True)

    def answer(self, message: dict[str, Any]) -> None:
        os.write(self.write_end, json.dumps(message).encode() + b"\n")

    def report(self, phase: str) -> dict[str, Any]:
        report = self.reports.get(timeout=20)
        assert report["phase"] == phase, report
        return report

    def through_the_mesh_step(self) -> None:
        """Plan and "go" are written before the node starts: it reads "go" only once bound,
        and no wait of its inbox can run out before them."""
        self.answer({"name": "node1", "round": 1, "listen": [{"port": self.port, "role": "mesh"}],
                     "targets": [], "window": 1.0, "connect_timeout": 1.0})  # fmt: skip
        self.answer({"go": True})
        self.thread.start()
        self.report("bound")
        self.report("mesh")

    def close(self) -> None:
        os.close(self.write_end)  # end of input: the node stops
        if self.thread.ident is not None:
            self.thread.join(10)
        os.close(self.read_end)
        assert not self.thread.is_alive()


def _refused(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=5).close()
    except ConnectionRefusedError:
        return True
    return False


def test_listeners_serve_past_the_mesh_report_until_the_control_side_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A peer handed "go" after this node finished its connects is still answered and seen;
    the answer to the mesh report (every node has connected) closes the listeners."""
    mesh_round = Round(monkeypatch, wait=30.0)
    try:
        mesh_round.through_the_mesh_step()
        assert _connect(mesh_round.port, "node7") == ("ok", "node1")
        mesh_round.answer({"close": True})
        (listener,) = mesh_round.report("listeners")["listeners"]
        assert (listener["port"], listener["seen"]) == (mesh_round.port, ["node7"])
        assert _refused(mesh_round.port)
        assert mesh_round.reports.empty()
    finally:
        mesh_round.close()


def test_listeners_close_when_the_control_side_never_answers(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The inbox's wait bounds the listeners: a node whose control side went silent after its
    mesh report closes them and ends, reporting nothing more."""
    mesh_round = Round(monkeypatch, wait=1.0)
    try:
        mesh_round.through_the_mesh_step()
        mesh_round.thread.join(15)
        assert not mesh_round.thread.is_alive()
        assert _refused(mesh_round.port)
        assert mesh_round.reports.empty()
    finally:
        mesh_round.close()


def test_a_busy_listener_queues_every_nodes_connect() -> None:
    """At 256 nodes every node connects to the master's ports at once while it is still busy:
    all of them must be queued by the kernel, not dropped (a SYN dropped for a full queue is
    a connect that times out although nothing blocks it)."""
    peers = 400  # past the 128 a listener queued before
    listener = Listener(_free_port(), "rendezvous", "node1", peer_seconds=2.0)
    listener.bind()
    assert listener.state == "ok", listener.error
    poller, clients = select.poll(), []
    try:
        for _ in range(peers):  # the listener does not accept yet: a master still busy
            client = socket.socket()
            client.setblocking(False)
            client.connect_ex(("127.0.0.1", listener.port))
            poller.register(client, select.POLLOUT)
            clients.append(client)
        connected: set[int] = set()
        deadline = time.monotonic() + 20
        while len(connected) < peers and time.monotonic() < deadline:
            for fd, _event in poller.poll(100):
                poller.unregister(fd)
                connected.add(fd)
        errors = [c.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) for c in clients]
        assert len(connected) == peers and not any(errors), f"{len(connected)} connected"
    finally:
        for client in clients:
            client.close()
        listener.close()
