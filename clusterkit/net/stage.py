"""The `network` stage of `clusterkit check`: one node-side process per node, in three steps.

facts: every node reports names as it resolves them, interfaces, ifname variables, a free
mesh port and its firewall rules. bound: with every port and address planned from those
facts, every node binds its listeners. mesh: once all have bound, every node connects to
every peer at once. Each step runs on all nodes in parallel and waits for the slowest
(a barrier), and every node-side step is bounded, so the stage takes about as long for 32
nodes as for 4.
"""

from __future__ import annotations

import json
import time
from importlib import resources
from typing import Any

from clusterkit.checks.model import Finding
from clusterkit.framing import END, FrameError, decode
from clusterkit.inventory.model import Inventory
from clusterkit.net import analysis
from clusterkit.net.matrix import build_matrix, render_matrix
from clusterkit.net.plan import NetworkOptions, interface_choices, mesh_args
from clusterkit.transport.base import Deadline, RemoteProcess, Transport
from clusterkit.transport.pool import parallel

FACTS_SECONDS = 15.0  # node-side resolver and tool bounds are 3 s and 5 s, run concurrently
TRANSPORT_MARGIN = 10.0  # SSH exec start and output transfer on a busy control machine
STOP_SECONDS = 3.0  # a node told to stop (or whose stdin closed) exits by then, or is killed

# Reads the node script (its length is argv[1]) from stdin and runs it, leaving stdin to the
# conversation that follows. -S: the script is stdlib only; skipping site saves every node
# a few ms of CPU.
BOOTSTRAP = (
    "import os,sys\n"
    "n=int(sys.argv[1]);s=b''\n"
    "while len(s)<n:\n"
    " c=os.read(0,n-len(s))\n"
    " if not c:sys.exit(3)\n"
    " s+=c\n"
    "del sys.argv[1]\n"
    "exec(compile(s,'clusterkit-net-node','exec'))\n"
)


def node_script() -> bytes:
    return resources.files("clusterkit.net").joinpath("node.py").read_bytes()


class NodeSessions:
    """The node-side processes of one stage run, talked to step by step. A node that fails a
    step leaves the session with its reason in `errors` and is stopped in `close`."""

    def __init__(
        self, transports: dict[str, Transport], deadline: Deadline, workers: int = 64
    ) -> None:
        self.transports, self.deadline, self.workers = transports, deadline, workers
        self.processes: dict[str, RemoteProcess] = {}
        self.dropped: list[RemoteProcess] = []  # failed a step; ended with the rest in close
        self.errors: dict[str, str] = {}

    def start(
        self, hosts: list[str], interpreters: dict[str, str], args: dict[str, dict], until: Deadline
    ) -> dict[str, dict[str, Any]]:
        """Start the node script everywhere and return each node's first report (facts)."""
        source = node_script()

        def one(host: str) -> dict[str, Any]:
            argv = [interpreters[host], "-S", "-c", BOOTSTRAP, str(len(source))]
            # A node waits for each answer longer than any step can last on this side.
            wait = FACTS_SECONDS + 2 * TRANSPORT_MARGIN
            argv.append(json.dumps(dict(args[host], wait=wait)))
            process = self.transports[host].start(argv, deadline=self.deadline, start_by=until)
            self.processes[host] = process
            process.send(source)
            return self._report(process, until, "facts")

        return self._each(hosts, one)

    def step(
        self, name: str, messages: dict[str, dict[str, Any]], until: Deadline
    ) -> dict[str, dict[str, Any]]:
        """Send each live node its message and return its next report."""

        def one(host: str) -> dict[str, Any]:
            process = self.processes[host]
            process.send(json.dumps(messages[host]).encode() + b"\n")
            return self._report(process, until, name)

        return self._each([host for host in messages if host in self.processes], one)

    def close(self) -> None:
        """End every node process: stdin closes, so each exits at once; killed otherwise."""
        processes = [*self.processes.values(), *self.dropped]
        self.processes, self.dropped = {}, []
        parallel(
            lambda process: process.finish(Deadline.after(STOP_SECONDS)),
            processes,
            workers=self.workers,
        )

    def _each(self, hosts: list[str], fn) -> dict[str, dict[str, Any]]:
        """Run one step everywhere. A node that fails it leaves the session at once but is
        stopped only in `close`: killing a stuck one takes seconds the others must not wait."""
        reports: dict[str, dict[str, Any]] = {}
        for host, outcome in zip(hosts, parallel(fn, hosts, workers=self.workers), strict=True):
            if isinstance(outcome, BaseException):
                self.errors[host] = str(outcome) or type(outcome).__name__
                if host in self.processes:
                    self.dropped.append(self.processes.pop(host))
            else:
                reports[host] = outcome
        return reports

    @staticmethod
    def _report(process: RemoteProcess, until: Deadline, name: str) -> dict[str, Any]:
        chunk = process.expect(END, until)
        if chunk is None:
            if until.expired:
                raise RuntimeError(f"{name} step did not finish in time")
            result = process.finish(Deadline.after(STOP_SECONDS))  # it exited: no wait
            if not result.timed_out and result.exit_code is not None:
                tail = result.stderr_tail() or "no report"
                raise RuntimeError(f"{name} step failed (exit {result.exit_code}): {tail}")
            raise RuntimeError(f"{name} step did not finish in time")
        try:
            payload = decode(chunk)
        except FrameError as error:
            raise RuntimeError(f"{name} step sent a broken report: {error}") from None
        if not isinstance(payload, dict):
            raise RuntimeError(f"{name} step returned no result")
        if payload.get("error"):
            raise RuntimeError(payload["error"])
        return payload


