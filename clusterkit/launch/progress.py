"""Is the job advancing, and is one node holding it back? Judged from what each rank does,
sampled on its node, never from what it prints. Pure.

Each node reports, every few seconds and for each of its ranks, the rank's CPU time and its
flight recorder's counters per process group: the last collective enqueued and the last
completed (launch/messages.py `RankProgress`). From them:

- **progress**: a collective completed on some rank, or a rank outside any collective used
  the CPU (it computes: a step, an evaluation, a checkpoint). A rank waiting inside a
  collective does not advance the job, whatever CPU it spins or lines it prints; a job none
  of whose ranks advance for `--hang-timeout` is hung. Before a rank has a process group (or
  where the ranks cannot report one, e.g. inside a container), its CPU time counts.
- **stragglers**: in a synchronous job the others wait in a collective while the slowest
  computes. Each rank counts, ten times a second, whether it computes (outside any
  collective, its CPU time moving). A node whose every rank computed in most of the last
  window while the other nodes' ranks mostly waited is the straggler; the ratio of the two
  shares is its slowdown (its compute takes that many times the others').

The samples are the job's own data (its ranks write the counters): they judge the job's
progress and may name a slow node for this run, never drain one.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median

CPU_FLOOR = 0.02  # of one core: a rank using less is idle (a logging thread, a sleep)
STRAGGLER_WINDOW = 15  # samples per rank a verdict needs (30 s at one sample every 2 s)
STRAGGLER_BUSY = 0.6  # the straggler's ranks compute in at least this share of samples
STRAGGLER_MARGIN = 0.4  # ... and in this much more than the other nodes' ranks (median)

RankKey = tuple[str, int]  # (host, rank)


@dataclass(frozen=True)
class Sample:
    """One rank's report: when it arrived (the control side's monotonic clock), its CPU
    seconds, and {process group: (last enqueued, last completed)} or None."""

    at: float
    cpu: float
    groups: Mapping[str, tuple[int, int]] | None
    ticks: int = 0  # the rank's own samples (ten a second) so far ...
    busy: int = 0  # ... and those in which it computed

    @property
    def waiting(self) -> bool:
        """Inside a collective: one enqueued and not yet completed."""
        return any(enqueued > completed for enqueued, completed in (self.groups or {}).values())


def advanced(before: Sample, now: Sample, cpu_floor: float = CPU_FLOOR) -> bool:
    """Did the rank advance between two samples?"""
    if now.groups and before.groups is None:
        return True  # its process group came up
    for group, (_, completed) in (now.groups or {}).items():
        if completed > (before.groups or {}).get(group, (0, 0))[1]:
            return True
    return computing(before, now, cpu_floor)


def computing(before: Sample, now: Sample, cpu_floor: float = CPU_FLOOR) -> bool:
    """Outside any collective and using the CPU: what the others wait for."""
    elapsed = now.at - before.at
    return not now.waiting and elapsed > 0 and (now.cpu - before.cpu) / elapsed >= cpu_floor


@dataclass(frozen=True)
class Straggler:
    host: str
    busy: float  # share of its ranks' samples in which they computed
    others: float  # the same for the other nodes' ranks (median)
    seconds: float  # the window it was judged over

    @property
    def slowdown(self) -> float | None:
        """How many times longer its compute takes than the others', where measurable."""
        return self.busy / self.others if self.others > 0 else None

    def describe(self) -> str:
        ratio = f"about {self.slowdown:.1f}x slower" if self.slowdown else "far slower"
        return (
            f"{self.host} is a straggler: its ranks computed in {self.busy:.0%} of the last "
            f"{self.seconds:.0f} s while the other nodes' ranks waited for them in a collective "
            f"(they computed in {self.others:.0%}): {ratio}"
        )


@dataclass
class ProgressWatch:
    """The ranks' samples as they arrive: when the job last advanced, and who holds it back."""

    window: int = STRAGGLER_WINDOW
    last: dict[RankKey, Sample] = field(default_factory=dict)
    history: dict[RankKey, deque[Sample]] = field(default_factory=dict)
    reported: bool = False  # some rank reported its process groups: printing is no progress

    def add(self, host: str, rank: int, sample: Sample) -> bool:
        """Record one sample; True when it shows the rank advanced (or is new)."""
        key = (host, rank)
        before = self.last.get(key)
        self.last[key] = sample
        if sample.groups is not None:
            self.reported = True
        if sample.groups is not None:
            self.history.setdefault(key, deque(maxlen=self.window)).append(sample)
        return before is None or advanced(before, sample)

    def straggler(self) -> Straggler | None:
        """The one node whose ranks the others wait for, by a clear margin, over a full
        window of every rank's samples; None when there is none (or too few samples)."""
        by_host: dict[str, list[float]] = {}
        spans: list[float] = []
        for (host, _), history in self.history.items():
            ticks = history[-1].ticks - history[0].ticks
            if len(history) < self.window or ticks <= 0:
                return None
            by_host.setdefault(host, []).append((history[-1].busy - history[0].busy) / ticks)
            spans.append(history[-1].at - history[0].at)
        if len(by_host) < 2:
            return None
        slowest = min(by_host, key=lambda h: -min(by_host[h]))  # all its ranks busy
        busy = min(by_host[slowest])
        others = median(share for host, shares in by_host.items() if host != slowest
                        for share in shares)  # fmt: skip
        if busy < STRAGGLER_BUSY or busy - others < STRAGGLER_MARGIN:
            return None
        return Straggler(slowest, busy, others, min(spans))
