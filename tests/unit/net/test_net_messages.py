"""The network stage's reports are checked where they arrive (clusterkit/net/messages.py):
the real node program's reports pass strictly, and a report of another shape fails that
node's step with one line naming the path of the bad value, never a traceback."""

from __future__ import annotations

import json
import os
import queue
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from clusterkit.framing import encode
from clusterkit.net.messages import (
    MalformedMessage,
    parse_bound,
    parse_facts_report,
    parse_listeners,
    parse_mesh,
)
from clusterkit.net.sessions import NodeSessions
from clusterkit.node import net as node
from clusterkit.transport.base import CommandResult, Deadline
from tests.support.net_reports import facts_report, listener

RECORDED_MESH = {  # a node's mesh report, as node/net.py sent it
    "phase": "mesh",
    "round": 1,
    "connects": [
        {"peer": "node2", "address": "10.0.0.12", "port": 41002, "role": "mesh",
         "result": "ok", "detail": "node2", "seconds": 0.004},
        {"peer": "node1", "address": "10.0.0.11", "port": 29500, "role": "master_port",
         "result": "timeout", "detail": "connect never returned"},
    ],
    "seconds": 0.01,
    "cpu": 0.094,
}  # fmt: skip


def _wire(report: object) -> Any:
    """The report as the control side gets it: through JSON."""
    return json.loads(json.dumps(report))


@pytest.fixture
def holder() -> Iterator[socket.socket]:
    """A port another process listens on (here: this test)."""
    with socket.create_server(("127.0.0.1", 0)) as sock:
        yield sock


def test_the_node_programs_facts_report_passes_strictly(holder: socket.socket) -> None:
    held = holder.getsockname()[1]
    report = parse_facts_report(
        _wire(node.facts({"master": "localhost", "reserved_ports": [held]}))
    )
    assert report["hostname"] == socket.gethostname()
    assert "lo" in {item["name"] for item in report["interfaces"]}
    assert report["master"] is not None and report["master"]["name"] == "localhost"
    in_use = report["reserved_in_use"][str(held)]
    assert in_use is not None and in_use["pid"] == os.getpid()
    assert set(report["firewall"]) >= {"iptables", "nft"}


class NodeRound:
    """node.mesh_rounds in a thread, answered as the control side would over a pipe."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.reports: queue.Queue[dict[str, Any]] = queue.Queue()
        monkeypatch.setattr(node, "emit", self.reports.put)
        self.read_end, self.write_end = os.pipe()
        inbox = node.Inbox(wait=20.0, fd=self.read_end)
        self.thread = threading.Thread(target=node.mesh_rounds, args=(inbox,), daemon=True)

    def answer(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send the message; the node's next report, as it comes over the wire."""
        os.write(self.write_end, json.dumps(message).encode() + b"\n")
        if not self.thread.is_alive():
            self.thread.start()
        return _wire(self.reports.get(timeout=20))

    def close(self) -> None:
        os.close(self.write_end)  # end of input: the node stops
        self.thread.join(10)
        os.close(self.read_end)
        assert not self.thread.is_alive()


def test_a_real_mesh_round_reports_pass_strictly(
    monkeypatch: pytest.MonkeyPatch, holder: socket.socket
) -> None:
    """Bound (a kernel-chosen port, a port in use), mesh (one peer answers, one port is
    closed), listeners (who came): every report the round sends, checked as it arrives."""
    taken = holder.getsockname()[1]
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        refusing = closed.getsockname()[1]  # bound, never listening: refused
        mesh_round = NodeRound(monkeypatch)
        try:
            listen = [{"port": 0, "role": "mesh"}, {"port": taken, "role": "extra"}]
            plan = {"name": "node1", "round": 1, "source": None, "window": 2.0,
                    "connect_timeout": 2.0, "listen": listen}  # fmt: skip
            bound = parse_bound(mesh_round.answer(plan))
            mesh_port = bound["listeners"][0]["port"]
            assert mesh_port > 0 and bound["listeners"][1]["state"] == "in_use"
            targets = [
                {"peer": "node1", "address": "127.0.0.1", "port": mesh_port, "role": "mesh"},
                {"peer": "node2", "address": "127.0.0.1", "port": refusing, "role": "mesh"},
            ]
            mesh = parse_mesh(mesh_round.answer({"go": True, "targets": targets}))
            assert [c["result"] for c in mesh["connects"]] == ["ok", "refused"]
            closed_report = parse_listeners(mesh_round.answer({"close": True}))
            assert closed_report["listeners"][0]["seen"] == ["node1"]
        finally:
            mesh_round.close()


