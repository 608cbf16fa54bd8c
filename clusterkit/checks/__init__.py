"""Checks are pure functions: (facts of all hosts, expectations) -> findings. No I/O here.

Layer: checks. Start at: registry.py.
"""

from clusterkit.checks.model import Finding, Fix, Status
from clusterkit.checks.static import STATIC_CHECKS, StaticCheck, StaticInput, static_findings

__all__ = [
    "STATIC_CHECKS",
    "Finding",
    "Fix",
    "StaticCheck",
    "StaticInput",
    "Status",
    "static_findings",
]
