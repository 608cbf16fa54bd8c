"""The `network` stage of `clusterkit check`: one node-side process per node, in steps.

facts: every node reports names as it resolves them, interfaces, ifname variables and its
firewall rules. bound: with every address planned from those facts, every node binds its
listeners: the user's fixed ports, and for the mesh whatever free port the kernel gives it
(so checks run at once on the same nodes never plan the same port). mesh: once all have
bound, "go" names each node's targets at the ports its peers bound, and every node
connects at once (every peer, or a covering set: net/cover.py). listeners: once
every node has connected, every node closes its listeners and reports who reached them, so
no listener closes while a peer handed "go" late may still connect. When a covering set
found failures, bound, mesh and listeners run again in the same node processes to retest
the failing nodes against everyone. Each step runs on all nodes in parallel and waits for
the slowest (a barrier), and every node-side step is bounded, so the stage takes about as
long for 32 nodes as for 4.
"""

from __future__ import annotations

import json
import time
from typing import Any

from clusterkit.checks.model import Finding
from clusterkit.framing import END
from clusterkit.inventory.model import Inventory
from clusterkit.net import analysis
from clusterkit.net.cover import MeshRounds, Pair, subnet_cuts
from clusterkit.net.ifname import InterfaceChoice
from clusterkit.net.matrix import build_matrix, pair_results, render_matrix, tested_pairs
from clusterkit.net.plan import (
    RENDEZVOUS,
    NetworkOptions,
    go_messages,
    interface_choices,
    listen_plans,
    subnets_of,
)
from clusterkit.nodescript import compose
from clusterkit.nodescript.run import (
    ScriptFailure,
    decode_result,
    failure_of,
    shipment,
)
from clusterkit.transport.base import Deadline, RemoteProcess, Transport
from clusterkit.transport.pool import parallel

FACTS_SECONDS = 15.0  # node-side resolver and tool bounds are 3 s and 5 s, run concurrently
TRANSPORT_MARGIN = 10.0  # SSH exec start and output transfer on a busy control machine
STOP_SECONDS = 3.0  # a node told to stop (or whose stdin closed) exits by then, or is killed
MAX_ROUNDS = 3  # the mesh, the retest of the nodes it found failing, a cut that was none


def node_script() -> bytes:
    """net/node.py composed with the node-side prelude."""
    return compose.node_script("clusterkit.net.node").encode()


class NodeSessions:
    """The node-side processes of one stage run, talked to step by step. A node that fails a
    step leaves the session with its reason in `errors` and is stopped in `close`."""

    def __init__(
        self, transports: dict[str, Transport], deadline: Deadline, workers: int | None = None
    ) -> None:
        """`workers`: nodes talked to at once; every node (the default) for a step to be a
        barrier: with fewer, the last nodes would get "go" only after the first finished."""
        self.transports, self.deadline = transports, deadline
        self.workers = workers or max(1, len(transports))
        self.processes: dict[str, RemoteProcess] = {}
        self.dropped: list[RemoteProcess] = []  # failed a step; ended with the rest in close
        self.errors: dict[str, str] = {}
        self.sent: dict[str, float] = {}  # host -> when its last message was handed over

    def start(
        self,
        hosts: list[str],
        interpreters: dict[str, str],
        args: dict[str, dict],
        until: Deadline,
        wait: float = FACTS_SECONDS + 2 * TRANSPORT_MARGIN,
    ) -> dict[str, dict[str, Any]]:
        """Start the node script everywhere and return each node's first report (facts).
        `wait`: how long a node waits for each answer, longer than any step lasts here."""
        source = node_script()

        def one(host: str) -> dict[str, Any]:
            argv, stdin = shipment(
                interpreters[host], source, [json.dumps(dict(args[host], wait=wait))]
            )
            process = self.transports[host].start(argv, deadline=self.deadline, start_by=until)
            self.processes[host] = process
            process.send(stdin)
            return self._report(process, until, "facts")

        return self._each(hosts, one)

    def step(
        self, name: str, messages: dict[str, dict[str, Any]], seconds: float, until: Deadline
    ) -> dict[str, dict[str, Any]]:
        """Send each live node its message and return its next report, due `seconds` after
        that node was handed its message and by `until` at the latest. Counted per node: on a
        busy control side handing a message to every node takes seconds, which must not be
        taken from the last nodes' time."""

        self.sent = {}

        def one(host: str) -> dict[str, Any]:
            process = self.processes[host]
            process.send(json.dumps(messages[host]).encode() + b"\n")
            self.sent[host] = handed = time.monotonic()  # written by the wait that follows
            return self._report(process, Deadline(min(until.at, handed + seconds)), name)

        return self._each([host for host in messages if host in self.processes], one)

    def spread(self) -> float:
        """Seconds between the first and the last node handed the last step's message."""
        return max(self.sent.values()) - min(self.sent.values()) if self.sent else 0.0

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
        """The step's report; ScriptFailure with the reason when none came."""
        chunk = process.expect(END, until)
        if chunk is None:
            if until.expired:
                raise ScriptFailure("timeout", f"{name} step did not finish in time")
            # It exited (no wait): why, from its exit status and stderr.
            raise failure_of(process.finish(Deadline.after(STOP_SECONDS)), f"{name} step")
        return decode_result(chunk, f"{name} step")


