"""Node fault or job fault: what a failed attempt says before anything acts on it. Pure.

A node fault is worth a spare: the node was lost, the kernel killed a rank (its OOM killer
names the rank's pid), CUDA or NCCL named failing hardware, the node fails its own checks
since (a new Xid, a pending row remap), or a hang's stacks single out its ranks. Only the
node's own evidence (lost, or failing its own checks) may drain it for everyone: what a job
prints, how much memory it takes and where its ranks wait are the job's doing. Anything
else is the job's own doing (an exception, the same failure everywhere, every rank stuck in
the same place) and is retried only when the user allows it: a bug that raises at step 5
raises there on every node and every attempt.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from clusterkit.launch.failure import Failure, first_failure
from clusterkit.launch.stacks import Group

NODE = "node"
JOB = "job"

# What CUDA, the driver and NCCL print when the hardware under a rank failed: not a bug
# a restart on the same node would avoid. Each pattern names what it means.
HARDWARE_ERRORS = (
    (re.compile(r"uncorrectable ECC error", re.I), "an uncorrectable ECC error (HBM)"),
    (re.compile(r"fallen off the bus", re.I), "a GPU fell off the bus"),
    (re.compile(r"uncorrectable NVLink error", re.I), "an uncorrectable NVLink error"),
    (re.compile(r"hardware stack error", re.I), "a GPU hardware stack error"),
    (re.compile(r"CUDA-capable device\(s\) is/are busy or unavailable", re.I), "a GPU vanished"),
    (re.compile(r"no CUDA-capable device is detected", re.I), "no GPU left on the node"),
    (re.compile(r"\bXid\b.{0,40}\b(?:48|63|64|74|79|92|94|95)\b"), "a critical Xid"),
    (
        re.compile(r"NET/IB.{0,80}(?:status=1[02]\b|retry counter exceeded)", re.I),
        "an InfiniBand transport error",
    ),
)
TRACEBACK = "Traceback (most recent call last)"


@dataclass(frozen=True)
class Fault:
    """What the attempt's failure is put down to. `hosts`: the faulty nodes of a node
    fault, in the order found; for a job fault, the first failing rank's host."""

    kind: str  # NODE or JOB
    hosts: tuple[str, ...]
    reason: str
    evidence: tuple[str, ...] = ()
    rank: int | None = None
    ranks: Mapping[str, tuple[int, ...]] = field(default_factory=dict)  # host -> failed ranks
    # The faulty hosts blamed on their own evidence (lost, or failing their own checks after
    # the stop: kernel log, nvidia-smi), not on what the job printed or where its ranks
    # waited: only these may be drained for every user of the cluster.
    own_evidence: tuple[str, ...] = ()

    @property
    def node(self) -> bool:
        return self.kind == NODE


def classify(
    failures: Sequence[Failure],
    *,
    hang_groups: Sequence[Group] = (),
    hang_missing: Sequence[str] = (),
    node_problems: Mapping[str, Sequence[str]] | None = None,
    oom_pids: Mapping[str, Iterable[int]] | None = None,
    straggler: tuple[str, str] | None = None,
    hardware: tuple[str, str] | None = None,
) -> Fault:
    """The fault behind a failed attempt.

    `failures`: every failure the supervisor saw; `hang_groups`/`hang_missing`: the hang's
    stacks grouped by wait point, and the hosts whose stacks never came; `node_problems`:
    host -> the failing findings of the nodes' checks run after the stop; `oom_pids`: host
    -> pids the kernel's OOM killer killed (from the node's log); `straggler`: (host, why)
    when the run was stopped because that node held the others back (--straggler-fault);
    `hardware`: (host, why) when the node's hardware watch stopped the run: its own kernel
    log or nvidia-smi said so, graded as `check` grades it (launch/watch.py)."""
    found: dict[str, list[str]] = {}
    own: list[str] = []

    def blame(host: str, why: str, *, its_own: bool = False) -> None:
        found.setdefault(host, []).append(why)
        if its_own and host not in own:
            own.append(host)

    for item in failures:
        if item.lost:
            blame(item.host, f"{item.host} was lost: no answer from its node process", its_own=True)
    kills = {host: set(pids) for host, pids in (oom_pids or {}).items()}
    for item in failures:
        if item.signal_name == "SIGKILL" and item.pid in kills.get(item.host, set()):
            blame(item.host, f"{item.who} was killed by the kernel's OOM killer (pid {item.pid})")
        for line in item.last_lines:
            meaning = hardware_error(line)
            if meaning:
                blame(item.host, f"{item.who}: {meaning}: {line.strip()[:200]}")
                break
    if hardware is not None:  # the watch's event came first: it is the reason
        blame(hardware[0], hardware[1], its_own=True)
    for host, problems in (node_problems or {}).items():
        for problem in problems:
            blame(host, f"{host} fails its checks now: {problem}", its_own=True)
    for host in hang_missing:
        blame(host, f"{host} sent no stacks during the hang")
    if straggler is not None:
        blame(straggler[0], straggler[1])
    if (odd := singled_out(hang_groups)) is not None:
        host, where = odd
        blame(host, f"only {host}'s ranks were elsewhere during the hang ({where})")
    ranks = _failed_ranks(failures)
    if found:
        hosts = tuple(found)
        evidence = tuple(why for host in hosts for why in found[host])
        return Fault(NODE, hosts, evidence[0], evidence, ranks=ranks, own_evidence=tuple(own))
    return job_fault(failures, hang_groups, ranks)


def job_fault(
    failures: Sequence[Failure], hang_groups: Sequence[Group], ranks: Mapping[str, tuple[int, ...]]
) -> Fault:
    first = first_failure(failures)
    if first is None:
        where = hang_groups[0].where if hang_groups else "the same place"
        return Fault(JOB, (), f"every rank hung alike ({where})", ranks=ranks)
    evidence = tuple(traceback_tail(first.last_lines))
    everywhere = len({item.host for item in failures if not item.lost}) > 1 and all(
        not item.consequence for item in failures
    )
    reason = first.describe() + (" (on every failing node alike)" if everywhere else "")
    return Fault(JOB, (first.host,), reason, evidence, rank=first.rank, ranks=ranks)


def hardware_error(line: str) -> str | None:
    """What a line says failed in the hardware, or None."""
    for pattern, meaning in HARDWARE_ERRORS:
        if pattern.search(line):
            return meaning
    return None


def singled_out(groups: Sequence[Group]) -> tuple[str, str] | None:
    """(host, where) when every rank outside the biggest group is on one host that has no
    rank in the biggest group: that node, not the program, stopped the others."""
    if len(groups) < 2:
        return None
    odd_hosts = {host for group in groups[1:] for host in group.hosts}
    if len(odd_hosts) != 1:
        return None
    host = next(iter(odd_hosts))
    if host in groups[0].hosts:
        return None
    return host, groups[1].where


def traceback_tail(lines: Sequence[str], keep: int = 6) -> list[str]:
    """The end of the last traceback in a rank's last lines (its exception line last)."""
    start = max((i for i, line in enumerate(lines) if TRACEBACK in line), default=None)
    chosen = list(lines[start:]) if start is not None else list(lines)
    return [line.strip() for line in chosen[-keep:] if line.strip()]


def _failed_ranks(failures: Sequence[Failure]) -> dict[str, tuple[int, ...]]:
    ranks: dict[str, list[int]] = {}
    for item in failures:
        if item.rank is not None:
            ranks.setdefault(item.host, []).append(item.rank)
    return {host: tuple(sorted(set(found))) for host, found in ranks.items()}
