"""The network stage against real hosts: namespaces with sshd, real iptables faults, real SSH.

Every fault is injected for real and the findings must name the node, the pair, the port and
the rule; afterwards no process or listener of the stage may remain on any node.
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.session import Session
from clusterkit.framing import FrameError, decode
from clusterkit.net.steps import run_network_stage
from clusterkit.settings.loader import load_inventory
from clusterkit.transport.base import Deadline, RemoteProcess, Transport
from clusterkit.transport.connect import connect_all
from clusterkit.transport.endpoint import ConnectOptions
from tests.support.netcluster import NetCluster, Node, unavailable_reason

pytestmark = pytest.mark.cluster

CONNECT_TIMEOUT = 2.0
NODE_PYTHON = "/usr/bin/python3"  # what a stock Debian node has; starts fast


@pytest.fixture(scope="module")
def netcluster() -> Iterator[NetCluster]:
    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no test cluster here: {reason}")
    with NetCluster(4) as cluster:
        yield cluster


@pytest.fixture
def cluster(netcluster: NetCluster) -> Iterator[NetCluster]:
    netcluster.reset()
    yield netcluster
    netcluster.reset()


def run_stage(
    cluster: NetCluster, tmp_path: Path, host_vars: dict | None = None, **clusterkit
) -> tuple[dict, dict]:
    """Run the stage over real SSH; findings by id (several per id kept in a list)."""
    settings = {"network": {"connect_timeout": CONNECT_TIMEOUT}, **clusterkit}
    path = cluster.inventory(
        tmp_path / "inventory.yaml",
        python_interpreter=NODE_PYTHON,
        clusterkit=settings,
        host_vars=host_vars,
    )
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
    assert not connections.failures
    try:
        session = Session(inventory, transports=connections.transports)
        result = run_network_stage(session, Deadline.after(90))
        findings, raw = result.findings, result.details
    finally:
        connections.close()
    by_id: dict[str, list[Finding]] = {}
    for item in findings:
        by_id.setdefault(item.id, []).append(item)
    return by_id, raw


class LateGo:
    """Hands one node its "go" of one round late: only once every other node of the round has
    reported its mesh step, and `delay` seconds after that (more than the 3 s the listeners
    used to stay up after a node's own connects). Wraps the real transports; every byte still
    goes over SSH."""

    def __init__(
        self, transports: dict[str, Transport], late: str, delay: float, round_number: int = 1
    ) -> None:
        self.late, self.delay, self.round_number = late, delay, round_number
        self.others = len(transports) - 1
        self.reported: set[str] = set()  # other nodes that reported this round's mesh step
        self.changed = threading.Condition()
        self.gos = 0  # "go" messages handed to the late node so far
        self.held_for: float | None = None  # how long its "go" was held back
        self.transports = {host: self._wrap(host, t) for host, t in transports.items()}

    def _wrap(self, host: str, transport: Transport) -> Transport:
        late_go = self

        class Wrapped:
            def __getattr__(self, name: str) -> Any:
                return getattr(transport, name)

            def start(self, argv: list[str], **kwargs: Any) -> RemoteProcess:
                return late_go._process(host, transport.start(argv, **kwargs))

        return Wrapped()  # type: ignore[return-value]

    def _process(self, host: str, process: RemoteProcess) -> RemoteProcess:
        late_go = self
        send, expect = process.send, process.expect

        def held_send(data: bytes) -> None:
            if host == late_go.late and is_go(data):
                late_go._hold()
            send(data)

        def noted_expect(marker: bytes, deadline: Deadline) -> bytes | None:
            chunk = expect(marker, deadline)
            if chunk and host != late_go.late:
                late_go._note(host, chunk)
            return chunk

        process.send, process.expect = held_send, noted_expect  # type: ignore[method-assign]
        return process

    def _note(self, host: str, chunk: bytes) -> None:
        try:
            report = decode(chunk)
        except FrameError:
            return
        mesh = isinstance(report, dict) and report.get("phase") == "mesh"
        if mesh and report.get("round") == self.round_number:
            with self.changed:
                self.reported.add(host)
                self.changed.notify_all()

    def _hold(self) -> None:
        self.gos += 1
        if self.gos != self.round_number:
            return
        started = time.monotonic()
        with self.changed:
            everyone = self.changed.wait_for(lambda: len(self.reported) == self.others, 60)
        assert everyone, f"only {sorted(self.reported)} reported their mesh step"
        time.sleep(self.delay)  # the fault itself: a control side that hands "go" out late
        self.held_for = time.monotonic() - started


def is_go(data: bytes) -> bool:
    """Whether bytes handed to a node are a "go" message (not the script, not another step)."""
    try:
        message = json.loads(data)
    except ValueError:
        return False
    return isinstance(message, dict) and message.get("go") is True


def run_late_go(
    cluster: NetCluster,
    tmp_path: Path,
    late_go: dict[str, Any],
    mesh: str = "full",
    **clusterkit: Any,
) -> tuple[LateGo, dict[str, list[Finding]], dict]:
    """The stage over real SSH (--mesh full by default), one node's "go" held back (LateGo's
    arguments); findings by id."""
    settings = {"network": {"connect_timeout": CONNECT_TIMEOUT}, **clusterkit}
    path = cluster.inventory(
        tmp_path / "inventory.yaml", python_interpreter=NODE_PYTHON, clusterkit=settings
    )
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null", forks=64))
    assert not connections.failures
    held = LateGo(connections.transports, **late_go)
    try:
        session = Session(inventory, transports=held.transports)
        result = run_network_stage(session, Deadline.after(120), mesh=mesh)
        findings, raw = result.findings, result.details
    finally:
        connections.close()
    by_id: dict[str, list[Finding]] = {}
    for item in findings:
        by_id.setdefault(item.id, []).append(item)
    assert held.held_for is not None, "the late node never got its go"
    return held, by_id, raw


def seen_by(raw: dict, host: str, role: str = "mesh") -> set[str]:
    """Who reached `host`'s listener of `role` in the first round."""
    (listener,) = [item for item in raw["nodes"][host]["listeners"] if item["role"] == role]
    return set(listener["seen"])


