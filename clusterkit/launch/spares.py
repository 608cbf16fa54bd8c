"""Which nodes run the job and which wait as spares. Pure.

`launch --nnodes N` (or `MIN:MAX`, as torchrun) runs on N of the hosts and keeps the rest
as spares; a node that fails the check, or fails during the run, is left out for the rest
of the run and a spare takes its place. Node order is the inventory's (the allocation's),
the master first while it is healthy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from clusterkit.checks.model import Finding, Status

_COUNT = re.compile(r"^(\d{1,6})(?::(\d{1,6}))?$")


@dataclass(frozen=True)
class NodeCount:
    """How many nodes the job runs on: `most` when that many are healthy, down to `least`."""

    least: int
    most: int

    @classmethod
    def parse(cls, text: str) -> NodeCount:
        """`4` or `3:4`; ValueError says what is wrong."""
        match = _COUNT.match(text.strip())
        if match is None:
            raise ValueError(f"expected N or MIN:MAX, got {text!r}")
        least = int(match[1])
        most = int(match[2]) if match[2] else least
        if least < 1 or most < least:
            raise ValueError(f"{text!r}: needs 1 <= MIN <= MAX")
        return cls(least, most)

    def __str__(self) -> str:
        return str(self.most) if self.least == self.most else f"{self.least}:{self.most}"


def problems_by_host(
    findings: Iterable[Finding], hosts: Sequence[str], *, strict: bool = False
) -> tuple[dict[str, list[str]], list[str]]:
    """host -> the messages of the failing findings naming it (in host order), and the
    messages of failing findings that name no host: a problem of the whole set of nodes,
    which leaving a node out cannot cure."""
    bad = {Status.FAIL, Status.ERROR} | ({Status.WARN} if strict else set())
    by_host: dict[str, list[str]] = {}
    unattributed: list[str] = []
    for finding in findings:
        if finding.status not in bad:
            continue
        named = [host for host in finding.hosts if host in hosts]
        if not named:
            unattributed.append(f"{finding.id}: {finding.message}")
        for host in named:
            by_host.setdefault(host, []).append(f"{finding.id}: {finding.message}")
    return {host: by_host[host] for host in hosts if host in by_host}, unattributed


@dataclass
class NodePool:
    """The hosts of a resilient launch: running, waiting as spares, left out (and why)."""

    count: NodeCount
    order: tuple[str, ...]  # every host, master first
    active: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)  # host -> why, first reason kept
    spares_used: list[str] = field(default_factory=list)

    @property
    def spares(self) -> list[str]:
        return [h for h in self.order if h not in self.active and h not in self.excluded]

    def exclude(self, problems: Mapping[str, Sequence[str]]) -> list[str]:
        """Leave these hosts out for the rest of the run; returns those newly left out."""
        newly = []
        for host, why in problems.items():
            if host in self.order and host not in self.excluded:
                self.excluded[host] = why[0] if why else "failed"
                newly.append(host)
        self.active = [h for h in self.active if h not in self.excluded]
        return newly

    def fill(self, *, first: bool = False) -> list[str]:
        """Take spares, in order, until `most` run; returns the spares taken. The first
        fill (the gate's choice) does not count them as spares used."""
        taken = []
        for host in self.spares:
            if len(self.active) >= self.count.most:
                break
            self.active.append(host)
            taken.append(host)
        self.active = [h for h in self.order if h in self.active]  # master first, as listed
        if not first:
            self.spares_used += taken
        return taken

    @property
    def enough(self) -> bool:
        return len(self.active) >= self.count.least
