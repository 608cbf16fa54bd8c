"""Findings of the network stage from the nodes' facts and connect results (pure).

Check ids (stable, documented in docs/network.md): net.stage, net.interface, net.subnet,
net.mtu, net.ifname-mismatch, net.master-resolve, net.master-address, net.hostname-loopback,
net.rendezvous-port-in-use, net.port-in-use, net.rendezvous, net.mesh, net.subnet-cut,
net.firewall, net.firewall-unknown.
"""

from __future__ import annotations

import ipaddress
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import sole_majority
from clusterkit.net.cover import UNKNOWN_SUBNET, Cut
from clusterkit.net.firewall import Packet, explain
from clusterkit.net.ifname import InterfaceChoice
from clusterkit.net.matrix import build_matrix, failing_pairs, tested_pairs
from clusterkit.net.messages import (
    Connect,
    FactsReport,
    FirewallDump,
    ListenerReport,
    NameLookup,
)
from clusterkit.net.plan import NetworkOptions, master_address
from clusterkit.words import counted

STAGE = "network"
FAILED_RESULTS = ("refused", "timeout", "unreachable", "error", "foreign", "wrong_node")
MESSAGE_PAIRS = 6
CUT_SAMPLE = 4  # failed connects across a cut whose firewalls are read for an explanation
UNEXPLAINED = "no rule on either node explains it: a filter between them or a wrong address"
IFNAME_VARIABLES: tuple[Literal["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"], ...] = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
)
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's net.ipv4.ip_local_port_range


def finding(check_id: str, status: Status, message: str, **fields: Any) -> Finding:
    return Finding(check_id, status, message, stage=STAGE, **fields)


def stage_errors(errors: dict[str, str]) -> list[Finding]:
    return [
        finding(
            "net.stage",
            Status.ERROR,
            f"{host}: the network stage could not run: {reason}",
            hosts=[host],
            remedy="check that the node is reachable and has python3 on PATH "
            "(or set ansible_python_interpreter)",
        )
        for host, reason in sorted(errors.items())
    ]


def interface_findings(
    choices: Mapping[str, InterfaceChoice], facts_by_host: Mapping[str, FactsReport]
) -> list[Finding]:
    findings: list[Finding] = []
    broken: dict[str, str] = {}
    for host, choice in choices.items():
        names = ", ".join(item["name"] for item in facts_by_host[host]["interfaces"])
        if choice.name is None:
            wanted = f"{choice.source}={choice.spec}" if choice.spec else "a usable interface"
            broken[host] = f"no interface matches {wanted} (has: {names or 'none'})"
        elif not choice.up:
            broken[host] = f"{choice.name} is down"
        elif not choice.address:
            broken[host] = f"{choice.name} has no address"
    if broken:
        findings.append(
            finding(
                "net.interface",
                Status.FAIL,
                "; ".join(f"{host}: {reason}" for host, reason in sorted(broken.items())),
                hosts=sorted(broken),
                expected="an interface that exists, is up and has an address on every node",
                found=broken,
                remedy="fix NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME or clusterkit.interface "
                "to name the fabric interface present on every node",
            )
        )
    else:
        used = {host: f"{choice.name} {choice.address}" for host, choice in choices.items()}
        findings.append(
            finding(
                "net.interface",
                Status.OK,
                "collective interface present, up and addressed on every node: "
                + ", ".join(f"{host} {value}" for host, value in sorted(used.items())),
                hosts=sorted(used),
                found=used,
            )
        )
    usable = {host: choice for host, choice in choices.items() if host not in broken}
    findings += _subnet_findings(usable)
    findings += _mtu_findings(usable)
    return findings


def _subnet_findings(choices: Mapping[str, InterfaceChoice]) -> list[Finding]:
    if len(choices) < 2:
        return []
    alone = []
    for host, choice in choices.items():
        network = choice.network
        peers = [other for name, other in choices.items() if name != host]
        shared = network is not None and any(
            other.address
            and ipaddress.ip_address(other.address).version == network.version
            and ipaddress.ip_address(other.address) in network
            for other in peers
        )
        if not shared:
            alone.append(host)
    found = {host: str(choice.network) for host, choice in choices.items()}
    if alone:
        return [
            finding(
                "net.subnet",
                Status.WARN,
                f"{', '.join(sorted(alone))}: collective address in no subnet shared with "
                "a peer; traffic is routed (the mesh test shows whether the route works)",
                hosts=sorted(alone),
                found=found,
            )
        ]
    return [finding("net.subnet", Status.OK, "every node shares a subnet with a peer", found=found)]


