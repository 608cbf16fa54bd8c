"""The report of one run, and the verdict that maps it to an exit status."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from clusterkit import __version__
from clusterkit.checks.model import Finding, Status, verdict_status
from clusterkit.facts import PROBE_VERSION, HostEntry
from clusterkit.status import ExitStatus

SCHEMA_VERSION = 1


@dataclass
class Report:
    command: str
    inventory: str | None
    findings: list[Finding]
    hosts: dict[str, HostEntry]
    stages: dict[str, str] = field(default_factory=dict)  # stage -> "ran" or why skipped
    details: dict[str, Any] = field(default_factory=dict)  # stage -> raw data for JSON
    text_blocks: dict[str, list[str]] = field(default_factory=dict)  # stage -> extra lines
    strict: bool = False
    seconds: float = 0.0
    fix_plan: list[str] | None = None  # `--fix-plan`: provisioning commands, in the JSON too

    @property
    def exit_status(self) -> ExitStatus:
        return verdict_status(self.findings, strict=self.strict)

    @property
    def verdict(self) -> str:
        return {
            ExitStatus.PASSED: "pass",
            ExitStatus.FAILED: "fail",
            ExitStatus.INCOMPLETE: "incomplete",
        }[self.exit_status]

    def counts(self) -> dict[str, int]:
        counts = {status.value: 0 for status in Status}
        for finding in self.findings:
            counts[finding.status.value] += 1
        return counts

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "clusterkit_version": __version__,
            "probe_version": PROBE_VERSION,
            "command": self.command,
            "inventory": self.inventory,
            "verdict": self.verdict,
            "exit_status": int(self.exit_status),
            "strict": self.strict,
            "seconds": round(self.seconds, 3),
            "counts": self.counts(),
            "stages": self.stages,
            "findings": [finding.to_dict() for finding in self.findings],
            "hosts": self.hosts,
            "details": self.details,
            **({} if self.fix_plan is None else {"fix_plan": self.fix_plan}),
        }