def only(by_id: dict, check_id: str) -> Finding:
    assert len(by_id.get(check_id, [])) == 1, (check_id, by_id.get(check_id))
    return by_id[check_id][0]


def not_failing(by_id: dict) -> list[str]:
    return [
        f"{f.id}: {f.message}"
        for items in by_id.values()
        for f in items
        if f.status in (Status.FAIL, Status.ERROR)
    ]


def listeners(node: Node) -> set[int]:
    output = node.exec(["ss", "-Hltn"], check=True).stdout
    return {int(line.split()[3].rsplit(":", 1)[1]) for line in output.splitlines() if line}


def assert_nothing_left(cluster: NetCluster, keep: set[int] = frozenset(), ports=()) -> None:
    """No stage process and no listener but sshd's (and the test's own, when named)."""

    def left(node: Node) -> tuple[list[str], set[int]]:
        """The node's processes and listening ports that should be gone."""
        commands = [p.command for p in node.processes() if p.pid not in keep]
        return commands, listeners(node) - {22, *ports}

    give_up = time.monotonic() + 10  # sshd reaps its session children asynchronously
    while any(any(left(node)) for node in cluster) and time.monotonic() < give_up:
        time.sleep(0.1)
    for node in cluster:
        leftovers, open_ports = left(node)
        assert leftovers == [], (node.name, leftovers)
        assert open_ports == set(), node.name


def test_healthy_cluster_passes(cluster: NetCluster, tmp_path: Path) -> None:
    by_id, raw = run_stage(cluster, tmp_path)
    assert not_failing(by_id) == []
    assert all(f.status is Status.OK for items in by_id.values() for f in items), by_id
    for check_id in ("net.interface", "net.mtu", "net.master-resolve", "net.master-address",
                     "net.rendezvous", "net.mesh", "net.hostname-loopback"):  # fmt: skip
        assert only(by_id, check_id).status is Status.OK
    assert {cell for row in raw["matrix"].values() for cell in row.values()} == {"ok"}
    assert raw["nodes"]["node3"]["interface"]["address"] == cluster["node3"].address
    assert_nothing_left(cluster)


