"""Which node pairs the mesh tests, round by round (pure).

`full` tests every ordered pair: N x (N-1) connects, a million at 1,024 nodes. `auto` beyond
its threshold tests a covering set that every kind of fault a whole node or a whole link
causes still shows up in, then retests only what failed against everyone:

round 1  every node with its ring neighbours (two each way, in inventory order), the master,
         and one node of every other subnet (of two nodes or more); each pair both ways, so
         every node connects to and accepts from each of them. O(N x subnets) pairs.
round 2  both ends of every failing pair against every node, both ways, so the report names
         exactly the cut pairs; a subnet pair whose tested pairs all failed between otherwise
         healthy nodes (a cut) gets one more partner per node instead, which confirms it.
round 3  when a suspected cut was not one after all (a sampled pair connected), the ends of
         its failing pairs against every node.

A failing pair one of whose nodes was already tested against every node is known exactly
and makes no new suspect: one firewalled node does not pull in every other.

A pair is tested at most once over all rounds. Subnets are the collective interface's
networks (address/prefixlen) from the nodes' own facts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Pair = tuple[str, str]  # (connects, accepts)

RING_SPAN = 2  # ring neighbours at distance 1 and 2, both ways
# A node alone in its subnet (a /32 as on GCP, /31 point-to-point fabrics) is no subnet to
# reach from every node: that would be every pair again. Its ring and the master cover it.
MIN_SUBNET = 2
UNKNOWN_SUBNET = "unknown"  # a node without a collective address


@dataclass(frozen=True)
class Cut:
    """Two subnets between which every tested pair failed, while each node that took part
    connected somewhere else: the link or a filter between them, not the nodes."""

    first: str
    second: str
    pairs: int  # tested ordered pairs between them, all failed
    hosts: int  # nodes of the two subnets that took part

    def describe(self) -> str:
        return f"{self.first} <-> {self.second}"


def all_pairs(hosts: Sequence[str]) -> set[Pair]:
    return {(a, b) for a in hosts for b in hosts if a != b}


def covering_pairs(
    hosts: Sequence[str], subnets: Mapping[str, str], master: str | None, span: int = RING_SPAN
) -> set[Pair]:
    """Round 1 of `auto`: ring neighbours, the master and one node of every other subnet,
    each pair both ways. Deterministic: it depends only on the order of `hosts`."""
    count = len(hosts)
    links: set[tuple[str, str]] = set()

    def link(a: str, b: str) -> None:
        if a != b:
            links.add((a, b) if a < b else (b, a))

    for index, host in enumerate(hosts):
        for step in range(1, span + 1):
            link(host, hosts[(index + step) % count])
        if master is not None and master in subnets:
            link(host, master)
    members = subnet_members(hosts, subnets)
    groups = {
        name: nodes
        for name, nodes in members.items()
        if len(nodes) >= MIN_SUBNET and name != UNKNOWN_SUBNET
    }
    places = {host: place for nodes in groups.values() for place, host in enumerate(nodes)}
    for index, host in enumerate(hosts):
        own = subnets.get(host, UNKNOWN_SUBNET)
        # Spread over the other subnet: the node's place in its own, or in the ring if alone.
        position = places.get(host, index)
        for other, peers in groups.items():
            if other != own:
                link(host, peers[position % len(peers)])
    return {pair for a, b in links for pair in ((a, b), (b, a))}


def subnet_members(hosts: Sequence[str], subnets: Mapping[str, str]) -> dict[str, list[str]]:
    """Subnet -> its nodes in host order, subnets in the order their first node comes."""
    groups: dict[str, list[str]] = {}
    for host in hosts:
        groups.setdefault(subnets.get(host, UNKNOWN_SUBNET), []).append(host)
    return groups


def failed(result: str) -> bool:
    return result not in ("ok", "untested")


def subnet_cuts(results: Mapping[Pair, str], subnets: Mapping[str, str]) -> list[Cut]:
    """Subnet pairs (of two nodes or more each; `subnets` maps every node) whose tested
    pairs all failed, where every node that took part connected to or was reached by some
    node (so no broken node explains it)."""
    alive = {node for pair, result in results.items() if result == "ok" for node in pair}
    sizes: dict[str, int] = {}
    for subnet in subnets.values():
        sizes[subnet] = sizes.get(subnet, 0) + 1
    ok: dict[tuple[str, str], int] = {}
    bad: dict[tuple[str, str], int] = {}
    involved: dict[tuple[str, str], set[str]] = {}
    for (a, b), result in results.items():
        first, second = subnets.get(a, UNKNOWN_SUBNET), subnets.get(b, UNKNOWN_SUBNET)
        if result == "untested" or first == second or UNKNOWN_SUBNET in (first, second):
            continue
        if min(sizes.get(first, 0), sizes.get(second, 0)) < MIN_SUBNET:
            continue  # one node is no subnet: its failures are its own
        key = (first, second) if first < second else (second, first)
        counts = bad if failed(result) else ok
        counts[key] = counts.get(key, 0) + 1
        involved.setdefault(key, set()).update((a, b))
    return [
        Cut(key[0], key[1], bad[key], len(involved[key]))
        for key in sorted(bad)
        if key not in ok and involved[key] <= alive
    ]


class MeshRounds:
    """The pairs of each round of one mesh: `first()`, then `next(results, hosts)` until it
    returns no pair. `results` maps every pair tested so far to its worst result."""

    def __init__(
        self,
        hosts: Sequence[str],
        subnets: Mapping[str, str],
        master: str | None,
        *,
        covering: bool,
    ) -> None:
        self.hosts, self.subnets, self.master = list(hosts), dict(subnets), master
        self.covering = covering
        self.retested: set[str] = set()  # tested against every node already
        self.sampled: set[tuple[str, str]] = set()  # cuts given their confirming pairs

    def first(self) -> set[Pair] | None:
        """Round 1: the covering set, or None for every pair (not spelt out: a million at
        1,024 nodes)."""
        if not self.covering:
            return None
        return covering_pairs(self.hosts, self.subnets, self.master)

    def next(self, results: Mapping[Pair, str], hosts: Sequence[str]) -> set[Pair]:
        """The next round's pairs among `hosts` (the nodes still taking part): retests of the
        failing nodes and confirmations of suspected cuts; empty when nothing is left."""
        if not self.covering:
            return set()
        order = {host: index for index, host in enumerate(hosts)}
        cuts = {(cut.first, cut.second) for cut in subnet_cuts(results, self.subnets)}

        def across_cut(a: str, b: str) -> bool:
            first, second = self.subnet(a), self.subnet(b)
            return ((first, second) if first < second else (second, first)) in cuts

        # A failing pair with a node already tested against everyone is known exactly: its
        # other end is not a suspect (else one bad node would pull in every other).
        suspects = {
            node
            for pair, result in results.items()
            if failed(result) and not across_cut(*pair) and not self.retested.intersection(pair)
            for node in pair
            if node in order
        }
        pairs: set[Pair] = set()
        for node in sorted(suspects, key=order.__getitem__):
            for peer in hosts:
                if peer != node and not across_cut(node, peer):
                    pairs.update(p for p in ((node, peer), (peer, node)) if p not in results)
        self.retested |= suspects
        groups = subnet_members(hosts, self.subnets)
        for cut in sorted(cuts - self.sampled):
            first, second = groups.get(cut[0], []), groups.get(cut[1], [])
            pairs |= _one_more_partner(first, second, results) | _one_more_partner(
                second, first, results
            )
        self.sampled |= cuts
        return pairs

    def subnet(self, host: str) -> str:
        return self.subnets.get(host, UNKNOWN_SUBNET)


def _one_more_partner(
    members: Sequence[str], others: Sequence[str], results: Mapping[Pair, str]
) -> set[Pair]:
    """For each node of `members`, a node of `others` it was not yet tested with, both ways."""
    pairs: set[Pair] = set()
    for position, host in enumerate(members):
        for step in range(len(others)):
            peer = others[(position + step) % len(others)]
            if (host, peer) not in results and (host, peer) not in pairs:
                pairs |= {(host, peer), (peer, host)}
                break
    return pairs