def _mtu_findings(choices: Mapping[str, InterfaceChoice]) -> list[Finding]:
    mtus = {host: choice.mtu for host, choice in choices.items() if choice.mtu}
    if not mtus:
        return []
    agreed, expected = sole_majority(mtus)
    if not agreed:  # 1 against 1: no node is the odd one
        return [
            finding(
                "net.mtu",
                Status.FAIL,
                "MTU differs and no value has a majority: "
                + ", ".join(f"{host} {choices[host].name} mtu {mtus[host]}" for host in mtus)
                + "; large messages hang rather than fail",
                found=dict(mtus),
                remedy="set the same MTU on every node (ip link set dev IFACE mtu N)",
            )
        ]
    odd = sorted(host for host, mtu in mtus.items() if mtu != expected)
    if odd:
        return [
            finding(
                "net.mtu",
                Status.FAIL,
                "MTU differs: "
                + ", ".join(f"{host} {choices[host].name} mtu {mtus[host]}" for host in odd)
                + f" (others {expected}); large messages hang rather than fail",
                hosts=odd,
                expected=expected,
                found={host: mtus[host] for host in odd},
                remedy=f"set the same MTU on every node, e.g. ip link set dev IFACE mtu {expected}",
            )
        ]
    return [finding("net.mtu", Status.OK, f"MTU {expected} on every node", expected=expected)]


def ifname_findings(
    facts_by_host: Mapping[str, FactsReport], options: NetworkOptions
) -> list[Finding]:
    """NCCL and gloo must agree with each other, across nodes and with the inventory."""
    envs = {host: facts["env"] for host, facts in facts_by_host.items()}
    problems: dict[str, str] = {}
    ties: list[str] = []  # a variable two halves set differently: no node is the odd one
    for host, env in envs.items():
        nccl, gloo = env.get("NCCL_SOCKET_IFNAME"), env.get("GLOO_SOCKET_IFNAME")
        if nccl and gloo and nccl.lstrip("=") != gloo:
            problems[host] = f"NCCL_SOCKET_IFNAME={nccl} but GLOO_SOCKET_IFNAME={gloo}"
        elif options.interface and (nccl or gloo) and (nccl or gloo) != options.interface:
            problems[host] = (
                f"node environment names {nccl or gloo}, clusterkit.interface "
                f"is {options.interface}"
            )
    for key in IFNAME_VARIABLES:
        values = {host: env.get(key) for host, env in envs.items()}
        if len(set(values.values())) > 1:
            agreed, expected = sole_majority(values)
            if not agreed:
                pairs = ", ".join(f"{host} {value}" for host, value in values.items())
                ties.append(f"{key} differs and no value has a majority: {pairs}")
                continue
            for host, value in values.items():
                if value != expected:
                    problems.setdefault(host, f"{key}={value} (most nodes: {expected})")
    if not (problems or ties):
        return [finding("net.ifname-mismatch", Status.OK, "interface variables agree")]
    return [
        finding(
            "net.ifname-mismatch",
            Status.WARN,
            "; ".join([*(f"{host}: {text}" for host, text in sorted(problems.items())), *ties]),
            hosts=sorted(problems),
            found=problems,
            remedy="set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME to the same interface on "
            "every node",
        )
    ]


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def master_findings(
    facts_by_host: Mapping[str, FactsReport], options: NetworkOptions
) -> list[Finding]:
    """net.master-resolve, net.master-address, net.hostname-loopback."""
    resolved = {host: master_address(facts) for host, facts in facts_by_host.items()}
    answered = {host: address for host, address in resolved.items() if address}
    # With no majority (1 against 1) there is no address to expect: nobody is the odd one.
    expected = sole_majority(answered)[1] if answered else None
    return [
        _master_resolve_finding(facts_by_host, options.master_name, resolved, expected),
        *_master_address_findings(facts_by_host, options, answered, expected),
        _hostname_finding(facts_by_host),
    ]


