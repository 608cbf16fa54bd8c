"""Explain a blocked TCP connect from a node's firewall rule sets (pure; no network).

Given the text of `iptables-save` (legacy or nft backend) or `nft list ruleset`, walk the
chains a new TCP connection traverses (INPUT on the receiver, OUTPUT on the sender) and
return the first rule or policy that drops or rejects it. Matches the evaluator does not
understand are assumed to match and named in `uncertain`, so an explanation is never
silently wrong about its confidence.
"""

from __future__ import annotations

import ipaddress
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass, field

BLOCKING = {"DROP", "REJECT"}
# Evaluated in netfilter's order for each hook; nat never filters.
IPTABLES_TABLES = ("raw", "mangle", "filter")
HOOK_CHAINS = {"input": "INPUT", "output": "OUTPUT"}
NON_TERMINATING = {
    "LOG",
    "NFLOG",
    "ULOG",
    "MARK",
    "CONNMARK",
    "CT",
    "NOTRACK",
    "TRACE",
    "AUDIT",
    "TCPMSS",
    "DSCP",
    "TOS",
    "CLASSIFY",
}
# Options whose value we can skip without understanding it (they never decide a match).
IGNORED_WITH_VALUE = {
    "--comment",
    "--reject-with",
    "--log-prefix",
    "--log-level",
    "--limit",
    "--limit-burst",
    "--set-xmark",
    "--set-mark",
    "--nflog-prefix",
    "--nflog-group",
}
IGNORED_FLAGS = {"--log-uid", "--log-tcp-options", "--log-ip-options", "--syn"}
PORT_OPTIONS = {"--dport", "--destination-port", "--dports", "--destination-ports", "--ports"}
KNOWN_MODULES = {"tcp", "state", "conntrack", "comment", "multiport", "iprange", "limit"}


@dataclass(frozen=True)
class Packet:
    """A new TCP connection as the firewall of one node sees it."""

    source: str
    destination: str
    dport: int
    in_interface: str | None = None
    out_interface: str | None = None
    state: str = "NEW"  # conntrack state: NEW for the SYN, ESTABLISHED for its replies


@dataclass(frozen=True)
class Verdict:
    """What stops the packet: a rule (`rule` set) or a chain's policy (`rule` None)."""

    action: str  # DROP or REJECT
    chain: str
    rule: str | None
    tool: str  # "iptables", "iptables-legacy" or "nft"
    table: str = "filter"
    uncertain: tuple[str, ...] = ()

    def describe(self) -> str:
        if self.rule is None:
            text = f"{self.chain} policy {self.action}"
        else:
            text = f"{self.chain} rule {self.rule}"
        if self.table != "filter":
            text = f"{self.tool} table {self.table}: {text}"
        if self.uncertain:
            text += f" (assuming {', '.join(self.uncertain)} match)"
        return text


@dataclass
class _Rule:
    text: str
    target: str | None = None
    goto: bool = False
    tests: list = field(default_factory=list)  # callables Packet -> bool
    uncertain: list[str] = field(default_factory=list)


@dataclass
class _Table:
    policies: dict[str, str] = field(default_factory=dict)
    chains: dict[str, list[_Rule]] = field(default_factory=dict)


def explain(firewall: dict[str, dict], packet: Packet, hook: str) -> Verdict | None:
    """The first verdict that blocks `packet` at `hook` ("input" or "output") in any of the
    node's collected rule sets (iptables-save before nft, whose iptables-nft tables it
    repeats), or None when every rule set lets it pass or none could be read."""
    for tool in ("iptables", "iptables-legacy"):
        entry = firewall.get(tool) or {}
        if entry.get("state") == "ok" and entry.get("text"):
            verdict = explain_iptables(entry["text"], packet, hook, tool=tool)
            if verdict:
                return verdict
    entry = firewall.get("nft") or {}
    if entry.get("state") == "ok" and entry.get("text"):
        skip_iptables_tables = (firewall.get("iptables") or {}).get("state") == "ok"
        return explain_nft(entry["text"], packet, hook, skip_iptables_tables)
    return None


def parse_iptables_save(text: str) -> dict[str, _Table]:
    tables: dict[str, _Table] = {}
    current: _Table | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or line == "COMMIT":
            continue
        if line.startswith("*"):
            current = tables.setdefault(line[1:], _Table())
        elif current is None:
            continue
        elif line.startswith(":"):
            name, policy = [*line[1:].split(), "-"][:2]
            current.chains.setdefault(name, [])
            if policy != "-":
                current.policies[name] = policy
        elif line.startswith("-A "):
            try:
                tokens = shlex.split(line)
            except ValueError:
                tokens = line.split()
            chain = tokens[1]
            current.chains.setdefault(chain, []).append(_parse_iptables_rule(line, tokens[2:]))
    return tables


