"""Ports of the network stage against real hosts: several checks at once on the same nodes,
and a port of the user's held by another process.

A mesh port planned from the host name was the same for every check run on a node: with two
runs interleaved, the second found the port taken when it bound, and its peers then
connected after the first run had closed it, a refused path blamed on the firewall. A user's
port held by some other program was likewise reported as a blocked path.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import Session
from clusterkit.framing import FrameError, decode
from clusterkit.net.steps import run_network_stage
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline, RemoteProcess, Transport
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.cluster.test_network_stage import (
    CONNECT_TIMEOUT,
    NODE_PYTHON,
    assert_nothing_left,
    failing_cells,
    listeners,
    not_failing,
    only,
    run_stage,
)
from tests.support.netcluster import NetCluster

GATE_SECONDS = 60.0  # the longest one run waits for the other at a gate
EXTRA_PORT = 29611


class Run:
    """One network stage over real SSH whose messages to the nodes can be held back until a
    condition holds (`gates`: message kind -> what to wait for), and whose nodes' reports are
    counted by phase, for the other run's gates to wait on."""

    def __init__(self, cluster: NetCluster, path: Path) -> None:
        self.inventory = load_inventory(path)
        self.nodes = len(cluster.nodes)
        self.gates: dict[str, Callable[[], bool]] = {}
        self.phases: dict[str, int] = {}
        self.changed = threading.Condition()
        self.done = False
        self.findings: dict[str, list[Finding]] = {}
        self.raw: dict[str, Any] = {}

    def reported(self, phase: str) -> Callable[[], bool]:
        """A condition: every node has made a report of this phase."""
        return lambda: self.phases.get(phase, 0) >= self.nodes

    def finished(self) -> bool:
        return self.done

    def wait(self, condition: Callable[[], bool], other: Run) -> None:
        with other.changed:
            assert other.changed.wait_for(condition, GATE_SECONDS), "the other run never got there"

    def run(self, other: Run) -> None:
        connections = connect_all(self.inventory, ConnectOptions(ssh_config="/dev/null"))
        assert not connections.failures
        transports = {host: self._wrap(t, other) for host, t in connections.transports.items()}
        try:
            session = Session(self.inventory, transports=transports)
            result = run_network_stage(session, Deadline.after(120))
            findings, self.raw = result.findings, result.details
        finally:
            connections.close()
            with self.changed:
                self.done = True
                self.changed.notify_all()
        for item in findings:
            self.findings.setdefault(item.id, []).append(item)

    def _wrap(self, transport: Transport, other: Run) -> Transport:
        run = self

        class Wrapped:
            def __getattr__(self, name: str) -> Any:
                return getattr(transport, name)

            def start(self, argv: list[str], **kwargs: Any) -> RemoteProcess:
                return run._process(transport.start(argv, **kwargs), other)

        return Wrapped()  # type: ignore[return-value]

    def _process(self, process: RemoteProcess, other: Run) -> RemoteProcess:
        send, expect = process.send, process.expect

        def gated_send(data: bytes) -> None:
            kind = message_kind(data)
            if kind in self.gates:
                self.wait(self.gates[kind], other)
            send(data)

        def counted_expect(marker: bytes, deadline: Deadline) -> bytes | None:
            chunk = expect(marker, deadline)
            if chunk:
                self._count(chunk)
            return chunk

        process.send, process.expect = gated_send, counted_expect  # type: ignore[method-assign]
        return process

    def _count(self, chunk: bytes) -> None:
        try:
            report = decode(chunk)
        except FrameError:
            return
        if isinstance(report, dict) and isinstance(report.get("phase"), str):
            with self.changed:
                self.phases[report["phase"]] = self.phases.get(report["phase"], 0) + 1
                self.changed.notify_all()


def message_kind(data: bytes) -> str | None:
    """ "plan", "go" or "close" for a step message handed to a node; None for the script."""
    try:
        message = json.loads(data)
    except ValueError:
        return None
    if not isinstance(message, dict):
        return None
    return next((kind for key, kind in KINDS if key in message), None)


KINDS = (("listen", "plan"), ("go", "go"), ("close", "close"))


def inventory(cluster: NetCluster, path: Path, **network: Any) -> Path:
    settings = {"network": {"connect_timeout": CONNECT_TIMEOUT, **network}}
    return cluster.inventory(path, python_interpreter=NODE_PYTHON, clusterkit=settings)


