"""Which nodes are slow, from the bandwidth every group measured in every round (pure).

Each group's busbw is compared with the median of its round (rounds run at different times,
so a busy moment lowers a whole round, not one group); a failed group counts as 0. A group
below `fraction` x its round's median is slow. A node is named when the median of its
groups' ratios is below `fraction` and at least two of them were slow. A slow node makes its
partners' groups slow too, so names are given greedily: the node with the most slow rounds
(then the lowest median) first, and a group that holds a node already named no longer counts
against its other members. Rounds in which every group failed say nothing about any node
and are left out, and so is a group that was timed after the others (it missed the go).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

from clusterkit.bench.pairing import MIN_ROUNDS


@dataclass(frozen=True)
class GroupRun:
    """What one group measured in one round (busbw None: it failed, `error` says how).
    `together` False: it was timed after the others, not with them, and is not compared."""

    round: int
    hosts: tuple[str, ...]
    busbw: float | None
    seconds: float = 0.0
    error: str = ""
    together: bool = True


@dataclass
class NodeStats:
    """One node's groups, each as a ratio to its round's median (failed: 0)."""

    host: str
    ratios: list[float] = field(default_factory=list)
    busbws: list[float] = field(default_factory=list)
    failed: int = 0
    slow: int = 0  # slow groups not explained by another named node (set for named nodes)
    counted: int = 0  # groups that count (without a named partner)

    @property
    def median_ratio(self) -> float | None:
        return statistics.median(self.ratios) if self.ratios else None

    @property
    def median_busbw(self) -> float | None:
        return statistics.median(self.busbws) if self.busbws else None


@dataclass
class SlowVerdict:
    named: list[str]  # slow or failing nodes, the most certain first
    nodes: dict[str, NodeStats]
    round_medians: dict[int, float | None]  # None: every group of that round failed
    rounds_counted: int
    median_busbw: float | None  # over every group that measured

    @property
    def measured(self) -> bool:
        return self.rounds_counted >= MIN_ROUNDS


def judge_groups(groups: Sequence[GroupRun], hosts: Sequence[str], fraction: float) -> SlowVerdict:
    """The verdict over every group of every round; `hosts` fixes the order of ties."""
    medians: dict[int, float | None] = {}
    compared = [g for g in groups if g.together or g.busbw is None]
    for number in sorted({g.round for g in groups}):
        measured = [g.busbw for g in compared if g.round == number and g.busbw is not None]
        medians[number] = statistics.median(measured) if measured else None
    counted = [g for g in compared if medians[g.round]]
    ratio = {id(g): _ratio(g, medians[g.round]) for g in counted}
    stats = {host: NodeStats(host) for host in hosts}
    for group in counted:
        for host in group.hosts:
            node = stats.setdefault(host, NodeStats(host))
            node.ratios.append(ratio[id(group)])
            if group.busbw is None:
                node.failed += 1
            else:
                node.busbws.append(group.busbw)
    order = {host: index for index, host in enumerate(stats)}
    named: list[str] = []

    member_of: dict[str, list[GroupRun]] = {host: [] for host in stats}
    for group in counted:
        for host in group.hosts:
            member_of[host].append(group)

    def standing(host: str) -> tuple[int, int, float]:
        """(slow groups, groups that count, their median ratio) given the names so far."""
        mine = [ratio[id(g)] for g in member_of[host] if not set(g.hosts) & set(named)]
        slow = sum(1 for value in mine if value < fraction)
        return slow, len(mine), statistics.median(mine) if mine else 1.0

    while True:
        best: tuple[tuple[int, float, int], str] | None = None
        for host in stats:
            if host in named:
                continue
            slow, _, median = standing(host)
            if slow >= MIN_ROUNDS and median < fraction:
                key = (-slow, median, order[host])
                best = min(best, (key, host)) if best else (key, host)
        if best is None:
            break
        host = best[1]
        stats[host].slow, stats[host].counted, _ = standing(host)
        named.append(host)
    for host, node in stats.items():
        if host not in named:
            node.slow, node.counted, _ = standing(host)
    everything = [g.busbw for g in counted if g.busbw is not None]
    return SlowVerdict(
        named,
        stats,
        medians,
        sum(1 for m in medians.values() if m),
        statistics.median(everything) if everything else None,
    )


def _ratio(group: GroupRun, median: float | None) -> float:
    if group.busbw is None or not median:
        return 0.0
    return group.busbw / median