def _parse_iptables_rule(text: str, tokens: list[str]) -> _Rule:
    rule = _Rule(text)
    index, negate = 0, False
    while index < len(tokens):
        token = tokens[index]
        value = tokens[index + 1] if index + 1 < len(tokens) else ""
        step = 2
        if token == "!":
            negate, index = True, index + 1
            continue
        test = None
        if token in ("-s", "--source"):
            test = _address_test(value, "source")
        elif token in ("-d", "--destination"):
            test = _address_test(value, "destination")
        elif token in ("-p", "--protocol"):
            test = _constant(value.lower() in ("tcp", "6", "all", "0"))
        elif token in ("-i", "--in-interface"):
            test = _interface_test(value, "in_interface")
        elif token in ("-o", "--out-interface"):
            test = _interface_test(value, "out_interface")
        elif (
            token in ("--dport", "--destination-port", "--dports", "--destination-ports")
            or token == "--ports"
        ):
            test = _port_test(value)
        elif token in ("--state", "--ctstate"):
            test = _state_test(value.upper().split(","))
        elif token in ("--src-range", "--dst-range"):
            test = _range_test(value, "source" if token == "--src-range" else "destination")
        elif token == "-m":
            if value not in KNOWN_MODULES:
                rule.uncertain.append(f"-m {value}")
        elif token in ("-j", "-g", "--jump", "--goto"):
            rule.target, rule.goto = value, token in ("-g", "--goto")
        elif token in IGNORED_WITH_VALUE:
            pass
        elif token in IGNORED_FLAGS or token == "--tcp-flags":
            step = 1 if token in IGNORED_FLAGS else 3
        elif token.startswith("-"):
            if not value or value.startswith("-"):
                step = 1
            if rule.target is None:  # options after -j belong to the target
                rule.uncertain.append(f"{token} {value}".strip() if step == 2 else token)
        else:
            step = 1
        if test is not None:
            rule.tests.append(_negated(test) if negate else test)
        negate = False
        index += step
    return rule


def explain_iptables(text: str, packet: Packet, hook: str, *, tool: str = "iptables"):
    tables = parse_iptables_save(text)
    chain = HOOK_CHAINS[hook]
    for name in IPTABLES_TABLES:
        table = tables.get(name)
        if table is None or chain not in table.chains:
            continue
        outcome = _walk(table, chain, packet, depth=0)
        if outcome is None:
            policy = table.policies.get(chain, "ACCEPT")
            if policy in BLOCKING:
                return Verdict(policy, chain, None, tool, name)
            continue
        action, rule, where = outcome
        if action in BLOCKING:
            return Verdict(action, where, rule.text, tool, name, tuple(rule.uncertain))
    return None


def _walk(table: _Table, chain: str, packet: Packet, depth: int):
    """(action, rule, chain) of the first terminating rule that matches, or None."""
    if depth > 32:
        return None
    for rule in table.chains.get(chain, []):
        if not all(test(packet) for test in rule.tests):
            continue
        target = rule.target
        if target in ("ACCEPT", "DROP", "REJECT"):
            return target, rule, chain
        if target == "RETURN":
            return None
        if target in table.chains:
            outcome = _walk(table, target, packet, depth + 1)
            if outcome is not None or rule.goto:
                return outcome
    return None


def _constant(value: bool):
    return lambda _packet: value


def _state_test(states: list[str]):
    return lambda packet: packet.state in states


def _negated(test):
    return lambda packet: not test(packet)


def _address_test(value: str, attribute: str):
    networks = [ipaddress.ip_network(part, strict=False) for part in value.split(",") if part]

    def test(packet: Packet) -> bool:
        address = ipaddress.ip_address(getattr(packet, attribute))
        return any(address.version == net.version and address in net for net in networks)

    return test


def _range_test(value: str, attribute: str):
    low, _, high = value.partition("-")
    first, last = ipaddress.ip_address(low), ipaddress.ip_address(high or low)

    def test(packet: Packet) -> bool:
        address = ipaddress.ip_address(getattr(packet, attribute))
        return address.version == first.version and int(first) <= int(address) <= int(last)

    return test


def _interface_test(value: str, attribute: str):
    def test(packet: Packet) -> bool:
        name = getattr(packet, attribute)
        if name is None:
            return value != "lo"  # unknown interface, but cluster traffic never crosses lo
        return name.startswith(value[:-1]) if value.endswith("+") else name == value

    return test


def _port_ranges(value: str, separator: str) -> list[tuple[int, int]]:
    ranges = []
    for part in re.split(r"[,\s]+", value.strip()):
        if not part:
            continue
        low, _, high = part.partition(separator)
        ranges.append((int(low or 0), int(high or (65535 if separator in part else low))))
    return ranges


def _port_test(value: str, separator: str = ":"):
    ranges = _port_ranges(value, separator)
    return lambda packet: any(low <= packet.dport <= high for low, high in ranges)


# ---------------------------------------------------------------- nft list ruleset

NFT_TOKEN = re.compile(r'"[^"]*"|[{},;]|!=|[^\s{},;]+')
IPTABLES_NFT_TABLES = {"filter", "raw", "mangle", "nat", "security"}


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
    bases = []
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


def _nft_walk(chains, chain_name, packet, family, depth):
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
    values, index = [], index + 1
    while index < len(tokens) and tokens[index] != "}":
        if tokens[index] != ",":
            values.append(tokens[index].strip('"'))
        index += 1
    return values, index + 1


def _nft_rule(tokens: list[str], packet: Packet, family: str):
    """(matches, verdict, jump target, uncertain) for one rule against the packet."""
    version = ipaddress.ip_address(packet.source).version
    index, matched, uncertain = 0, True, []
    verdict = target = None
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
        return any(low <= packet.dport <= high for low, high in _port_ranges(",".join(values), "-"))
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


def _in_nft_address(address, value: str) -> bool:
    if "-" in value:
        low, high = (ipaddress.ip_address(part) for part in value.split("-", 1))
        return low.version == address.version and low <= address <= high
    network = ipaddress.ip_network(value, strict=False)
    return network.version == address.version and address in network
