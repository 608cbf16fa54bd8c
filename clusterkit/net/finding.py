"""The network checks' shared Finding constructor and message bounds (pure).

Apart so that every module of the network checks stamps its findings the same way and bounds
its lists of paths by one number, without importing one another.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.registry import CheckId

MESSAGE_PAIRS = 6


def finding(check_id: CheckId, status: Status, message: str, **fields: Any) -> Finding:
    return Finding(check_id, status, message, **fields)


def more(items: Sequence[object], template: str) -> str:
    return template.format(len(items) - MESSAGE_PAIRS) if len(items) > MESSAGE_PAIRS else ""
