"""A lint result as text (one line per finding, then why and the fix) or JSON. Script text
is the user's, but a local import can pull in any file of the tree: every piece is escaped."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from clusterkit.escape import printable
from clusterkit.lint.model import Context, LintFinding, Severity
from clusterkit.words import counted

if TYPE_CHECKING:
    from clusterkit.lint.project import LintResult


def failing(findings: tuple[LintFinding, ...] | list[LintFinding], *, strict: bool) -> bool:
    return any(f.severity is Severity.FAIL or strict for f in findings)


def finding_lines(finding: LintFinding) -> list[str]:
    return [
        printable(
            f"{finding.path}:{finding.line}: {finding.severity.value} {finding.rule}: "
            f"{finding.message}"
        ),
        printable(f"  why: {finding.why}"),
        printable(f"  fix: {finding.fix}"),
    ]


def describe_context(context: Context) -> str:
    if context.nodes is None:
        return "no cluster given: node-count rules warn"
    ranks = f" x {counted(context.nproc_per_node, 'rank')}" if context.nproc_per_node else ""
    return f"judged for {counted(context.nodes, 'node')}{ranks}"


def render_text(result: LintResult, context: Context) -> str:
    lines = [line for finding in result.findings for line in finding_lines(finding)]
    fails = sum(f.severity is Severity.FAIL for f in result.findings)
    warns = len(result.findings) - fails
    lines.append(
        f"lint: {counted(fails, 'failing finding')}, {counted(warns, 'warning')} in "
        f"{counted(len(result.files), 'file')} ({describe_context(context)})"
    )
    return "\n".join(lines) + "\n"


def render_json(result: LintResult, context: Context, status: int) -> str:
    document = {
        "files": list(result.files),
        "context": {
            "nodes": context.nodes,
            "nproc_per_node": context.nproc_per_node,
            "world_size": context.world_size,
        },
        "findings": [
            {
                "rule": f.rule,
                "severity": f.severity.value,
                "path": f.path,
                "line": f.line,
                "message": f.message,
                "why": f.why,
                "fix": f.fix,
            }
            for f in result.findings
        ],
        "exit_status": status,
    }
    return json.dumps(document, indent=2) + "\n"