def _master_resolve_finding(
    facts_by_host: Mapping[str, FactsReport],
    name: str,
    resolved: dict[str, str | None],
    expected: str | None,
) -> Finding:
    """net.master-resolve: every node resolves the master's name, to the same address."""
    failed = {
        host: _lookup_error(facts["master"]) or "no address"
        for host, facts in facts_by_host.items()
        if resolved[host] is None
    }
    answered = {host: address for host, address in resolved.items() if address}
    odd = sorted(host for host in answered if expected and answered[host] != expected)
    tied = answered if expected is None else {}
    if not (failed or odd or tied):
        return finding(
            "net.master-resolve",
            Status.OK,
            f"{name} resolves to {expected} on every node",
            expected=expected,
        )
    parts = [f"{host}: {name} does not resolve ({reason})" for host, reason in failed.items()]
    parts += [f"{host} resolves {name} to {resolved[host]}" for host in odd]
    if tied:
        pairs = ", ".join(f"{host} {address}" for host, address in tied.items())
        parts.append(f"{name} resolves differently and no address has a majority: {pairs}")
    return finding(
        "net.master-resolve",
        Status.FAIL,
        "; ".join(parts) + (f"; the others to {expected}" if expected else ""),
        hosts=sorted(set(failed) | set(odd)),
        expected=expected,
        found={host: resolved[host] for host in sorted(set(failed) | set(odd) | set(tied))},
        remedy=f"make {name} resolve to the master's fabric address on every node "
        "(DNS or /etc/hosts), or set clusterkit.master to that address",
    )


def _master_address_findings(
    facts_by_host: Mapping[str, FactsReport],
    options: NetworkOptions,
    answered: dict[str, str],
    expected: str | None,
) -> list[Finding]:
    """net.master-address: the name resolves to an address of the master, never loopback
    (none when there is nothing to compare)."""
    name, master = options.master_name, options.master_host
    master_facts = facts_by_host.get(master)
    loopback = sorted(host for host, address in answered.items() if _is_loopback(address))
    if loopback:
        return [
            finding(
                "net.master-address",
                Status.FAIL,
                f"{name} resolves to a loopback address on {', '.join(loopback)}: peers "
                "cannot reach the rendezvous there",
                hosts=loopback,
                found={host: answered[host] for host in loopback},
                remedy=f"remove the 127.x line naming {name} from /etc/hosts on those nodes",
            )
        ]
    if not expected or master_facts is None:
        return []
    own = {entry["address"] for item in master_facts["interfaces"] for entry in item["addresses"]}
    if expected in own:
        return [
            finding(
                "net.master-address",
                Status.OK,
                f"{expected} belongs to {master}",
                hosts=[master],
            )
        ]
    return [
        finding(
            "net.master-address",
            Status.FAIL,
            f"{name} resolves to {expected}, which is not an address of the master "
            f"{master} (has {', '.join(sorted(own)) or 'none'})",
            hosts=[master],
            expected=sorted(own),
            found=expected,
            remedy=f"point {name} at an address of {master}",
        )
    ]


def _lookup_error(lookup: NameLookup | None) -> str | None:
    return lookup.get("error") if lookup else None


def _hostname_finding(facts_by_host: Mapping[str, FactsReport]) -> Finding:
    flagged: dict[str, str] = {}
    for host, facts in facts_by_host.items():
        own = facts["own_name"]
        addresses = own["addresses"]
        hostname = facts["hostname"]
        if not addresses:
            flagged[host] = f"hostname {hostname} does not resolve ({own.get('error')})"
        elif any(_is_loopback(address) for address in addresses):
            flagged[host] = f"hostname {hostname} resolves to {', '.join(addresses)}"
    if not flagged:
        return finding("net.hostname-loopback", Status.OK, "node hostnames resolve off loopback")
    return finding(
        "net.hostname-loopback",
        Status.WARN,
        "; ".join(f"{host}: {text}" for host, text in sorted(flagged.items()))
        + ": gloo's default device and c10d host matching use this address",
        hosts=sorted(flagged),
        found=flagged,
        remedy="map the hostname to the fabric address in /etc/hosts (replace the 127.0.1.1 "
        "line) or set GLOO_SOCKET_IFNAME",
    )


