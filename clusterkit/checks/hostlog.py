"""The host's own faults from the same kernel-log read as the Xids: machine checks, uncorrected
memory errors (EDAC) and filesystem errors. A GPU job on a host whose memory or disk fails
dies or corrupts its checkpoints however healthy the GPUs are; these stay in the log until
reboot, like an Xid, and a reboot is also their repair."""

from __future__ import annotations

import re
from dataclasses import dataclass

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import Facts
from clusterkit.checks.registry import CheckId
from clusterkit.escape import printable
from clusterkit.facts import HostEvent, HostFacts, collected

# Only these characters of a node's device name reach a drain reason.
DEVICE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,32}")
TEXT_LIMIT = 240  # the node's own line in a message, printable and cut


@dataclass(frozen=True)
class HostCheck:
    check_id: CheckId
    kind: str  # HostEvent kind
    fails: tuple[str, ...]  # HostEvent `what` values that fail; the others warn
    label: str
    remedy: str


CHECKS = (
    HostCheck(
        "host.mce",
        "mce",
        ("uncorrected",),
        "machine check",
        "drain the node; read the machine-check records (rasdaemon: ras-mc-ctl --errors, or "
        "mcelog), have the CPU or DIMM they name serviced, then reboot; corrected errors "
        "alone: watch whether they keep coming",
    ),
    HostCheck(
        "host.edac",
        "edac",
        ("uncorrected",),
        "uncorrected memory error",
        "drain the node; find the DIMM (ras-mc-ctl --errors, edac-util -v), replace it, reboot",
    ),
    HostCheck(
        "host.filesystem",
        "fs",
        ("read-only", "shutdown"),
        "filesystem",
        "drain the node; unmount and repair the filesystem (fsck / xfs_repair) or reboot, "
        "and check the disk (smartctl -a, nvme smart-log)",
    ),
)


def _events(facts: HostFacts, kind: str) -> list[HostEvent]:
    events = collected(facts.get("kernel_log")).get("host_events") or []
    return [e for e in events if e.get("kind") == kind]


def _text(value: object) -> str:
    """A node's value as one printable, bounded piece of a message."""
    line = printable(value)
    return line if len(line) <= TEXT_LIMIT else line[: TEXT_LIMIT - 3] + "..."


def _describe(event: HostEvent, count: int) -> str:
    device = f" {_text(event.get('device'))}" if event.get("device") else ""
    last = f", last {_text(event.get('time'))}" if event.get("time") else ""
    return f"{event.get('what')}{device} x{count}{last}: {_text(event.get('text'))}"


def _summary(events: list[HostEvent]) -> list[str]:
    """One line per (what, device), the last event's text as evidence."""
    groups: dict[tuple[str | None, str | None], list[HostEvent]] = {}
    for event in events:
        groups.setdefault((event.get("what"), event.get("device")), []).append(event)
    return [
        _describe(items[-1], sum(e.get("count", 1) for e in items)) for items in groups.values()
    ]


def _host_finding(check: HostCheck, host: str, events: list[HostEvent]) -> Finding:
    failing = any(e.get("what") in check.fails for e in events)
    status = Status.FAIL if failing else Status.WARN
    return Finding(
        check.check_id,
        status,
        f"{host}: {check.label}: " + "; ".join(_summary(events)),
        hosts=[host],
        found={host: events},
        remedy=check.remedy,
    )


def host_log_findings(facts: Facts) -> list[Finding]:
    """host.mce, host.edac and host.filesystem over every host whose kernel log was read
    (an unreadable log is reported once, by gpu.xid)."""
    findings: list[Finding] = []
    for check in CHECKS:
        clean: list[str] = []
        for host, host_facts in facts.items():
            log = host_facts.get("kernel_log")
            if log is None or "error" in log:
                continue
            events = _events(host_facts, check.kind)
            if events:
                findings.append(_host_finding(check, host, events))
            else:
                clean.append(host)
        if clean:
            findings.append(
                Finding(
                    check.check_id, Status.OK, f"no {check.label} fault since boot", hosts=clean
                )
            )
    return findings


def drain_notes(facts: HostFacts) -> list[str]:
    """Short words for a Slurm drain reason, e.g. `EDAC MC0 uncorrected memory error`, one
    per failing (kind, device): only our words and device names of a validated shape."""
    notes: list[str] = []
    for check in CHECKS:
        for event in _events(facts, check.kind):
            if event.get("what") not in check.fails:
                continue
            note = _note(check.kind, str(event.get("device") or ""), str(event.get("what")))
            if note not in notes:
                notes.append(note)
    return notes


def _note(kind: str, device: str, what: str) -> str:
    name = (device if DEVICE_NAME.fullmatch(device) else "?") if device else ""
    if kind == "mce":
        return f"MCE{' bank ' + name if name else ''} uncorrected"
    if kind == "edac":
        return f"EDAC {name or '?'} uncorrected memory error"
    return f"fs {name or '?'} {what}"
