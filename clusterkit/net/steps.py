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
long for 32 nodes as for 4. `run_network_stage` is the three steps in turn: `gather_facts`,
`mesh_rounds` (bound, mesh and listeners, each round) and `network_report` (the verdict).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from clusterkit.contract.stage import StageResult
from clusterkit.net import analysis
from clusterkit.net.cover import Cut, MeshRounds, Pair, subnet_cuts
from clusterkit.net.ifname import InterfaceChoice
from clusterkit.net.matrix import build_matrix, pair_results, render_matrix, tested_pairs
from clusterkit.net.messages import (
    BoundReport,
    CloseMessage,
    Connect,
    FactsArgs,
    FactsReport,
    ListenerReport,
    ListenersReport,
    MeshReport,
    parse_bound,
    parse_listeners,
    parse_mesh,
)
from clusterkit.net.plan import (
    RENDEZVOUS,
    NetworkOptions,
    go_messages,
    interface_choices,
    listen_plans,
    subnets_of,
)
from clusterkit.net.sessions import (
    FACTS_SECONDS,
    TRANSPORT_MARGIN,
    NodeSessions,
    bounded,
)
from clusterkit.transport.base import Deadline

if TYPE_CHECKING:
    from clusterkit.contract.session import Session

MAX_ROUNDS = 3  # the mesh, the retest of the nodes it found failing, a cut that was none


@dataclass(frozen=True)
class NetworkScope:
    """Whom the stage acts on, and how: hosts in inventory order, every one (`everyone`) and
    those connected (`hosts`). Hosts never connected are the connect stage's errors
    (host.reachable), not this stage's: they are left out of the mesh and of its pair counts."""

    options: NetworkOptions
    everyone: list[str]
    hosts: list[str]
    interpreters: dict[str, str]
    addresses: dict[str, str]  # host -> its SSH address

    @classmethod
    def of(cls, session: Session, mesh: str | None) -> NetworkScope:
        inventory = session.inventory
        everyone = [host.name for host in inventory.hosts]
        return cls(
            options=NetworkOptions.from_inventory(inventory, mesh),
            everyone=everyone,
            hosts=[host for host in everyone if host in session.transports],
            interpreters={
                host.name: host.python_interpreter or "python3" for host in inventory.hosts
            },
            addresses={host.name: host.address for host in inventory.hosts},
        )

    @property
    def round_seconds(self) -> float:
        """A round's steps as each node sees them: bound, mesh, listeners."""
        return self.options.mesh_seconds + 3 * TRANSPORT_MARGIN

    @property
    def seconds(self) -> float:
        """The most the stage may last: facts and every round."""
        return FACTS_SECONDS + TRANSPORT_MARGIN + MAX_ROUNDS * self.round_seconds


@dataclass
class NetworkFacts:
    """The facts step: each node's report, the interface torch will use on it and the
    subnet that puts it in; `errors`: nodes that could not take part, and why."""

    by_host: dict[str, FactsReport] = field(default_factory=dict)
    choices: dict[str, InterfaceChoice] = field(default_factory=dict)
    subnets: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    errors: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class NodeRound:
    """One node's part of one round: its mesh report, and its listeners as they closed (who
    reached them), or as bound when it never said."""

    mesh: MeshReport
    listeners: list[ListenerReport]


@dataclass
class MeshResults:
    """The rounds step: every connect tried, and what each node reported in each round."""

    planned: set[Pair] | None  # the pairs tried; None: every pair (a full mesh)
    reports: dict[str, list[NodeRound]] = field(default_factory=dict)  # host -> per round
    connects: list[Connect] = field(default_factory=list)
    rounds: list[dict[str, Any]] = field(default_factory=list)  # pairs, nodes, go spread, seconds
    retested: set[str] = field(default_factory=set)
    unbound: dict[str, list[ListenerReport]] = field(default_factory=dict)  # could not bind
    errors: dict[str, str] = field(default_factory=dict)