def test_a_recorded_mesh_report_passes() -> None:
    assert parse_mesh(_wire(RECORDED_MESH)) == RECORDED_MESH


def _mesh(**connect: object) -> dict[str, Any]:
    report = _wire(RECORDED_MESH)
    report["connects"][0].update(connect)
    return report


@pytest.mark.parametrize(
    ("parse", "report", "why"),
    [
        (parse_mesh, _mesh(port="22; rm -rf /"), "mesh.connects[0].port: int expected, got "
         "'22; rm -rf /'"),
        (parse_mesh, _mesh(shell="x"), "mesh.connects[0]: unknown key 'shell'"),
        (parse_mesh, _mesh(result="fine"), "mesh.connects[0].result: 'fine' not allowed"),
        (parse_mesh, _mesh(seconds=True), "mesh.connects[0].seconds: float expected, got True"),
        (parse_bound, _wire(RECORDED_MESH), "bound: no 'listeners'"),
        (parse_bound, {"phase": "mesh", "listeners": []}, "bound.phase: 'mesh' not allowed"),
        (parse_bound, {"phase": "bound", "listeners": [{"port": 1, "role": "mesh", "state": "ok",
                                                          "error": None, "holder": None}]},
         "bound.listeners[0]: no 'seen'"),
        (parse_listeners, ["listeners"], "listeners: an object expected, got ['listeners']"),
    ],
)  # fmt: skip
def test_a_report_of_another_shape_is_rejected_naming_the_path(parse, report, why) -> None:
    with pytest.raises(MalformedMessage) as raised:
        parse(report)
    assert str(raised.value) == why


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"ephemeral_range": [1024]}, "facts.ephemeral_range: two ports, low to high, expected"),
        ({"ephemeral_range": [60999, 32768]}, "facts.ephemeral_range: two ports, low to high"),
        ({"own_name": {"name": "n", "addresses": ["::1", "localhost"]}},
         "facts.own_name.addresses[1]: not an IP address: 'localhost'"),
        ({"interfaces": [{"name": "eth0", "up": True, "operstate": "up", "mtu": 1500,
                          "flags": [], "addresses": [{"family": "inet", "address": "10.0.0.1",
                                                      "prefixlen": 99}]}]},
         "facts.interfaces[0].addresses[0]: not an IP address: '10.0.0.1/99'"),
        ({"env": {"NCCL_SOCKET_IFNAME": ["eth0"]}}, "facts.env.NCCL_SOCKET_IFNAME: "),
        ({"firewall": {"nft": {"state": "ok", "text": 1}}}, "facts.firewall.nft.text: str"),
    ],
)  # fmt: skip
def test_facts_the_analysis_could_not_read_are_rejected(change: dict[str, Any], why: str) -> None:
    """Each of these once raised inside the analysis (unpacking the range, parsing the
    address) or reached the firewall parser as another type."""
    report = {**_wire(facts_report()), **change}
    with pytest.raises(MalformedMessage) as raised:
        parse_facts_report(report)
    assert str(raised.value).startswith(why)


class Replying:
    """A node process that answers every step with `report`."""

    def __init__(self, host: str, report: object) -> None:
        self.host, self.report = host, report

    def send(self, data: bytes) -> None:
        pass

    def expect(self, marker: bytes, deadline: Deadline) -> bytes | None:
        return encode(self.report)

    def finish(self, deadline: Deadline) -> CommandResult:
        return CommandResult(self.host, 0, b"", b"")


def test_a_malformed_report_fails_that_node_alone_with_one_line() -> None:
    nodes = NodeSessions({}, Deadline.after(30))
    nodes.processes = {"node1": Replying("node1", RECORDED_MESH),  # type: ignore[dict-item]
                       "node2": Replying("node2", _mesh(port="80; reboot"))}  # fmt: skip
    try:
        reports = nodes.step(
            "mesh", {"node1": {}, "node2": {}}, 5.0, Deadline.after(10), parse_mesh
        )
        assert list(reports) == ["node1"]
        assert nodes.errors == {
            "node2": "mesh step sent a malformed report: "
            "mesh.connects[0].port: int expected, got '80; reboot'"
        }
        assert [process.host for process in nodes.dropped] == ["node2"]
    finally:
        nodes.close()


def test_test_reports_are_what_the_parsers_accept() -> None:
    """The unit tests' report builders (tests/support/net_reports.py) run these parsers."""
    assert parse_facts_report(_wire(facts_report())) == facts_report()
    assert listener(29500, "master_port")["seen"] == []