@dataclass(frozen=True)
class Blocked:
    """One failed connect and what explains it."""

    source: str
    destination: str
    port: int
    role: str
    result: str
    detail: str
    explanations: tuple[tuple[str, str], ...]  # (node, what blocks it there) on either end
    unknown: tuple[str, ...]  # nodes whose firewall could not be read

    def describe(self) -> str:
        text = f"{self.source} -> {self.destination}:{self.port} {self.result}"
        if self.explanations:
            text += " (" + "; ".join(f"{node}: {why}" for node, why in self.explanations) + ")"
        elif not self.unknown and self.result in ("timeout", "refused", "unreachable"):
            text += (
                " (no rule on either node explains it: a filter between them or a wrong address)"
            )
        return text


def _readable(firewall: Mapping[str, FirewallDump]) -> bool:
    return any(
        tool in firewall and firewall[tool].get("state") == "ok"
        for tool in ("iptables", "iptables-legacy", "nft")
    )


def _ephemeral_range(facts: FactsReport | None) -> tuple[int, int]:
    """The node's range of ports for outgoing connects (the parser checked its shape)."""
    ports = facts["ephemeral_range"] if facts is not None else None
    return (ports[0], ports[1]) if ports else DEFAULT_EPHEMERAL


def explain_connect(
    item: Connect,
    facts_by_host: Mapping[str, FactsReport],
    choices: Mapping[str, InterfaceChoice],
) -> Blocked:
    source, destination = item["from"], item["peer"]
    source_address = choices[source].address if source in choices else None
    packet = Packet(
        source=source_address or "0.0.0.0",
        destination=item["address"],
        dport=item["port"],
        in_interface=choices[destination].name if destination in choices else None,
        out_interface=choices[source].name if source in choices else None,
    )
    explanations: list[tuple[str, str]] = []
    unknown: list[str] = []
    if item["result"] in ("refused", "timeout", "unreachable"):
        low, high = _ephemeral_range(facts_by_host.get(source))
        reply = Packet(
            source=packet.destination,
            destination=packet.source,
            dport=(low + high) // 2,  # the connecting socket's own port, somewhere in here
            in_interface=packet.out_interface,
            state="ESTABLISHED",
        )
        checks = (
            (destination, packet, "input", ""),
            (source, packet, "output", ""),
            (source, reply, "input", " (drops the replies)"),
        )
        for node, probe, hook, note in checks:
            node_facts = facts_by_host.get(node)
            firewall = node_facts["firewall"] if node_facts is not None else {}
            if not _readable(firewall):
                if node not in unknown:
                    unknown.append(node)
                continue
            try:
                verdict = explain(firewall, probe, hook)
            except ValueError:
                verdict = None
            if verdict:
                explanations.append((node, verdict.describe() + note))
    return Blocked(
        source,
        destination,
        item["port"],
        item["role"],
        item["result"],
        item["detail"],
        tuple(explanations),
        tuple(unknown),
    )


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
    findings = [_port_in_use_finding(master, in_use)] if in_use else []
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


def _port_in_use_finding(master: str, in_use: Mapping[int, ListenerReport]) -> Finding:
    """net.rendezvous-port-in-use: the master could not listen on a rendezvous port."""
    parts, found = [], []
    for port, item in sorted(in_use.items()):
        parts.append(f"{item['role']}: {_unbound_text(master, item)}")
        found.append({"port": port, "role": item["role"], "holder": item["holder"] or None})
    held = ", ".join(str(port) for port in sorted(in_use))
    return finding(
        "net.rendezvous-port-in-use",
        Status.FAIL,
        "; ".join(parts) + "; a previous job may still be running",
        hosts=[master],
        found=found,
        remedy=f"stop the process holding {held} on {master} or choose another port "
        "(clusterkit.master_port / clusterkit.rdzv_port)",
    )


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
        found=[_blocked_dict(b) for b in blocked],
        remedy=f"open TCP {', '.join(map(str, ports))} on {master} to every node (e.g. "
        f"iptables -I INPUT -p tcp -m multiport --dports {','.join(map(str, ports))} "
        "-j ACCEPT)",
    )


