"""Every step of the network stage reaches every node at once, whatever their number: a node
here answers a step only once all nodes have been handed theirs (a barrier), so a control
side that talked to the nodes in batches would never get the first answers."""

from __future__ import annotations

import threading
import time

from clusterkit.framing import encode
from clusterkit.net.messages import parse_bound, parse_listeners, parse_mesh
from clusterkit.net.sessions import NodeSessions
from clusterkit.transport.base import CommandResult, Deadline
from tests.support.fake_transport import FakeTransport
from tests.support.net_reports import facts_report, listener

NODES = 150  # well past the old pool of 64
BOUND = {"phase": "bound", "listeners": [listener(41000, "mesh")]}
MESH = {"phase": "mesh", "round": 1, "connects": [], "seconds": 0.1, "cpu": 0.2}
LISTENERS = {"phase": "listeners", "round": 1, "listeners": [listener(41000, "mesh", seen=[])]}
PARSERS = {"bound": parse_bound, "mesh": parse_mesh, "listeners": parse_listeners}


class BarrierProcess:
    def __init__(self, host: str, barrier: threading.Barrier) -> None:
        self.host, self.barrier = host, barrier
        self.sent: list[bytes] = []
        self.reports = iter([facts_report(hostname=host), *[BOUND, MESH, LISTENERS] * 2])

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def expect(self, marker: bytes, deadline: Deadline) -> bytes | None:
        try:
            self.barrier.wait(timeout=deadline.remaining())
        except threading.BrokenBarrierError:
            return None
        return encode(next(self.reports))

    def finish(self, deadline: Deadline) -> CommandResult:
        return CommandResult(self.host, 0, b"", b"")


def barrier_node(host: str, barrier: threading.Barrier) -> FakeTransport:
    """A node whose network-stage process answers each step once every node has its own."""
    return FakeTransport(host, converse=lambda call: BarrierProcess(host, barrier))


def sessions(workers: int | None) -> tuple[NodeSessions, list[str]]:
    barrier = threading.Barrier(NODES)
    hosts = [f"node{i}" for i in range(1, NODES + 1)]
    transports = {host: barrier_node(host, barrier) for host in hosts}
    return NodeSessions(transports, Deadline.after(60), workers), hosts


def test_every_step_reaches_every_node_at_once() -> None:
    nodes, hosts = sessions(None)
    try:
        facts = nodes.start(hosts, dict.fromkeys(hosts, "python3"), {h: {} for h in hosts},
                            Deadline.after(20))  # fmt: skip
        assert sorted(facts) == sorted(hosts) and nodes.errors == {}
        for name in ("bound", "mesh", "listeners") * 2:  # two rounds
            messages = {h: {"go": True} for h in hosts}
            reports = nodes.step(name, messages, 20, Deadline.after(20), PARSERS[name])
            assert len(reports) == NODES and nodes.errors == {}
            assert len(nodes.sent) == NODES
    finally:
        nodes.close()


def test_a_batched_control_side_would_stall_at_the_first_barrier() -> None:
    nodes, hosts = sessions(64)
    try:
        facts = nodes.start(hosts, dict.fromkeys(hosts, "python3"), {h: {} for h in hosts},
                            Deadline.after(2))  # fmt: skip
        assert facts == {}
        assert set(nodes.errors) == set(hosts)
    finally:
        nodes.close()


class HandedLate:
    """A node answering at once, handed its message only `delay` seconds after `first`'s
    report came back (a control side slow to hand a message to every node)."""

    def __init__(self, host: str, first: threading.Event, delay: float) -> None:
        self.host, self.first, self.delay = host, first, delay

    def send(self, data: bytes) -> None:
        if self.delay:
            assert self.first.wait(20)
            time.sleep(self.delay)  # the fault: the hand-over itself is late

    def expect(self, marker: bytes, deadline: Deadline) -> bytes | None:
        if deadline.expired:
            return None
        if not self.delay:
            self.first.set()
        return encode(MESH)

    def finish(self, deadline: Deadline) -> CommandResult:
        return CommandResult(self.host, 0, b"", b"")


def test_a_steps_bound_counts_from_each_nodes_hand_over() -> None:
    """node2 is handed its message 1.5 s after node1 answered, with a 1 s bound per node: it
    still has its second, so neither node is reported for the control side's slowness."""
    first = threading.Event()
    nodes = NodeSessions({}, Deadline.after(60))
    nodes.processes = {"node1": HandedLate("node1", first, 0.0),  # type: ignore[dict-item]
                       "node2": HandedLate("node2", first, 1.5)}  # fmt: skip
    nodes.workers = 2
    reports = nodes.step("mesh", {"node1": {}, "node2": {}}, 1.0, Deadline.after(30), parse_mesh)
    assert sorted(reports) == ["node1", "node2"] and nodes.errors == {}
    assert nodes.spread() >= 1.5
