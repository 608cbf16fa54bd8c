"""Firewall attribution: which node's rule explains a failed connect (pure).

Check ids: net.firewall, net.firewall-unknown. Apart from the reachability findings, which
only ask it why a path failed: this module alone reads the nodes' iptables/nft dumps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from clusterkit.checks.model import Finding, Status
from clusterkit.net.finding import MESSAGE_PAIRS, finding, more
from clusterkit.net.firewall import Packet, explain
from clusterkit.net.ifname import InterfaceChoice
from clusterkit.net.messages import (
    Connect,
    FactsReport,
    FirewallDump,
)

UNEXPLAINED = "no rule on either node explains it: a filter between them or a wrong address"
DEFAULT_EPHEMERAL = (32768, 60999)  # Linux's net.ipv4.ip_local_port_range


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
            text += f" ({UNEXPLAINED})"
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


def firewall_findings(
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
                + more(paths, " and {} more")
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


def blocked_dict(item: Blocked) -> dict[str, object]:
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