def port_findings(unbound: Mapping[str, list[ListenerReport]]) -> list[Finding]:
    """net.port-in-use: listeners a node could not bind (host -> its listener reports), but
    the master's rendezvous ports. The paths to such a port are not tested: another program
    holds it, which is no fault of the network and no firewall's doing."""
    if not unbound:
        return []
    parts = [_unbound_text(host, item) for host, items in unbound.items() for item in items]
    found = [
        {
            "host": host,
            "port": item["port"] or None,
            "role": item["role"],
            "state": item["state"],
            "error": item["error"],
            "holder": item["holder"],
        }
        for host, items in unbound.items()
        for item in items
    ]
    return [
        finding(
            "net.port-in-use",
            Status.FAIL,
            "; ".join(parts) + "; paths to these ports were not tested",
            hosts=sorted(unbound),
            found=found,
            remedy="stop the process holding the port on that node, or list other ports in "
            "clusterkit.network.extra_ports; a node with no free port left has exhausted "
            "net.ipv4.ip_local_port_range",
        )
    ]


def _unbound_text(host: str, item: ListenerReport) -> str:
    """What kept a node from listening on one port, in words."""
    port, holder = item["port"], item["holder"]
    if item["state"] == "in_use":
        who = f" (pid {holder['pid']}: {holder['command']})" if holder and holder["pid"] else ""
        return f"port {port} on {host} is in use by another process{who}"
    if not port:
        return f"{host} could not listen on any free port: {item['error']}"
    return f"{host} could not listen on port {port}: {item['error']}"


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
    return "; ".join(parts) + _more(shown, "; and {} more")


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
    findings += _firewall_findings(blocked + rendezvous_blocked, choices)
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
            found=[_blocked_dict(b) for b in blocked],
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


def _firewall_findings(
    blocked: list[Blocked], choices: Mapping[str, InterfaceChoice]
) -> list[Finding]:
    findings: list[Finding] = []
    by_node: dict[str, dict[str, list[str]]] = {}
    for item in blocked:
        for node, why in item.explanations:
            paths = by_node.setdefault(node, {}).setdefault(why, [])
            paths.append(f"{item.source} -> {item.destination}:{item.port}")
    if by_node:
        parts, remedies = [], []
        for node, rules in sorted(by_node.items()):
            parts += [
                f"{node}: {rule} blocks {', '.join(paths[:MESSAGE_PAIRS])}"
                + _more(paths, " and {} more")
                for rule, paths in rules.items()
            ]
            choice = choices.get(node)
            iface = choice.name if choice and choice.name else "IFACE"
            network = str(choice.network) if choice and choice.network else "CLUSTER-SUBNET"
            remedies.append(
                f"on {node}: iptables -I INPUT -i {iface} -s {network} -p tcp -j ACCEPT"
            )
        findings.append(
            finding(
                "net.firewall",
                Status.FAIL,
                "; ".join(parts),
                hosts=sorted(by_node),
                found={
                    node: {rule: paths for rule, paths in rules.items()}
                    for node, rules in sorted(by_node.items())
                },
                remedy="allow all TCP between the cluster nodes on the collective interface and "
                "the rendezvous ports on the master: " + "; ".join(remedies),
            )
        )
    unknown = sorted({node for item in blocked for node in item.unknown})
    if unknown:
        findings.append(
            finding(
                "net.firewall-unknown",
                Status.WARN,
                f"firewall rules could not be read on {', '.join(unknown)} (not root, or no "
                "iptables/nft): a failed path there is not explained",
                hosts=unknown,
                remedy="connect as root on the nodes (ansible_user root; clusterkit does not "
                "use become) to read iptables-save / nft list ruleset",
            )
        )
    return findings


def _more(items: Sequence[object], template: str) -> str:
    return template.format(len(items) - MESSAGE_PAIRS) if len(items) > MESSAGE_PAIRS else ""


def _blocked_dict(item: Blocked) -> dict[str, object]:
    return {
        "from": item.source,
        "to": item.destination,
        "port": item.port,
        "role": item.role,
        "result": item.result,
        "detail": item.detail,
        "explained_by": [{"node": node, "cause": why} for node, why in item.explanations],
        "firewall_unknown": list(item.unknown),
    }
