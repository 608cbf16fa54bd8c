"""Findings: what every check, stage and report speaks."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


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


@dataclass
class Finding:
    """One verdict of one check. `id` is stable and documented (docs/checks.md)."""

    id: str
    status: Status
    message: str
    hosts: list[str] = field(default_factory=list)
    expected: Any = None
    found: Any = None
    remedy: str | None = None
    stage: str = "static"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        return data