def _bounded(deadline: Deadline, seconds: float) -> Deadline:
    return Deadline(min(deadline.at, time.monotonic() + seconds))


def run_network_stage(
    transports: dict[str, Transport],
    inventory: Inventory,
    facts_by_host: dict[str, dict],
    deadline: Deadline,
    *,
    workers: int = 64,
) -> tuple[list[Finding], dict]:
    """Findings of stage "network" and the raw per-host data for the JSON report.

    `facts_by_host` (the probe's facts) is accepted for the stage contract; this stage takes
    its own facts in its first step, because they must come from the same moment and
    environment as the mesh. Hosts of the inventory missing from `transports` are reported
    by the connect stage and left out of the mesh. `workers`: nodes talked to at once (every
    node, for the barriers to hold on large clusters)."""
    del facts_by_host
    started = time.monotonic()
    options = NetworkOptions.from_inventory(inventory)
    hosts = [host.name for host in inventory.hosts]
    interpreters = {host.name: host.python_interpreter or "python3" for host in inventory.hosts}
    ssh_addresses = {host.name: host.address for host in inventory.hosts}
    # Hosts never connected are the connect stage's errors (host.reachable), not this
    # stage's: they are left out of the mesh and of its pair counts.
    everyone, hosts = hosts, [host for host in hosts if host in transports]
    errors: dict[str, str] = {}
    live = list(hosts)

    reserved = [options.master_port, options.rdzv_port, *options.extra_ports]
    facts_args = {
        host: {"master": options.master_name, "reserved_ports": reserved} for host in live
    }
    whole = FACTS_SECONDS + options.mesh_seconds + 3 * TRANSPORT_MARGIN
    sessions = NodeSessions(transports, _bounded(deadline, whole), workers)
    mesh: dict[str, dict[str, Any]] = {}
    try:
        facts = sessions.start(
            live, interpreters, facts_args, _bounded(deadline, FACTS_SECONDS + TRANSPORT_MARGIN)
        )
        live = [host for host in live if host in facts]
        facts_seconds = time.monotonic() - started

        choices = interface_choices(facts, options)
        findings: list[Finding] = []
        findings += analysis.interface_findings(choices, facts)
        findings += analysis.ifname_findings(facts, options)
        findings += analysis.master_findings(facts, options)

        if options.master_host in transports and options.master_host not in live:
            errors.setdefault(options.master_host, "no facts from the master")
        if live and deadline.remaining() > options.mesh_seconds:
            plans = mesh_args(live, facts, choices, ssh_addresses, options)
            bound = sessions.step("bound", plans, _bounded(deadline, TRANSPORT_MARGIN))
            go = {host: {"go": True} for host in bound}
            mesh = sessions.step(
                "mesh", go, _bounded(deadline, options.mesh_seconds + TRANSPORT_MARGIN)
            )
        elif live:
            for host in live:
                errors.setdefault(host, "the check deadline left no time for the mesh step")
    finally:
        sessions.close()
    errors.update(sessions.errors)

    connects = _flatten_connects(mesh)
    listeners = {host: result.get("listeners") or [] for host, result in mesh.items()}
    findings += analysis.connect_findings(hosts, connects, listeners, facts, choices, options)
    findings = analysis.stage_errors(errors) + findings

    matrix = build_matrix(hosts, connects)
    raw = {
        "master": {
            "host": options.master_host,
            "name": options.master_name,
            "master_port": options.master_port,
            "rdzv_port": options.rdzv_port,
        },
        "nodes": {host: _node_record(host, facts, choices, mesh) for host in everyone},
        "matrix": matrix,
        "matrix_lines": render_matrix(matrix, hosts),
        "connects": connects,
        "errors": errors,
        "seconds": {
            "facts": round(facts_seconds, 3),
            "total": round(time.monotonic() - started, 3),
        },
    }
    return findings, raw


def _flatten_connects(mesh: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Every connect attempt with its source; a clusterkit listener of another node answering
    (a wrong address) is not a success."""
    connects = []
    for host, result in mesh.items():
        for item in result.get("connects") or []:
            entry = dict(item, **{"from": host})
            if entry.get("result") == "ok" and entry.get("detail") != entry.get("peer"):
                entry["result"] = "wrong_node"
                entry["detail"] = f"{entry.get('detail')} answered instead of {entry['peer']}"
            connects.append(entry)
    return connects


def _node_record(host, facts, choices, mesh) -> dict[str, Any]:
    node = facts.get(host)
    if node is None:
        return {"ran": False}
    choice = choices[host]
    return {
        "ran": True,
        "hostname": node.get("hostname"),
        "hostname_addresses": (node.get("own_name") or {}).get("addresses"),
        "master_addresses": (node.get("master") or {}).get("addresses"),
        "interface": {
            "name": choice.name,
            "source": choice.source,
            "spec": choice.spec,
            "address": choice.address,
            "prefixlen": choice.prefixlen,
            "mtu": choice.mtu,
            "up": choice.up,
        },
        "env": node.get("env"),
        "ephemeral_range": node.get("ephemeral_range"),
        "mesh_port": node.get("mesh_port"),
        "firewall": {
            tool: {"state": entry.get("state"), "reason": entry.get("reason")}
            for tool, entry in (node.get("firewall") or {}).items()
        },
        "listeners": (mesh.get(host) or {}).get("listeners"),
        "mesh_seconds": (mesh.get(host) or {}).get("seconds"),
    }
