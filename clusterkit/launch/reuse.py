"""A saved check report standing in for the check (--check-report): a passing JSON report of
`check` (or of a launch that succeeded on every node it started with), young enough, naming
the inventory's hosts, its facts of this probe version and of the shape the checks read.
Only `read_saved` reads the file; the rest is pure.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterkit.errors import UsageError
from clusterkit.facts import PROBE_VERSION, HostFacts, MalformedFacts, parse_facts


@dataclass(frozen=True)
class SavedReport:
    """What a saved report gives the gate: its facts and details, or why it cannot."""

    age: float  # seconds since it was written
    problem: str | None = None
    facts: dict[str, HostFacts] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)


def read_saved(path: Path, max_age: float, hosts: list[str]) -> SavedReport:
    """The report at `path` for a launch on `hosts`; a usage error when it cannot be read
    or is not JSON at all."""
    try:
        report = json.loads(path.read_text())
        age = time.time() - path.stat().st_mtime
    except OSError as error:
        raise UsageError(f"--check-report {path}: {error.strerror}") from None
    except ValueError as error:
        raise UsageError(f"--check-report {path}: not a JSON report ({error})") from None
    problem = report_problem(report, age, max_age, hosts)
    if problem:
        return SavedReport(age, problem)
    facts = {name: report_facts(entry) for name, entry in report["hosts"].items()}
    return SavedReport(age, None, facts, dict(report.get("details") or {}))


def report_problem(report: Any, age: float, max_age: float, hosts: list[str]) -> str | None:
    """Why a saved report cannot stand in for a check now, or None."""
    if not isinstance(report, dict) or not isinstance(report.get("hosts"), dict):
        return "not a clusterkit JSON report"
    if report.get("verdict") != "pass":
        return f"its verdict is {report.get('verdict')!r}, not pass"
    if problem := launch_problem(report.get("details")):
        return problem
    if age > max_age:
        return f"it is {age:.0f} s old, more than --max-age {max_age:g}"
    named = sorted(report["hosts"])
    if named != sorted(hosts):
        return f"it names hosts {', '.join(named)}, the inventory {', '.join(sorted(hosts))}"
    if (version := report.get("probe_version")) != PROBE_VERSION:
        return f"its facts are of probe version {version!r}, this clusterkit reads {PROBE_VERSION}"
    for name, entry in report["hosts"].items():
        try:
            report_facts(entry)
        except MalformedFacts as error:
            return f"host {name}: {error}"
    return None


def launch_problem(details: object) -> str | None:
    """A launch's report is a gate only for a launch that succeeded on every node it
    started with: one that failed, or left a node out, vouches for nobody."""
    launch = details.get("launch") if isinstance(details, dict) else None
    if launch is None:
        return None
    if not isinstance(launch, dict) or launch.get("result") != "succeeded":
        result = launch.get("result") if isinstance(launch, dict) else launch
        return f"it records a launch that did not succeed ({str(result)[:40]!r})"
    if excluded := launch.get("excluded"):
        names = ", ".join(str(host)[:64] for host in excluded)[:300]
        return f"it records a launch that left nodes out ({names})"
    return None


def report_facts(entry: object) -> HostFacts:
    """A saved host entry's facts, of the shape the checks read (MalformedFacts if not)."""
    facts = entry.get("facts") if isinstance(entry, dict) else None
    return HostFacts() if facts is None else parse_facts(facts)