def _bounded(deadline: Deadline, seconds: float) -> Deadline:
    return Deadline(min(deadline.at, time.monotonic() + seconds))


def run_network_stage(
    transports: dict[str, Transport],
    inventory: Inventory,
    facts_by_host: dict[str, dict],
    deadline: Deadline,
    *,
    workers: int | None = None,
    mesh: str | None = None,
) -> tuple[list[Finding], dict]:
    """Findings of stage "network" and the raw per-host data for the JSON report.

    `facts_by_host` (the probe's facts) is accepted for the stage contract; this stage takes
    its own facts in its first step, because they must come from the same moment and
    environment as the mesh. Hosts of the inventory missing from `transports` are reported
    by the connect stage and left out of the mesh. `workers`: nodes talked to at once (every
    node, the default, for the barriers to hold on large clusters). `mesh`: full or auto
    (--mesh), over the inventory's `clusterkit.network.mesh`."""
    del facts_by_host
    started = time.monotonic()
    options = NetworkOptions.from_inventory(inventory, mesh)
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
    # A round's steps as each node sees them: bound, mesh, listeners.
    round_seconds = options.mesh_seconds + 3 * TRANSPORT_MARGIN
    whole = FACTS_SECONDS + TRANSPORT_MARGIN + MAX_ROUNDS * round_seconds
    sessions = NodeSessions(transports, _bounded(deadline, whole), workers or len(hosts))
    # A node waits for each answer as long as the stage may last: after its mesh report its
    # listeners serve until the last node has reported, however late that node got "go".
    # A control side that went away closes the node's stdin, which ends it at once.
    wait = sessions.deadline.remaining()
    mesh_reports: dict[str, list[dict[str, Any]]] = {}
    connects: list[dict[str, Any]] = []
    rounds: list[dict[str, Any]] = []  # per round: pairs, nodes, go spread, seconds
    planned: set[Pair] | None = None
    facts: dict[str, dict[str, Any]] = {}
    choices: dict[str, InterfaceChoice] = {}
    subnets: dict[str, str] = {}
    findings: list[Finding] = []
    facts_seconds = 0.0
    retested: set[str] = set()
    unbound: dict[str, list[dict[str, Any]]] = {}  # listeners a node could not bind
    try:
        facts = sessions.start(
            live,
            interpreters,
            facts_args,
            _bounded(deadline, FACTS_SECONDS + TRANSPORT_MARGIN),
            wait=wait,
        )
        live = [host for host in live if host in facts]
        facts_seconds = time.monotonic() - started

        choices = interface_choices(facts, options)
        subnets = subnets_of(choices)
        findings += analysis.interface_findings(choices, facts)
        findings += analysis.ifname_findings(facts, options)
        findings += analysis.master_findings(facts, options)

        if options.master_host in transports and options.master_host not in live:
            errors.setdefault(options.master_host, "no facts from the master")
        master = options.master_host if options.master_host in live else None
        plan = MeshRounds(live, subnets, master, covering=options.covering(len(live)))
        pairs = plan.first()
        planned = None if pairs is None else set(pairs)
        number = 1
        while live and (pairs is None or pairs):
            # A retest round needs its whole bound; the first runs on what is left.
            needed = round_seconds if number > 1 else options.mesh_seconds
            if deadline.remaining() <= needed:
                if number == 1:
                    for host in live:
                        errors.setdefault(host, "the check deadline left no time for the mesh step")
                else:
                    rounds.append({"round": number, "skipped": "the check deadline left no time"})
                break
            round_started = time.monotonic()
            plans = listen_plans(live, choices, options, round_number=number)
            # Each step's bound counts from when each node was handed its message.
            bound = sessions.step("bound", plans, TRANSPORT_MARGIN, sessions.deadline)
            bound_listeners = {
                host: bound[host].get("listeners") or [] for host in live if host in bound
            }
            _note_unbound(unbound, bound_listeners)
            go = go_messages(bound_listeners, facts, choices, ssh_addresses, options, pairs)
            reports = sessions.step(
                "mesh", go, options.mesh_seconds + TRANSPORT_MARGIN, sessions.deadline
            )
            go_spread = sessions.spread()
            # Every node has connected: only now may the listeners close.
            close = {host: {"close": True} for host in reports}
            closed = sessions.step("listeners", close, TRANSPORT_MARGIN, sessions.deadline)
            for host, report in reports.items():
                listened = closed.get(host) or {}
                heard = listened.get("listeners") or _unheard(bound[host].get("listeners"))
                mesh_reports.setdefault(host, []).append(dict(report, listeners=heard))
            connects += _flatten_connects(reports, number)
            rounds.append(
                {
                    "round": number,
                    "pairs": len(live) * (len(live) - 1) if pairs is None else len(pairs),
                    "nodes": len(bound),
                    "go_spread": round(go_spread, 3),
                    "seconds": round(time.monotonic() - round_started, 3),
                }
            )
            live = [host for host in live if host in closed]
            if pairs is None or number == MAX_ROUNDS:
                break
            results = pair_results(build_matrix(hosts, connects, planned))
            pairs = plan.next(results, live)
            rounds[-1]["retest_next"] = sorted(plan.retested - retested, key=hosts.index)
            retested = set(plan.retested)
            planned = (planned or set()) | pairs
            number += 1
    finally:
        sessions.close()
    errors.update(sessions.errors)

    first_round = {host: reports[0] for host, reports in mesh_reports.items()}
    listeners = {host: result.get("listeners") or [] for host, result in first_round.items()}
    matrix = build_matrix(hosts, connects, planned)
    cuts = subnet_cuts(pair_results(matrix), subnets)
    findings += analysis.connect_findings(
        hosts, connects, listeners, facts, choices, options, matrix=matrix, cuts=cuts
    )
    findings += analysis.port_findings(unbound)
    findings = analysis.stage_errors(errors) + findings

    raw = {
        "master": {
            "host": options.master_host,
            "name": options.master_name,
            "master_port": options.master_port,
            "rdzv_port": options.rdzv_port,
        },
        "nodes": {host: _node_record(host, facts, choices, mesh_reports) for host in everyone},
        "mesh": {
            "mode": options.mesh,
            "covering": planned is not None,
            "full_mesh_up_to": options.full_mesh_up_to,
            "pairs_tested": tested_pairs(matrix),
            "pairs_total": len(hosts) * (len(hosts) - 1),
            "retested": sorted(retested, key=hosts.index),
            "cuts": [
                {"subnets": [cut.first, cut.second], "pairs": cut.pairs, "hosts": cut.hosts}
                for cut in cuts
            ],
            "rounds": rounds,
        },
        "matrix": matrix,
        "matrix_lines": render_matrix(matrix, hosts, cuts=cuts, subnets=subnets),
        "connects": connects,
        "errors": errors,
        "seconds": {
            "facts": round(facts_seconds, 3) if facts else None,
            "total": round(time.monotonic() - started, 3),
        },
    }
    return findings, raw


