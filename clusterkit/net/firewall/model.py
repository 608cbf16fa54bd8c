"""What the firewall evaluators share: the packet asked about and the verdict that stops it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TypedDict

BLOCKING = {"DROP", "REJECT"}


class RuleDump(TypedDict, total=False):
    """One firewall tool's rule dump as the node collected it: "ok" with the text, or
    "absent"/"unknown" with the reason."""

    state: str
    text: str
    reason: str


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


def port_ranges(value: str, separator: str) -> list[tuple[int, int]]:
    ranges = []
    for part in re.split(r"[,\s]+", value.strip()):
        if not part:
            continue
        low, _, high = part.partition(separator)
        ranges.append((int(low or 0), int(high or (65535 if separator in part else low))))
    return ranges