def test_master_dropping_rendezvous_ports_times_out_and_names_the_rule(
    cluster: NetCluster, tmp_path: Path
) -> None:
    rule = ["-A", "INPUT", "-p", "tcp", "-m", "multiport", "--dports", "29500,29400", "-j", "DROP"]
    cluster["node1"].iptables(*rule)
    by_id, raw = run_stage(cluster, tmp_path)

    rendezvous = only(by_id, "net.rendezvous")
    assert rendezvous.status is Status.FAIL
    assert {(b["from"], b["port"], b["result"]) for b in rendezvous.found} == {
        (node, port, "timeout") for node in ("node1", "node2", "node3", "node4")
        for port in (29500, 29400)
    }  # fmt: skip
    for attempt in raw["connects"]:
        if attempt["role"] in ("master_port", "rdzv_port"):
            assert attempt["seconds"] <= CONNECT_TIMEOUT + 0.5, attempt
    firewall = only(by_id, "net.firewall")
    assert firewall.hosts == ["node1"]
    assert "node1: INPUT rule -A INPUT -p tcp -m multiport --dports 29500,29400 -j DROP" in (
        firewall.message
    )
    assert "node2 -> node1:29500" in firewall.message
    assert only(by_id, "net.mesh").status is Status.OK
    assert_nothing_left(cluster)


def failing_cells(raw: dict) -> dict[tuple[str, str], str]:
    return {
        (src, dst): cell
        for src, row in raw["matrix"].items()
        for dst, cell in row.items()
        if cell != "ok"
    }


def test_one_node_rejecting_high_ports_from_one_peer_shows_that_pair_only(
    cluster: NetCluster, tmp_path: Path
) -> None:
    node2, node4 = cluster["node2"], cluster["node4"]
    node4.reject_high_ports_from(node2)
    ssh = subprocess.run(node2.ssh_argv("true"), capture_output=True, timeout=20, check=False)
    assert ssh.returncode == 0  # SSH to the node stays open: only high ports are blocked
    by_id, raw = run_stage(cluster, tmp_path)

    assert failing_cells(raw) == {("node2", "node4"): "refused"}
    mesh = only(by_id, "net.mesh")
    assert mesh.status is Status.FAIL
    assert {(b["from"], b["to"]) for b in mesh.found} == {("node2", "node4")}
    assert mesh.found[0]["port"] == raw["nodes"]["node4"]["mesh_port"]
    assert f"node2 -> node4:{mesh.found[0]['port']} refused" in mesh.message
    firewall = only(by_id, "net.firewall")
    assert firewall.hosts == ["node4"]
    assert (
        f"node4: INPUT rule -A INPUT -s {node2.address}/32 -p tcp -m tcp --dport 1024:65535 "
        "-j REJECT --reject-with icmp-port-unreachable blocks node2 -> node4:" in firewall.message
    )
    assert only(by_id, "net.rendezvous").status is Status.OK
    assert any("node2 -> node4: refused" in line for line in raw["matrix_lines"]) or any(
        line.startswith(" 2 node2") and line.split()[-1] == "R" for line in raw["matrix_lines"]
    )
    assert_nothing_left(cluster)