def _flatten_connects(mesh: dict[str, dict[str, Any]], number: int) -> list[dict[str, Any]]:
    """Every connect attempt with its source and round; a clusterkit listener of another node
    answering (a wrong address) is not a success."""
    connects = []
    for host, result in mesh.items():
        for item in result.get("connects") or []:
            entry = dict(item, **{"from": host, "round": number})
            if entry.get("result") == "ok" and entry.get("detail") != entry.get("peer"):
                entry["result"] = "wrong_node"
                entry["detail"] = f"{entry.get('detail')} answered instead of {entry['peer']}"
            connects.append(entry)
    return connects


def _note_unbound(
    unbound: dict[str, list[dict[str, Any]]], bound: dict[str, list[dict[str, Any]]]
) -> None:
    """Add each node's listeners that could not bind (once per port), but the master's
    rendezvous ports: net.rendezvous-port-in-use reports those."""
    for host, listeners in bound.items():
        for item in listeners:
            if item.get("state") == "ok" or item.get("role") in RENDEZVOUS:
                continue
            known = unbound.setdefault(host, [])
            if all((old["port"], old["role"]) != (item["port"], item["role"]) for old in known):
                known.append(item)


def _unheard(listeners: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """A node's listeners as bound, for a node that never reported who reached them."""
    return [dict(item, seen=None) for item in listeners or []]


def _node_record(host, facts, choices, mesh_reports) -> dict[str, Any]:
    node = facts.get(host)
    if node is None:
        return {"ran": False}
    choice = choices[host]
    reports = mesh_reports.get(host) or []
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
        "mesh_port": _mesh_port(reports[0].get("listeners") if reports else None),
        "firewall": {
            tool: {"state": entry.get("state"), "reason": entry.get("reason")}
            for tool, entry in (node.get("firewall") or {}).items()
        },
        "listeners": (reports[0].get("listeners") if reports else None),
        "mesh_seconds": [report.get("seconds") for report in reports],
        "cpu_seconds": reports[-1].get("cpu") if reports else None,
    }


def _mesh_port(listeners: list[dict[str, Any]] | None) -> int | None:
    """The port the node's mesh listener bound in the first round (the kernel's choice)."""
    for item in listeners or []:
        if item.get("role") == "mesh" and item.get("state") == "ok":
            return item.get("port")
    return None