def run_network_stage(
    session: Session, deadline: Deadline, *, mesh: str | None = None
) -> StageResult:
    """Stage "network": its findings, the raw per-host data for the JSON report, and the
    reachability matrix for the text report.

    The stage takes its own facts in its first step, not the probe's: they must come from
    the same moment and environment as the mesh. `session.workers`: nodes talked to at once
    (every node, as the runner sets it for this stage, for the barriers to hold on large
    clusters). `mesh`: full or auto (--mesh), over the inventory's `clusterkit.network.mesh`."""
    started = time.monotonic()
    scope = NetworkScope.of(session, mesh)
    sessions = NodeSessions(
        session.transports, bounded(deadline, scope.seconds), session.workers or len(scope.hosts)
    )
    try:
        found = gather_facts(sessions, scope, deadline)
        results = mesh_rounds(sessions, scope, found, deadline)
    finally:
        sessions.close()
    errors = {**found.errors, **results.errors, **sessions.errors}
    return network_report(scope, found, results, errors, started)


def gather_facts(sessions: NodeSessions, scope: NetworkScope, deadline: Deadline) -> NetworkFacts:
    """Step one: start the node script on every connected host; its first report is the
    node's facts (names as it resolves them, interfaces, ifname variables, firewall)."""
    started, options = time.monotonic(), scope.options
    reserved = [options.master_port, options.rdzv_port, *options.extra_ports]
    args = {
        host: FactsArgs(master=options.master_name, reserved_ports=reserved) for host in scope.hosts
    }
    # A node waits for each answer as long as the stage may last: after its mesh report its
    # listeners serve until the last node has reported, however late that node got "go".
    # A control side that went away closes the node's stdin, which ends it at once.
    wait = sessions.deadline.remaining()
    until = bounded(deadline, FACTS_SECONDS + TRANSPORT_MARGIN)
    by_host = sessions.start(scope.hosts, scope.interpreters, args, until, wait=wait)
    choices = interface_choices(by_host, options)
    found = NetworkFacts(by_host, choices, subnets_of(choices), time.monotonic() - started)
    if options.master_host in sessions.transports and options.master_host not in by_host:
        found.errors[options.master_host] = "no facts from the master"
    return found


def mesh_rounds(
    sessions: NodeSessions, scope: NetworkScope, found: NetworkFacts, deadline: Deadline
) -> MeshResults:
    """Step two: the mesh in rounds. The first tries every pair, or a covering set on large
    clusters (net/cover.py); each later round retests the nodes the last one found failing
    against everyone, in the same node processes, as long as the deadline leaves a round."""
    options = scope.options
    live = [host for host in scope.hosts if host in found.by_host]
    master = options.master_host if options.master_host in live else None
    plan = MeshRounds(live, found.subnets, master, covering=options.covering(len(live)))
    pairs = plan.first()
    results = MeshResults(planned=None if pairs is None else set(pairs))
    number = 1
    while live and (pairs is None or pairs):
        if not _time_for_round(scope, deadline, number, live, results):
            break
        live = _mesh_round(sessions, scope, found, live, pairs, number, results)
        if pairs is None or number == MAX_ROUNDS:
            break
        pairs = plan.next(
            pair_results(build_matrix(scope.hosts, results.connects, results.planned)), live
        )
        results.rounds[-1]["retest_next"] = sorted(
            plan.retested - results.retested, key=scope.hosts.index
        )
        results.retested = set(plan.retested)
        results.planned = (results.planned or set()) | pairs
        number += 1
    return results


def _time_for_round(
    scope: NetworkScope, deadline: Deadline, number: int, live: list[str], results: MeshResults
) -> bool:
    """Whether round `number` fits the deadline; if not, why goes where the report says it.
    A retest round needs its whole bound; the first runs on what is left."""
    needed = scope.round_seconds if number > 1 else scope.options.mesh_seconds
    if deadline.remaining() > needed:
        return True
    if number == 1:
        for host in live:
            results.errors.setdefault(host, "the check deadline left no time for the mesh step")
    else:
        results.rounds.append({"round": number, "skipped": "the check deadline left no time"})
    return False