def test_stateless_reject_also_breaks_the_reverse_path_and_says_why(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """Without an ESTABLISHED rule, the same REJECT also eats the replies to node4's own
    connects to node2: both directions fail and both are traced to the one rule."""
    node2, node4 = cluster["node2"], cluster["node4"]
    node4.iptables(
        "-A", "INPUT", "-s", node2.address, "-p", "tcp", "--dport", "1024:65535", "-j", "REJECT"
    )
    by_id, raw = run_stage(cluster, tmp_path)

    assert failing_cells(raw) == {("node2", "node4"): "refused", ("node4", "node2"): "timeout"}
    firewall = only(by_id, "net.firewall")
    assert firewall.hosts == ["node4"]
    assert "(drops the replies) blocks node4 -> node2:" in firewall.message
    assert_nothing_left(cluster)


def test_mtu_mismatch_on_one_node(cluster: NetCluster, tmp_path: Path) -> None:
    cluster["node3"].set_mtu(1400)
    by_id, _raw = run_stage(cluster, tmp_path)
    mtu = only(by_id, "net.mtu")
    assert mtu.status is Status.FAIL
    assert mtu.hosts == ["node3"]
    assert (mtu.expected, mtu.found) == (1500, {"node3": 1400})
    assert "node3 eth0 mtu 1400" in mtu.message
    assert_nothing_left(cluster)


def test_master_name_resolving_to_a_wrong_address_on_one_node(
    cluster: NetCluster, tmp_path: Path
) -> None:
    wrong = f"{cluster.subnet}.250"
    cluster["node2"].set_hosts(node1=wrong)
    by_id, _raw = run_stage(cluster, tmp_path)

    resolve = only(by_id, "net.master-resolve")
    assert resolve.status is Status.FAIL
    assert resolve.hosts == ["node2"]
    assert resolve.found == {"node2": wrong}
    assert resolve.expected == cluster["node1"].address
    rendezvous = only(by_id, "net.rendezvous")
    assert rendezvous.status is Status.FAIL
    assert {b["from"] for b in rendezvous.found} == {"node2"}
    assert {b["result"] for b in rendezvous.found} <= {"timeout", "unreachable"}
    assert only(by_id, "net.master-address").status is Status.OK
    assert_nothing_left(cluster)


def test_rendezvous_port_already_taken_on_master(cluster: NetCluster, tmp_path: Path) -> None:
    holder = cluster["node1"].spawn(
        [NODE_PYTHON, "-c",
         "import socket, time\n"
         "s = socket.socket(); s.bind(('0.0.0.0', 29500)); s.listen(); time.sleep(120)"],
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while 29500 not in listeners(cluster["node1"]):
        assert time.monotonic() < deadline, "the stand-in job never listened"
        time.sleep(0.05)
    by_id, _raw = run_stage(cluster, tmp_path)

    in_use = only(by_id, "net.rendezvous-port-in-use")
    assert in_use.status is Status.FAIL
    assert in_use.hosts == ["node1"]
    assert [(item["port"], item["holder"]["pid"]) for item in in_use.found] == [(29500, holder.pid)]
    assert f"port 29500 on node1 is in use by another process (pid {holder.pid}" in (in_use.message)
    assert in_use.remedy is not None and "iptables" not in in_use.remedy
    assert "net.firewall" not in by_id  # a port in use is not a firewall problem
    rendezvous = only(by_id, "net.rendezvous")
    assert rendezvous.status is Status.OK and "29400" in rendezvous.message
    assert_nothing_left(cluster, keep={holder.pid}, ports={29500})


def test_missing_interface_name_on_one_node(cluster: NetCluster, tmp_path: Path) -> None:
    node3 = cluster["node3"]
    rename = ["ip", "-n", node3.netns, "link", "set", "dev"]
    subprocess.run([*rename, "eth0", "down", "name", "fab9"], check=True, timeout=20)
    subprocess.run([*rename, "fab9", "up"], check=True, timeout=20)
    try:
        by_id, raw = run_stage(cluster, tmp_path)
    finally:
        subprocess.run([*rename, "fab9", "down", "name", "eth0"], check=True, timeout=20)
        subprocess.run([*rename, "eth0", "up"], check=True, timeout=20)
    interface = only(by_id, "net.interface")
    assert interface.status is Status.FAIL
    assert interface.hosts == ["node3"]
    assert "node3: no interface matches clusterkit.interface=eth0 (has: fab9, lo)" in (
        interface.message
    )
    assert raw["nodes"]["node3"]["interface"]["name"] is None
    assert_nothing_left(cluster)


def test_unreachable_node_is_left_to_the_connect_stage(cluster: NetCluster, tmp_path: Path) -> None:
    """A node never connected is the connect stage's error (host.reachable): the network
    stage neither reports it again nor counts its pairs, and passes nothing about it."""
    path = cluster.inventory(tmp_path / "inventory.yaml", python_interpreter=NODE_PYTHON)
    inventory = load_inventory(path)
    connections = connect_all(inventory, ConnectOptions(ssh_config="/dev/null"))
    transports = dict(connections.transports)
    transports.pop("node4")
    try:
        result = run_network_stage(Session(inventory, transports=transports), Deadline.after(60))
        findings, raw = result.findings, result.details
    finally:
        connections.close()
    assert not [f for f in findings if f.id == "net.stage"]
    mesh = next(f for f in findings if f.id == "net.mesh")
    assert mesh.status is Status.OK and "node4" not in mesh.hosts
    assert "all 6 tested node pairs" in mesh.message  # 3 nodes, both ways
    assert "node4" not in raw["matrix"] and raw["matrix"]["node1"]["node2"] == "ok"
    assert raw["nodes"]["node4"] == {"ran": False}
    assert_nothing_left(cluster)


def test_a_node_without_its_python_is_dropped_and_the_rest_still_meshes(
    cluster: NetCluster, tmp_path: Path
) -> None:
    missing = {"node3": {"ansible_python_interpreter": "/opt/nowhere/python3"}}
    by_id, raw = run_stage(cluster, tmp_path, host_vars=missing)

    stage = only(by_id, "net.stage")
    assert (stage.status, stage.hosts) == (Status.ERROR, ["node3"])
    assert "facts step failed (exit 127)" in stage.message
    assert "/opt/nowhere/python3" in stage.message
    assert raw["matrix"]["node1"]["node3"] == "untested"
    others = ("node1", "node2", "node4")
    assert all(raw["matrix"][a][b] == "ok" for a in others for b in others if a != b)
    assert only(by_id, "net.rendezvous").status is Status.OK
    assert_nothing_left(cluster)


def test_a_node_too_slow_for_the_facts_bound_does_not_hold_up_the_others(
    cluster: NetCluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """node3's interpreter takes 30 s to start; with the facts step bounded at 2 s it is
    reported and killed, while the other nodes, which have been waiting for their plan since
    their own facts, still run the mesh among themselves."""
    from clusterkit.net import steps

    monkeypatch.setattr(steps, "FACTS_SECONDS", 1.0)
    monkeypatch.setattr(steps, "TRANSPORT_MARGIN", 1.0)
    slow = tmp_path / "slow-python3"
    slow.write_text(f'#!/bin/sh\nsleep 30\nexec {NODE_PYTHON} "$@"\n')
    slow.chmod(0o755)
    started = time.monotonic()
    by_id, raw = run_stage(
        cluster, tmp_path, host_vars={"node3": {"ansible_python_interpreter": str(slow)}}
    )
    assert time.monotonic() - started < 20  # nobody waited for node3's interpreter

    stage_error = only(by_id, "net.stage")
    assert (stage_error.status, stage_error.hosts) == (Status.ERROR, ["node3"])
    assert "facts step did not finish in time" in stage_error.message
    others = ("node1", "node2", "node4")
    assert all(raw["matrix"][a][b] == "ok" for a in others for b in others if a != b)
    assert only(by_id, "net.rendezvous").status is Status.OK
    assert_nothing_left(cluster)


def test_a_node_handed_go_late_still_reaches_every_listener(
    cluster: NetCluster, tmp_path: Path
) -> None:
    """node4 gets "go" only after every other node has finished its connects, and 4 s later:
    their listeners must still be up, since they close only once every node has reported.
    (With listeners closing a fixed hold after a node's own connects, node4's connects were
    all refused.)"""
    held, by_id, raw = run_late_go(cluster, tmp_path, {"late": "node4", "delay": 4.0})

    assert (held.held_for or 0) >= 4.0 and raw["mesh"]["rounds"][0]["go_spread"] >= 4.0
    assert not_failing(by_id) == []
    assert failing_cells(raw) == {}
    assert only(by_id, "net.mesh").status is Status.OK
    assert only(by_id, "net.rendezvous").status is Status.OK
    names = {node.name for node in cluster}
    for node in cluster:  # who connected, as each listener saw it when it closed
        assert seen_by(raw, node.name) == names - {node.name}, node.name
    assert seen_by(raw, "node1", "rdzv_port") == names  # node4 late, node1 itself included
    assert_nothing_left(cluster)
