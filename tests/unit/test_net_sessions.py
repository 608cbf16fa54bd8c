"""Every step of the network stage reaches every node at once, whatever their number: a node
here answers a step only once all nodes have been handed theirs (a barrier), so a control
side that talked to the nodes in batches would never get the first answers."""

from __future__ import annotations

import threading

from clusterkit.framing import encode
from clusterkit.net.stage import NodeSessions
from clusterkit.transport.base import CommandResult, Deadline

NODES = 150  # well past the old pool of 64


class BarrierProcess:
    def __init__(self, host: str, barrier: threading.Barrier) -> None:
        self.host, self.barrier = host, barrier
        self.sent: list[bytes] = []

    def send(self, data: bytes) -> None:
        self.sent.append(data)

    def expect(self, marker: bytes, deadline: Deadline) -> bytes | None:
        try:
            self.barrier.wait(timeout=deadline.remaining())
        except threading.BrokenBarrierError:
            return None
        return encode({"phase": "step", "host": self.host})

    def finish(self, deadline: Deadline) -> CommandResult:
        return CommandResult(self.host, 0, b"", b"")


class BarrierTransport:
    def __init__(self, host: str, barrier: threading.Barrier) -> None:
        self.host, self.barrier = host, barrier

    def start(self, argv, *, deadline: Deadline, start_by: Deadline) -> BarrierProcess:
        return BarrierProcess(self.host, self.barrier)


def sessions(workers: int | None) -> tuple[NodeSessions, list[str]]:
    barrier = threading.Barrier(NODES)
    hosts = [f"node{i}" for i in range(1, NODES + 1)]
    transports = {host: BarrierTransport(host, barrier) for host in hosts}
    return NodeSessions(transports, Deadline.after(60), workers), hosts  # type: ignore[arg-type]


def test_every_step_reaches_every_node_at_once() -> None:
    nodes, hosts = sessions(None)
    try:
        facts = nodes.start(hosts, dict.fromkeys(hosts, "python3"), {h: {} for h in hosts},
                            Deadline.after(20))  # fmt: skip
        assert sorted(facts) == sorted(hosts) and nodes.errors == {}
        for name in ("bound", "mesh", "listeners") * 2:  # two rounds
            reports = nodes.step(name, {h: {"go": True} for h in hosts}, Deadline.after(20))
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
