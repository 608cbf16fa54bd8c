"""Reachability from the connect results: the rendezvous, the mesh's matrix of node pairs,
and subnets cut off from each other (pure).

Check ids: net.rendezvous, net.mesh, net.subnet-cut. Apart from the per-node comparisons: these
judge paths between nodes, and ask attribution.py why a failed one failed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence

from clusterkit.checks.model import Finding, Status
from clusterkit.net.attribution import Blocked, blocked_dict, explain_connect, firewall_findings
from clusterkit.net.cover import UNKNOWN_SUBNET, Cut
from clusterkit.net.finding import MESSAGE_PAIRS, finding, more
from clusterkit.net.ifname import InterfaceChoice
from clusterkit.net.matrix import build_matrix, failing_pairs, tested_pairs
from clusterkit.net.messages import (
    Connect,
    FactsReport,
    ListenerReport,
)
from clusterkit.net.plan import NetworkOptions
from clusterkit.net.ports import port_in_use_finding
from clusterkit.words import counted

CUT_SAMPLE = 4  # failed connects across a cut whose firewalls are read for an explanation


def connect_findings(
    hosts: Sequence[str],
    connects: Sequence[Connect],
    listeners: Mapping[str, list[ListenerReport]],
    facts_by_host: Mapping[str, FactsReport],
    choices: Mapping[str, InterfaceChoice],
    options: NetworkOptions,
    *,
    matrix: dict[str, dict[str, str]] | None = None,
    cuts: Sequence[Cut] = (),
) -> list[Finding]:
    """net.rendezvous-port-in-use, net.rendezvous, net.mesh, net.subnet-cut,
    net.firewall(-unknown). `matrix`: the pairs the mesh tested (every pair when None);
    `cuts`: subnet pairs cut from each other (cover.subnet_cuts), reported once each
    instead of pair by pair."""
    master = options.master_host
    in_use = {
        item["port"]: item
        for item in listeners.get(master, [])
        if item["role"] in ("master_port", "rdzv_port") and item["state"] != "ok"
    }
    findings = [port_in_use_finding(master, in_use)] if in_use else []
    all_blocked: list[Blocked] = []
    reached: list[str] = []
    for port, role in options.rendezvous_ports:
        if port in in_use or master not in listeners:
            continue
        failed = [c for c in connects if c["role"] == role and c["result"] != "ok"]
        all_blocked += [explain_connect(c, facts_by_host, choices) for c in failed]
        if not failed:
            reached.append(f"{role} {port}")
    if all_blocked:
        findings.append(_rendezvous_blocked(all_blocked, options, choices, cuts))
    elif reached:
        findings.append(
            finding(
                "net.rendezvous",
                Status.OK,
                f"every node reached {' and '.join(reached)} on {master}",
                hosts=[master],
            )
        )
    if matrix is None:
        matrix = build_matrix(hosts, connects)
    findings += _mesh_findings(hosts, connects, facts_by_host, choices, all_blocked, matrix, cuts)
    return findings


def _rendezvous_blocked(
    blocked: list[Blocked],
    options: NetworkOptions,
    choices: Mapping[str, InterfaceChoice],
    cuts: Sequence[Cut],
) -> Finding:
    """net.rendezvous failing: the nodes that could not reach the master's ports, and why."""
    master = options.master_host
    ports = sorted({b.port for b in blocked})
    return finding(
        "net.rendezvous",
        Status.FAIL,
        f"rendezvous on {master} not reachable: "
        + _rendezvous_text(blocked, master, choices, cuts),
        hosts=sorted({master} | {b.source for b in blocked}),
        expected=f"every node connects to {master} on "
        + ", ".join(str(p) for p, _ in options.rendezvous_ports),
        found=[blocked_dict(b) for b in blocked],
        remedy=f"open TCP {', '.join(map(str, ports))} on {master} to every node (e.g. "
        f"iptables -I INPUT -p tcp -m multiport --dports {','.join(map(str, ports))} "
        "-j ACCEPT)",
    )


