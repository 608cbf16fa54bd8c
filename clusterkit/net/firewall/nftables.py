"""`nft list ruleset` text: the same question as iptables.py asks, over nftables chains
(tables iptables-nft made are skipped when iptables-save already answered for them)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address

from clusterkit.net.firewall.model import BLOCKING, Packet, Verdict, port_ranges

NFT_TOKEN = re.compile(r'"[^"]*"|[{},;]|!=|[^\s{},;]+')
IPTABLES_NFT_TABLES = {"filter", "raw", "mangle", "nat", "security"}

# What a chain walk ends in: (ACCEPT/DROP/REJECT, the rule's text, matches assumed to match).
Outcome = tuple[str, str, list[str]]


@dataclass
class _NftChain:
    hook: str | None = None
    policy: str = "accept"
    priority: int = 0
    rules: list[tuple[str, list[str]]] = field(default_factory=list)


def parse_nft(text: str) -> dict[tuple[str, str], dict[str, _NftChain]]:
    """{(family, table): {chain: _NftChain}} from `nft list ruleset` text."""
    tables: dict[tuple[str, str], dict[str, _NftChain]] = {}
    table: dict[str, _NftChain] | None = None
    chain: _NftChain | None = None
    depth = 0
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        words = line.split()
        if words[0] == "table" and len(words) >= 3 and depth == 0:
            table = tables.setdefault((words[1], words[2]), {})
            depth = 1
            continue
        if words[0] == "chain" and table is not None and depth == 1:
            chain = table.setdefault(words[1], _NftChain())
            depth = 2
            continue
        if line == "}":
            depth = max(0, depth - 1)
            if depth < 2:
                chain = None
            if depth == 0:
                table = None
            continue
        if line.endswith("{") and depth >= 1:  # a set, map or flowtable body: skip it
            depth += 1
            continue
        if chain is None or depth != 2:
            continue
        if words[0] == "type" and "hook" in words:
            chain.hook = words[words.index("hook") + 1].rstrip(";")
            if "priority" in words:
                priority = words[words.index("priority") + 1].rstrip(";")
                chain.priority = int(priority) if priority.lstrip("-").isdigit() else 0
            if "policy" in words:
                chain.policy = words[words.index("policy") + 1].rstrip(";")
            continue
        if words[0] == "policy":
            chain.policy = words[1].rstrip(";")
            continue
        chain.rules.append((line, NFT_TOKEN.findall(line)))
    return tables


def explain_nft(
    text: str, packet: Packet, hook: str, skip_iptables_tables: bool = False
) -> Verdict | None:
    """Every base chain on the hook must accept (a drop anywhere is final)."""
    tables = parse_nft(text)
    bases: list[tuple[int, str, str, str, dict[str, _NftChain]]] = []
    for (family, name), chains in tables.items():
        if family not in ("ip", "ip6", "inet"):
            continue
        if skip_iptables_tables and family in ("ip", "ip6") and name in IPTABLES_NFT_TABLES:
            continue
        for chain_name, chain in chains.items():
            if chain.hook == hook:
                bases.append((chain.priority, family, name, chain_name, chains))
    for _priority, family, name, chain_name, chains in sorted(bases):
        outcome = _nft_walk(chains, chain_name, packet, family, 0)
        label = f"{family} {name} {chain_name}"
        if outcome is None:
            policy = chains[chain_name].policy.upper()
            if policy in BLOCKING:
                return Verdict(policy, label, None, "nft", "filter")
            continue
        action, line, uncertain = outcome
        if action in BLOCKING:
            return Verdict(action, label, line, "nft", "filter", tuple(uncertain))
    return None


def _nft_walk(
    chains: dict[str, _NftChain], chain_name: str, packet: Packet, family: str, depth: int
) -> Outcome | None:
    if depth > 32:
        return None
    for line, tokens in chains[chain_name].rules:
        matched, verdict, target, uncertain = _nft_rule(tokens, packet, family)
        if not matched:
            continue
        if verdict in ("accept", "drop", "reject"):
            return verdict.upper(), line, uncertain
        if verdict == "return":
            return None
        if verdict in ("jump", "goto") and target in chains:
            outcome = _nft_walk(chains, target, packet, family, depth + 1)
            if outcome is not None or verdict == "goto":
                return outcome
    return None


def _nft_values(tokens: list[str], index: int) -> tuple[list[str], int]:
    """The value at tokens[index]: one word or a `{ a, b }` set; returns (values, next)."""
    if index >= len(tokens):
        return [], index
    if tokens[index] != "{":
        return [tokens[index].strip('"')], index + 1
    values: list[str] = []
    index += 1
    while index < len(tokens) and tokens[index] != "}":
        if tokens[index] != ",":
            values.append(tokens[index].strip('"'))
        index += 1
    return values, index + 1


def _nft_rule(
    tokens: list[str], packet: Packet, family: str
) -> tuple[bool, str | None, str | None, list[str]]:
    """(matches, verdict, jump target, uncertain) for one rule against the packet."""
    version = ipaddress.ip_address(packet.source).version
    index, matched, uncertain = 0, True, list[str]()
    verdict: str | None = None
    target: str | None = None
    while index < len(tokens):
        word = tokens[index]
        if word in ("accept", "drop", "reject", "return", "continue"):
            verdict = word
            break
        if word in ("jump", "goto"):
            verdict, target = word, tokens[index + 1] if index + 1 < len(tokens) else None
            break
        if word in ("counter", "log", "comment", "limit"):
            index = _skip_statement(tokens, index)
            continue
        if word == "meta" and index + 1 < len(tokens):
            index += 1
            word = tokens[index]
        key = word
        negate = index + 1 < len(tokens) and tokens[index + 1] == "!="
        value_at = index + (2 if negate else 1)
        if key in ("ip", "ip6", "tcp", "th", "ct", "udp") and index + 1 < len(tokens):
            key = f"{word} {tokens[index + 1]}"
            negate = index + 2 < len(tokens) and tokens[index + 2] == "!="
            value_at = index + (3 if negate else 2)
        values, index = _nft_values(tokens, value_at)
        result = _nft_match(key, values, packet, version)
        if result is None:
            uncertain.append(key)
            continue
        if result == negate:
            matched = False
    return matched, verdict, target, uncertain


def _skip_statement(tokens: list[str], index: int) -> int:
    """Skip `counter packets N bytes M`, `log prefix "x"`, `comment "x"` and the like."""
    index += 1
    keywords = {"packets", "bytes", "prefix", "level", "rate", "burst", "over", "group"}
    while index < len(tokens) and (tokens[index] in keywords or tokens[index - 1] in keywords):
        index += 1
    if index < len(tokens) and tokens[index].startswith('"'):
        index += 1
    return index


def _nft_match(key: str, values: Iterable[str], packet: Packet, version: int) -> bool | None:
    values = list(values)
    if key in ("ip saddr", "ip daddr", "ip6 saddr", "ip6 daddr"):
        wanted = 4 if key.startswith("ip ") else 6
        if wanted != version:
            return False
        address = ipaddress.ip_address(packet.source if "saddr" in key else packet.destination)
        return any(_in_nft_address(address, value) for value in values)
    if key in ("tcp dport", "th dport"):
        return any(low <= packet.dport <= high for low, high in port_ranges(",".join(values), "-"))
    if key in ("udp dport", "udp sport"):
        return False
    if key in ("l4proto", "ip protocol", "ip6 nexthdr"):
        return any(value in ("tcp", "6") for value in values)
    if key == "nfproto":
        return any(value == f"ipv{version}" for value in values)
    if key in ("iif", "iifname", "oif", "oifname"):
        name = packet.in_interface if key.startswith("i") else packet.out_interface
        if name is None:
            return None
        return any(
            name.startswith(value[:-1]) if value.endswith("*") else name == value
            for value in values
        )
    if key == "ct state":
        states = {part for value in values for part in value.split(",")}
        return packet.state.lower() in states
    return None


def _in_nft_address(address: IPv4Address | IPv6Address, value: str) -> bool:
    if "-" in value:
        low, high = (ipaddress.ip_address(part) for part in value.split("-", 1))
        return low.version == address.version and int(low) <= int(address) <= int(high)
    network = ipaddress.ip_network(value, strict=False)
    return network.version == address.version and address in network
