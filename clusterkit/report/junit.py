"""JUnit XML: one testsuite per stage, one testcase per check, for CI dashboards."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections import Counter

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.names import stage_rank
from clusterkit.escape import printable
from clusterkit.report.model import Report


def _detail(finding: Finding) -> str:
    lines = [finding.message]
    if finding.hosts:
        lines.append(f"hosts: {', '.join(finding.hosts)}")
    if finding.expected is not None:
        lines.append(f"expected: {finding.expected}")
    if finding.found is not None:
        lines.append(f"found: {finding.found}")
    if finding.remedy:
        lines.append(f"remedy: {finding.remedy}")
    # Control characters are not even allowed in XML 1.0; each line stays one line.
    return "\n".join(printable(line) for line in lines)


def render_junit(report: Report) -> str:
    root = ET.Element("testsuites", name="clusterkit", time=f"{report.seconds:.3f}")
    stages = sorted({f.stage for f in report.findings}, key=lambda s: (stage_rank(s), s))
    for stage in stages:
        findings = [f for f in report.findings if f.stage == stage]
        suite = ET.SubElement(root, "testsuite", name=f"clusterkit.{stage}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        for finding, name in zip(findings, case_names(findings)):
            counts["tests"] += 1
            case = ET.SubElement(suite, "testcase", classname=f"clusterkit.{stage}", name=name)
            failed = finding.status is Status.FAIL or (
                report.strict and finding.status is Status.WARN
            )
            if failed:
                counts["failures"] += 1
                node = ET.SubElement(
                    case, "failure", message=printable(finding.message), type=finding.id
                )
                node.text = _detail(finding)
            elif finding.status is Status.ERROR:
                counts["errors"] += 1
                node = ET.SubElement(
                    case, "error", message=printable(finding.message), type=finding.id
                )
                node.text = _detail(finding)
            elif finding.status is Status.SKIP:
                counts["skipped"] += 1
                ET.SubElement(case, "skipped", message=printable(finding.message))
            else:
                out = ET.SubElement(case, "system-out")
                out.text = f"{finding.status.value.upper()}: {_detail(finding)}"
        for key, value in counts.items():
            suite.set(key, str(value))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def case_names(findings: list[Finding]) -> list[str]:
    """A testcase name per finding, unique within its suite: a CI dashboard keeps one history
    per (classname, name), so one host's finding of a check that several hosts have (an
    unreachable host each) is named `id[host]`; any remaining twin gets `#N`."""
    repeated = {check for check, n in Counter(f.id for f in findings).items() if n > 1}
    names = [
        f"{f.id}[{f.hosts[0]}]" if f.id in repeated and len(f.hosts) == 1 else f.id
        for f in findings
    ]
    seen: dict[str, int] = {}
    unique = []
    for name in names:
        seen[name] = seen.get(name, 0) + 1
        unique.append(name if seen[name] == 1 else f"{name}#{seen[name]}")
    return [printable(name) for name in unique]
