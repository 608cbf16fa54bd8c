"""`iptables-save` text (legacy or nft backend): parse the tables and walk the chains a new
TCP connection traverses, down to the first rule or policy that drops or rejects it."""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from clusterkit.net.firewall.model import BLOCKING, Packet, Verdict, port_ranges

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

Test = Callable[[Packet], bool]


@dataclass
class _Rule:
    text: str
    target: str | None = None
    goto: bool = False
    tests: list[Test] = field(default_factory=list)
    uncertain: list[str] = field(default_factory=list)


@dataclass
class _Table:
    policies: dict[str, str] = field(default_factory=dict)
    chains: dict[str, list[_Rule]] = field(default_factory=dict)


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
        test: Test | None = None
        if token in ("-s", "--source"):
            test = _address_test(value, _source)
        elif token in ("-d", "--destination"):
            test = _address_test(value, _destination)
        elif token in ("-p", "--protocol"):
            test = _constant(value.lower() in ("tcp", "6", "all", "0"))
        elif token in ("-i", "--in-interface"):
            test = _interface_test(value, lambda packet: packet.in_interface)
        elif token in ("-o", "--out-interface"):
            test = _interface_test(value, lambda packet: packet.out_interface)
        elif (
            token in ("--dport", "--destination-port", "--dports", "--destination-ports")
            or token == "--ports"
        ):
            test = _port_test(value)
        elif token in ("--state", "--ctstate"):
            test = _state_test(value.upper().split(","))
        elif token in ("--src-range", "--dst-range"):
            test = _range_test(value, _source if token == "--src-range" else _destination)
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


def explain_iptables(
    text: str, packet: Packet, hook: str, *, tool: str = "iptables"
) -> Verdict | None:
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


def _walk(table: _Table, chain: str, packet: Packet, depth: int) -> tuple[str, _Rule, str] | None:
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


def _source(packet: Packet) -> str:
    return packet.source


def _destination(packet: Packet) -> str:
    return packet.destination


def _constant(value: bool) -> Test:
    return lambda _packet: value


def _state_test(states: list[str]) -> Test:
    return lambda packet: packet.state in states


def _negated(test: Test) -> Test:
    return lambda packet: not test(packet)


def _address_test(value: str, address_of: Callable[[Packet], str]) -> Test:
    networks = [ipaddress.ip_network(part, strict=False) for part in value.split(",") if part]

    def test(packet: Packet) -> bool:
        address = ipaddress.ip_address(address_of(packet))
        return any(address.version == net.version and address in net for net in networks)

    return test


def _range_test(value: str, address_of: Callable[[Packet], str]) -> Test:
    low, _, high = value.partition("-")
    first, last = ipaddress.ip_address(low), ipaddress.ip_address(high or low)

    def test(packet: Packet) -> bool:
        address = ipaddress.ip_address(address_of(packet))
        return address.version == first.version and int(first) <= int(address) <= int(last)

    return test


def _interface_test(value: str, interface_of: Callable[[Packet], str | None]) -> Test:
    def test(packet: Packet) -> bool:
        name = interface_of(packet)
        if name is None:
            return value != "lo"  # unknown interface, but cluster traffic never crosses lo
        return name.startswith(value[:-1]) if value.endswith("+") else name == value

    return test


def _port_test(value: str, separator: str = ":") -> Test:
    ranges = port_ranges(value, separator)
    return lambda packet: any(low <= packet.dport <= high for low, high in ranges)
