"""Reports of the network stage's node program (clusterkit/node/net.py) for unit tests:
shaped as the program sends them, and checked by the stage's own parsers on the way out,
so a test cannot feed the analysis a report no node could send."""

from __future__ import annotations

from typing import Any

from clusterkit.net.messages import (
    FactsReport,
    ListenerReport,
    NodeInterface,
    parse_bound,
    parse_facts_report,
)

NO_RULES = "*filter\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"


def interface(
    name: str, address: str | None, mtu: int = 1500, up: bool = True, prefixlen: int = 24
) -> NodeInterface:
    addresses = [{"family": "inet", "address": address, "prefixlen": prefixlen}] if address else []
    return {
        "name": name,
        "up": up,
        "operstate": "up" if up else "down",
        "mtu": mtu,
        "kind": "loopback" if name == "lo" else "device",
        "flags": ["UP", "LOWER_UP"] if up else [],
        "addresses": addresses,
    }


def facts_report(
    *,
    hostname: str = "n",
    interfaces: list[NodeInterface] | None = None,
    master: list[str] | None = None,
    master_error: str | None = None,
    own: list[str] | None = None,
    env: dict[str, str] | None = None,
    firewall: dict[str, Any] | None = None,
    ephemeral_range: list[int] | None = None,
) -> FactsReport:
    """A facts report as the node sends it; `master` None: the name did not resolve."""
    master_lookup: dict[str, Any] = {"name": "node1", "addresses": master or []}
    if master_error or not master:
        master_lookup["error"] = master_error or "no name"
    report = {
        "phase": "facts",
        "hostname": hostname,
        "uid": 0,
        "interfaces": interfaces if interfaces is not None else [interface("eth0", "10.0.0.11")],
        "interfaces_error": None,
        "env": env or {"NCCL_SOCKET_IFNAME": None, "GLOO_SOCKET_IFNAME": None},
        "ephemeral_range": ephemeral_range or [32768, 60999],
        "reserved_in_use": {},
        "firewall": firewall
        if firewall is not None
        else {"iptables": {"state": "ok", "exit_code": 0, "text": NO_RULES}},
        "master": master_lookup,
        "own_name": {"name": hostname, "addresses": own if own is not None else ["10.0.0.11"]},
    }
    return parse_facts_report(report)


def listener(
    port: int,
    role: str,
    state: str = "ok",
    *,
    error: str | None = None,
    holder: dict[str, Any] | None = None,
    seen: list[str] | None = None,
) -> ListenerReport:
    """One listener as a bound or listeners report names it."""
    item = {
        "port": port,
        "role": role,
        "state": state,
        "error": error,
        "holder": holder,
        "seen": seen if seen is not None else [],
    }
    (checked,) = parse_bound({"phase": "bound", "listeners": [item]})["listeners"]
    return checked