def _rendezvous_text(
    blocked: list[Blocked],
    master: str,
    choices: Mapping[str, InterfaceChoice],
    cuts: Sequence[Cut],
) -> str:
    """The blocked rendezvous paths; those from a subnet cut off from the master's are
    counted, not listed (net.subnet-cut names the cut)."""
    home = _subnet(choices.get(master))
    cut_off = {
        cut.second if cut.first == home else cut.first
        for cut in cuts
        if home in (cut.first, cut.second)
    }
    across = [b for b in blocked if _subnet(choices.get(b.source)) in cut_off]
    shown = [b for b in blocked if b not in across]
    parts = []
    if across:
        nodes = {b.source for b in across}
        parts.append(
            f"{counted(len(nodes), 'node')} of {', '.join(sorted(cut_off))}, cut off from "
            f"{master}'s "
            f"subnet {home} (net.subnet-cut)"
        )
    parts += [b.describe() for b in shown[:MESSAGE_PAIRS]]
    return "; ".join(parts) + more(shown, "; and {} more")


def _mesh_findings(
    hosts: Sequence[str],
    connects: Sequence[Connect],
    facts_by_host: Mapping[str, FactsReport],
    choices: Mapping[str, InterfaceChoice],
    rendezvous_blocked: list[Blocked],
    matrix: dict[str, dict[str, str]],
    cuts: Sequence[Cut],
) -> list[Finding]:
    subnets = {host: _subnet(choices.get(host)) for host in hosts}
    cut_keys = {(cut.first, cut.second) for cut in cuts}

    def across_cut(src: str, dst: str) -> bool:
        first, second = sorted((subnets[src], subnets[dst]))
        return (first, second) in cut_keys

    failing_all = [(src, dst) for src, dst, _ in failing_pairs(matrix)]
    failing = {pair for pair in failing_all if not across_cut(*pair)}
    failed_connects = [
        c
        for c in connects
        if c["role"] in ("mesh", "extra")
        and c["result"] != "ok"
        and (c["from"], c["peer"]) in failing
    ]
    blocked = [explain_connect(c, facts_by_host, choices) for c in failed_connects]
    findings = [_mesh_finding(hosts, matrix, failing, len(failing_all) - len(failing), blocked)]
    findings += _cut_findings(cuts, subnets, connects, facts_by_host, choices, across_cut)
    findings += firewall_findings(blocked + rendezvous_blocked, choices)
    return findings


def _mesh_finding(
    hosts: Sequence[str],
    matrix: dict[str, dict[str, str]],
    failing: set[tuple[str, str]],
    across: int,
    blocked: list[Blocked],
) -> Finding:
    """net.mesh: every tested pair opens TCP both ways, but those across a cut (`across`
    of them), which net.subnet-cut reports."""
    total = len(matrix) * (len(matrix) - 1)
    tested = tested_pairs(matrix)
    of_total = f" (of {total} that exist: a covering set)" if tested < total else ""
    if blocked:
        isolated = _isolated(matrix, failing)
        alone = "".join(
            f"{host} fails all {count} tested pairs with it; " for host, count in isolated.items()
        )
        return finding(
            "net.mesh",
            Status.FAIL,
            f"{len(failing)} of {tested} tested node pairs{of_total} cannot open TCP: "
            + alone
            + "; ".join(b.describe() for b in blocked[:MESSAGE_PAIRS])
            + (
                f"; and {len(blocked) - MESSAGE_PAIRS} more" if len(blocked) > MESSAGE_PAIRS else ""
            ),
            hosts=sorted({b.source for b in blocked} | {b.destination for b in blocked}),
            expected="all TCP between cluster nodes open on the collective interface",
            found=[blocked_dict(b) for b in blocked],
            remedy="allow all TCP between the cluster nodes on the collective interface "
            "(NCCL and gloo use ephemeral ports in both directions)",
        )
    if tested:
        return finding(
            "net.mesh",
            Status.OK,
            f"all {tested - across} tested node pairs{of_total} open TCP both ways"
            + (f", but for the {across} across cut subnets (net.subnet-cut)" if across else ""),
            hosts=list(hosts),
        )
    # an OK over no pair would be a pass about nothing
    return finding(
        "net.mesh", Status.SKIP, "no node pair could be tested (fewer than two nodes took part)"
    )


