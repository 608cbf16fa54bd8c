"""`clusterkit lint`: the training script's distributed mistakes, read statically (Python's
`ast`; the script is never imported or run) and judged with what the cluster plans.

Layer: features. Start at: project.py.
"""

from clusterkit.lint.model import RULES, Context, LintFinding, Rule, Severity
from clusterkit.lint.project import LintInputError, LintResult, lint_script
from clusterkit.lint.render import render_json, render_text

__all__ = [
    "RULES",
    "Context",
    "LintFinding",
    "LintInputError",
    "LintResult",
    "Rule",
    "Severity",
    "lint_script",
    "render_json",
    "render_text",
]