def _mesh_round(
    sessions: NodeSessions,
    scope: NetworkScope,
    found: NetworkFacts,
    live: list[str],
    pairs: set[Pair] | None,
    number: int,
    results: MeshResults,
) -> list[str]:
    """One round, three barriers: every node binds its listeners, connects to the ports its
    targets bound ("go"), then reports who reached its listeners. Its reports go into
    `results`; returns the nodes still live after it."""
    started, options = time.monotonic(), scope.options
    plans = listen_plans(live, found.choices, options, round_number=number)
    # Each step's bound counts from when each node was handed its message.
    bound = sessions.step("bound", plans, TRANSPORT_MARGIN, sessions.deadline, parse_bound)
    listeners = {host: bound[host]["listeners"] for host in live if host in bound}
    _note_unbound(results.unbound, listeners)
    go = go_messages(listeners, found.by_host, found.choices, scope.addresses, options, pairs)
    reports = sessions.step(
        "mesh", go, options.mesh_seconds + TRANSPORT_MARGIN, sessions.deadline, parse_mesh
    )
    go_spread = sessions.spread()
    # Every node has connected: only now may the listeners close.
    close = {host: CloseMessage(close=True) for host in reports}
    closed = sessions.step("listeners", close, TRANSPORT_MARGIN, sessions.deadline, parse_listeners)
    for host, report in reports.items():
        heard = _heard(closed.get(host), bound[host])
        results.reports.setdefault(host, []).append(NodeRound(report, heard))
    results.connects += _flatten_connects(reports, number)
    results.rounds.append(
        {
            "round": number,
            "pairs": len(live) * (len(live) - 1) if pairs is None else len(pairs),
            "nodes": len(bound),
            "go_spread": round(go_spread, 3),
            "seconds": round(time.monotonic() - started, 3),
        }
    )
    return [host for host in live if host in closed]


def network_report(
    scope: NetworkScope,
    found: NetworkFacts,
    results: MeshResults,
    errors: dict[str, str],
    started: float,
) -> StageResult:
    """Step three: the verdict, a pure function of the facts and every connect tried."""
    hosts, options = scope.hosts, scope.options
    listeners = {host: reports[0].listeners for host, reports in results.reports.items()}
    matrix = build_matrix(hosts, results.connects, results.planned)
    cuts = subnet_cuts(pair_results(matrix), found.subnets)
    findings = analysis.stage_errors(errors)
    findings += analysis.interface_findings(found.choices, found.by_host)
    findings += analysis.ifname_findings(found.by_host, options)
    findings += analysis.master_findings(found.by_host, options)
    findings += analysis.connect_findings(
        hosts,
        results.connects,
        listeners,
        found.by_host,
        found.choices,
        options,
        matrix=matrix,
        cuts=cuts,
    )
    findings += analysis.port_findings(results.unbound)
    lines = render_matrix(matrix, hosts, cuts=cuts, subnets=found.subnets)
    details = {
        "master": {
            "host": options.master_host,
            "name": options.master_name,
            "master_port": options.master_port,
            "rdzv_port": options.rdzv_port,
        },
        "nodes": {
            host: _node_record(host, found.by_host, found.choices, results.reports)
            for host in scope.everyone
        },
        "mesh": _mesh_record(scope, results, matrix, cuts),
        "matrix": matrix,
        "matrix_lines": lines,
        "connects": results.connects,
        "errors": errors,
        "seconds": {
            "facts": round(found.seconds, 3) if found.by_host else None,
            "total": round(time.monotonic() - started, 3),
        },
    }
    return StageResult(findings, details, list(lines))


