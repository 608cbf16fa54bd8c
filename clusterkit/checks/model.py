"""Findings: what every check, stage and report speaks."""

from __future__ import annotations

import dataclasses
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from clusterkit.checks.registry import CheckId
from clusterkit.status import ExitStatus


class Status(str, Enum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"  # checked, and it is wrong: the job should not go ahead
    SKIP = "skip"  # not applicable, or a prerequisite stage failed (reason in message)
    ERROR = "error"  # could not check (host unreachable, collector failed): never a pass

    @property
    def rank(self) -> int:
        return _RANK[self]


_RANK = {Status.OK: 0, Status.SKIP: 1, Status.WARN: 2, Status.ERROR: 3, Status.FAIL: 4}
NEEDS_FIX = (Status.FAIL, Status.WARN, Status.ERROR)
BY_HAND = "; or by hand: "


@dataclass(frozen=True)
class Fix:
    """What fixes a finding for good: the provisioning playbook's roles with these tags
    (playbooks/site.yml), run on these hosts. `--fix-plan` lists the commands; the remedy
    shows the same command."""

    tags: tuple[str, ...]
    hosts: tuple[str, ...] = ()

    def command(self, inventory_path: str | None) -> str | None:
        """The `clusterkit provision` line that applies it; None without an inventory file,
        which the command needs."""
        if inventory_path is None:
            return None
        argv = ["clusterkit", "provision", inventory_path, "--tags", ",".join(self.tags)]
        if self.hosts:
            argv += ["--limit", ",".join(self.hosts)]
        return shlex.join(argv)


@dataclass
class Finding:
    """One verdict of one check. `id` is stable and documented (docs/checks.md)."""

    id: CheckId
    status: Status
    message: str
    hosts: list[str] = field(default_factory=list)
    expected: Any = None
    found: Any = None
    remedy: str | None = None  # what a person does; with a fix, its command (see with_command)
    stage: str = "static"
    fix: Fix | None = None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        del data["fix"]  # the JSON shows it as the remedy's command (docs/report.md)
        return data


def with_command(
    finding: Finding, inventory_path: str | None, *, then_by_hand: bool = False
) -> Finding:
    """The finding with its fix's provisioning command as the remedy: instead of what it said
    to do by hand, or before it (`then_by_hand`). Unchanged without a fix or an inventory."""
    command = finding.fix.command(inventory_path) if finding.fix else None
    if command is None:
        return finding
    by_hand = BY_HAND + finding.remedy if then_by_hand and finding.remedy else ""
    return dataclasses.replace(finding, remedy=command + by_hand)


def over_hosts(
    check_id: CheckId,
    bad: Mapping[str, Any],
    checked: Sequence[str],
    *,
    ok: str,
    failed: str,
    status: Status = Status.FAIL,
    expected: Any = None,
    remedy: str | None = None,
    fix_tag: str | None = None,
    unchecked: str = "no host reported facts",
) -> Finding:
    """The one shape of a check over many hosts: OK on every checked host, or `status` on the
    hosts in `bad` (host -> what was found there, which becomes the finding's `found`), fixed
    on those hosts by the playbook's `fix_tag` where one is named.
    Over no host at all it is skipped (`unchecked` says why): nothing checked is never an OK."""
    if not checked and not bad:
        return Finding(check_id, Status.SKIP, f"not checked: {unchecked}")
    if not bad:
        return Finding(
            check_id, Status.OK, ok, hosts=list(checked), expected=expected, found=expected
        )
    return Finding(
        check_id,
        status,
        failed,
        hosts=list(bad),
        expected=expected,
        found=dict(bad),
        remedy=remedy,
        fix=Fix((fix_tag,), tuple(bad)) if fix_tag else None,
    )


def per_host(by_host: Mapping[str, object]) -> str:
    """`host: what; host: what`, the hosts a message names with what was found on each."""
    return "; ".join(f"{host}: {what}" for host, what in by_host.items())


HostProblem = tuple[Status, str, str, str]  # status, host, evidence, what a person does


def graded(
    check_id: CheckId, checked: list[str], problems: list[HostProblem], *, what: str, ok: str
) -> list[Finding]:
    """One finding per status found (fail and warn hosts apart), else one OK. A host's
    evidence is joined in the order found; the remedy names each action once, host first."""
    if not problems:
        return [over_hosts(check_id, {}, checked, ok=ok, failed="")]
    findings = []
    for status in (Status.FAIL, Status.WARN):
        mine = [p for p in problems if p[0] is status]
        if not mine:
            continue
        bad: dict[str, str] = {}
        for _, host, evidence, _ in mine:
            bad[host] = f"{bad[host]}; {evidence}" if host in bad else evidence
        remedy = "; ".join(dict.fromkeys(f"{host} {action}" for _, host, _, action in mine))
        findings.append(
            over_hosts(
                check_id,
                bad,
                checked,
                ok=ok,
                failed=f"{what}: {per_host(bad)}",
                status=status,
                remedy=remedy,
            )
        )
    return findings


def verdict_status(findings: list[Finding], *, strict: bool = False) -> ExitStatus:
    """fail beats incomplete beats pass: a definite failure is the more useful answer, and
    "could not check" is never a pass."""
    statuses = {finding.status for finding in findings}
    if Status.FAIL in statuses or (strict and Status.WARN in statuses):
        return ExitStatus.FAILED
    if Status.ERROR in statuses:
        return ExitStatus.INCOMPLETE
    return ExitStatus.PASSED
