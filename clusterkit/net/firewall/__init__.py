"""Explain a blocked TCP connect from a node's firewall rule sets (pure; no network).

Given the text of `iptables-save` (legacy or nft backend) or `nft list ruleset`, walk the
chains a new TCP connection traverses (INPUT on the receiver, OUTPUT on the sender) and
return the first rule or policy that drops or rejects it. Matches the evaluator does not
understand are assumed to match and named in `uncertain`, so an explanation is never
silently wrong about its confidence.
"""

from __future__ import annotations

from collections.abc import Mapping

from clusterkit.net.firewall.iptables import explain_iptables, parse_iptables_save
from clusterkit.net.firewall.model import BLOCKING, Packet, RuleDump, Verdict
from clusterkit.net.firewall.nftables import explain_nft, parse_nft

__all__ = [
    "BLOCKING",
    "Packet",
    "RuleDump",
    "Verdict",
    "explain",
    "explain_iptables",
    "explain_nft",
    "parse_iptables_save",
    "parse_nft",
]


def explain(firewall: Mapping[str, RuleDump], packet: Packet, hook: str) -> Verdict | None:
    """The first verdict that blocks `packet` at `hook` ("input" or "output") in any of the
    node's collected rule sets (iptables-save before nft, whose iptables-nft tables it
    repeats), or None when every rule set lets it pass or none could be read."""
    for tool in ("iptables", "iptables-legacy"):
        text = _readable_text(firewall, tool)
        if text:
            verdict = explain_iptables(text, packet, hook, tool=tool)
            if verdict:
                return verdict
    text = _readable_text(firewall, "nft")
    if text:
        skip_iptables_tables = (firewall.get("iptables") or RuleDump()).get("state") == "ok"
        return explain_nft(text, packet, hook, skip_iptables_tables)
    return None


def _readable_text(firewall: Mapping[str, RuleDump], tool: str) -> str:
    """The rule text `tool` dumped, or "" when it could not be read."""
    entry = firewall.get(tool) or RuleDump()
    return entry.get("text", "") if entry.get("state") == "ok" else ""