def _mesh_record(
    scope: NetworkScope, results: MeshResults, matrix: dict[str, dict[str, str]], cuts: list[Cut]
) -> dict[str, Any]:
    """How the mesh was tried: the mode, the pairs, the retests and rounds, the cuts."""
    hosts, options = scope.hosts, scope.options
    return {
        "mode": options.mesh,
        "covering": results.planned is not None,
        "full_mesh_up_to": options.full_mesh_up_to,
        "pairs_tested": tested_pairs(matrix),
        "pairs_total": len(hosts) * (len(hosts) - 1),
        "retested": sorted(results.retested, key=hosts.index),
        "cuts": [
            {"subnets": [cut.first, cut.second], "pairs": cut.pairs, "hosts": cut.hosts}
            for cut in cuts
        ],
        "rounds": results.rounds,
    }


def _flatten_connects(mesh: Mapping[str, MeshReport], number: int) -> list[Connect]:
    """Every connect attempt with its source and round; a clusterkit listener of another node
    answering (a wrong address) is not a success."""
    connects = []
    for host, result in mesh.items():
        for item in result["connects"]:
            entry: Connect = {**item, "from": host, "round": number}
            if entry["result"] == "ok" and entry["detail"] != entry["peer"]:
                entry["result"] = "wrong_node"
                entry["detail"] = f"{entry['detail']} answered instead of {entry['peer']}"
            connects.append(entry)
    return connects


def _note_unbound(
    unbound: dict[str, list[ListenerReport]], bound: Mapping[str, list[ListenerReport]]
) -> None:
    """Add each node's listeners that could not bind (once per port), but the master's
    rendezvous ports: net.rendezvous-port-in-use reports those."""
    for host, listeners in bound.items():
        for item in listeners:
            if item["state"] == "ok" or item["role"] in RENDEZVOUS:
                continue
            known = unbound.setdefault(host, [])
            if all((old["port"], old["role"]) != (item["port"], item["role"]) for old in known):
                known.append(item)


def _heard(closed: ListenersReport | None, bound: BoundReport) -> list[ListenerReport]:
    """A node's listeners with who reached them; as bound (`seen` None) for a node that
    never reported who reached them."""
    if closed is not None and closed["listeners"]:
        return closed["listeners"]
    return [{**item, "seen": None} for item in bound["listeners"]]


def _node_record(
    host: str,
    facts: Mapping[str, FactsReport],
    choices: Mapping[str, InterfaceChoice],
    mesh_reports: Mapping[str, list[NodeRound]],
) -> dict[str, Any]:
    node = facts.get(host)
    if node is None:
        return {"ran": False}
    choice = choices[host]
    reports = mesh_reports.get(host) or []
    return {
        "ran": True,
        "hostname": node["hostname"],
        "hostname_addresses": node["own_name"]["addresses"],
        "master_addresses": node["master"]["addresses"] if node["master"] else None,
        "interface": {
            "name": choice.name,
            "source": choice.source,
            "spec": choice.spec,
            "address": choice.address,
            "prefixlen": choice.prefixlen,
            "mtu": choice.mtu,
            "up": choice.up,
        },
        "env": node["env"],
        "ephemeral_range": node["ephemeral_range"],
        "mesh_port": _mesh_port(reports[0].listeners if reports else []),
        "firewall": {
            tool: {"state": entry.get("state"), "reason": entry.get("reason")}
            for tool, entry in node["firewall"].items()
        },
        "listeners": (reports[0].listeners if reports else None),
        "mesh_seconds": [report.mesh["seconds"] for report in reports],
        "cpu_seconds": reports[-1].mesh["cpu"] if reports else None,
    }


def _mesh_port(listeners: list[ListenerReport]) -> int | None:
    """The port the node's mesh listener bound in the first round (the kernel's choice)."""
    for item in listeners:
        if item["role"] == "mesh" and item["state"] == "ok":
            return item["port"]
    return None