def _subnet(choice: InterfaceChoice | None) -> str:
    network = choice.network if choice is not None else None
    return str(network) if network is not None else UNKNOWN_SUBNET


def _isolated(matrix: dict[str, dict[str, str]], failing: set[tuple[str, str]]) -> dict[str, int]:
    """Nodes every tested pair of which failed (at least two): the node, not its peers."""
    tested: Counter[str] = Counter()
    bad: Counter[str] = Counter()
    for src, row in matrix.items():
        for dst, result in row.items():
            if result == "untested":
                continue
            tested.update((src, dst))
            if (src, dst) in failing:
                bad.update((src, dst))
    return {
        host: tested[host] for host in matrix if tested[host] >= 2 and bad[host] == tested[host]
    }


def _cut_findings(
    cuts: Sequence[Cut],
    subnets: dict[str, str],
    connects: Sequence[Connect],
    facts_by_host: Mapping[str, FactsReport],
    choices: Mapping[str, InterfaceChoice],
    across_cut: Callable[[str, str], bool],
) -> list[Finding]:
    """One finding for every cut subnet pair, with what a sample of its pairs shows."""
    networks = sorted({subnet for subnet in subnets.values() if subnet != UNKNOWN_SUBNET})
    if len(networks) < 2:
        return []
    if not cuts:
        return [
            finding(
                "net.subnet-cut",
                Status.OK,
                f"no two of the {len(networks)} subnets are cut off from each other",
                found=networks,
            )
        ]
    parts, found = [], []
    for cut in cuts:
        sample = [
            c
            for c in connects
            if c["role"] in ("mesh", "extra")
            and c["result"] != "ok"
            and across_cut(c["from"], c["peer"])
            and sorted((subnets[c["from"]], subnets[c["peer"]])) == [cut.first, cut.second]
        ][:CUT_SAMPLE]
        part, entry = _cut_sample(cut, sample, facts_by_host, choices)
        parts.append(part)
        found.append(entry)
    names = ", ".join(f"{cut.first} and {cut.second}" for cut in cuts)
    return [
        finding(
            "net.subnet-cut",
            Status.FAIL,
            "subnets cut off from each other: " + "; ".join(parts),
            found=found,
            remedy=f"restore the route or open the filter between {names} (router, switch ACL, "
            "security group): NCCL and gloo connect every node pair",
        )
    ]


def _cut_sample(
    cut: Cut,
    sample: list[Connect],
    facts_by_host: Mapping[str, FactsReport],
    choices: Mapping[str, InterfaceChoice],
) -> tuple[str, dict[str, object]]:
    """One cut in words and as data: what its sampled failing connects show, and the node
    rules that explain them, if any."""
    explained = sorted(
        {
            f"{node}: {why}"
            for item in sample
            for node, why in explain_connect(item, facts_by_host, choices).explanations
        }
    )
    results = sorted({c["result"] for c in sample})
    why = (
        "explained by " + "; ".join(explained)
        if explained
        else "no rule on the nodes explains it: a router, switch ACL or security group between them"
    )
    part = (
        f"{cut.describe()}: all {cut.pairs} tested pairs between them fail "
        f"({', '.join(results)}) while their {cut.hosts} nodes connect elsewhere; {why}"
    )
    entry = {
        "subnets": [cut.first, cut.second],
        "pairs": cut.pairs,
        "nodes": cut.hosts,
        "results": results,
        "explained_by": explained,
    }
    return part, entry