def test_two_checks_interleaved_on_the_same_nodes_test_their_own_ports(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """The interleaving that made the false failure, forced: both runs take their facts,
    `first` binds, `second` binds while `first` still listens, `first` finishes and closes,
    and only then does `second` connect. Each run must connect to the ports it bound itself:
    its mesh passes. The master's fixed rendezvous ports really were taken by `first` when
    `second` bound them, and that is what `second` reports: in use, not blocked."""
    first = Run(cluster, inventory(cluster, tmp_path / "first.yaml"))
    second = Run(cluster, inventory(cluster, tmp_path / "second.yaml"))
    first.gates = {"plan": second.reported("facts"), "go": second.reported("bound")}
    second.gates = {"plan": first.reported("bound"), "go": first.finished}
    errors: list[BaseException] = []

    def run(one: Run, other: Run) -> None:
        try:
            one.run(other)
        except BaseException as error:  # re-raised in the test's own thread
            errors.append(error)

    threads = [
        threading.Thread(target=run, args=(first, second)),
        threading.Thread(target=run, args=(second, first)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert not errors, errors
    assert not any(thread.is_alive() for thread in threads)

    assert not_failing(first.findings) == []
    for one in (first, second):
        assert only(one.findings, "net.mesh").status is Status.OK, one.findings["net.mesh"]
        assert failing_cells(one.raw) == {}
        assert "net.firewall" not in one.findings
    ports = [
        {first.raw["nodes"][n]["mesh_port"], second.raw["nodes"][n]["mesh_port"]}
        for n in ("node1", "node2", "node3", "node4")
    ]
    assert all(len(pair) == 2 for pair in ports), ports  # never the same port on a node
    in_use = only(second.findings, "net.rendezvous-port-in-use")
    assert "port 29500 on node1 is in use by another process" in in_use.message
    assert "port 29400 on node1 is in use by another process" in in_use.message
    assert [f for f in not_failing(second.findings) if "rendezvous-port-in-use" not in f] == []
    assert_nothing_left(cluster)


def test_three_checks_at_once_on_the_same_nodes_find_no_mesh_fault(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """Three stages started together, as three users' checks would be: whatever the timing,
    no mesh pair fails and nothing is blamed on a firewall; the only failure a run may report
    is the master's rendezvous port, in use by another run at that moment."""
    results: list[tuple[dict, dict] | BaseException] = []

    def one(index: int) -> None:
        try:
            results.append(run_stage(cluster, tmp_path / f"run{index}"))
        except BaseException as error:  # re-raised in the test's own thread
            results.append(error)

    for index in range(3):
        (tmp_path / f"run{index}").mkdir()
    threads = [threading.Thread(target=one, args=(index,)) for index in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(180)
    assert len(results) == 3 and not any(isinstance(r, BaseException) for r in results), results
    for by_id, raw in results:  # type: ignore[misc]
        assert only(by_id, "net.mesh").status is Status.OK, by_id["net.mesh"]
        assert failing_cells(raw) == {}
        assert "net.firewall" not in by_id
        unexpected = [f for f in not_failing(by_id) if "rendezvous-port-in-use" not in f]
        assert unexpected == []
        for item in by_id.get("net.rendezvous-port-in-use", []):
            assert "on node1 is in use by another process" in item.message
    assert_nothing_left(cluster)


def test_an_extra_port_held_by_another_process_is_in_use_not_blocked(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """A program on node3 listens on one of clusterkit.network.extra_ports and never answers:
    that is the port in use (named with the program), not a path the network blocks, and no
    peer's connect is sent to that program."""
    node3 = cluster["node3"]
    holder = node3.spawn(
        [NODE_PYTHON, "-c",
         "import socket, time\n"
         f"s = socket.socket(); s.bind(('0.0.0.0', {EXTRA_PORT})); s.listen(); time.sleep(120)"],
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while EXTRA_PORT not in listeners(node3):
        assert time.monotonic() < deadline, "the stand-in program never listened"
        time.sleep(0.05)
    network = {"connect_timeout": CONNECT_TIMEOUT, "extra_ports": [EXTRA_PORT]}
    by_id, raw = run_stage(cluster, tmp_path, network=network)

    in_use = only(by_id, "net.port-in-use")
    assert (in_use.status, in_use.hosts) == (Status.FAIL, ["node3"])
    assert f"port {EXTRA_PORT} on node3 is in use by another process (pid {holder.pid}" in (
        in_use.message
    )
    assert in_use.remedy is not None and "iptables" not in in_use.remedy
    assert "net.firewall" not in by_id
    assert only(by_id, "net.mesh").status is Status.OK
    assert failing_cells(raw) == {}  # node3's mesh port still tested from every peer
    assert not [
        c for c in raw["connects"] if c["peer"] == "node3" and c["port"] == EXTRA_PORT
    ]  # nothing sent to the other program
    assert any(c["port"] == EXTRA_PORT and c["result"] == "ok" for c in raw["connects"])
    assert_nothing_left(cluster, keep={holder.pid}, ports={EXTRA_PORT})
