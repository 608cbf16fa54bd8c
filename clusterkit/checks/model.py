"""Findings: what every check, stage and report speaks."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def over_hosts(
    check_id: str,
    bad: Mapping[str, Any],
    checked: Sequence[str],
    *,
    ok: str,
    failed: str,
    status: Status = Status.FAIL,
    expected: Any = None,
    remedy: str | None = None,
) -> Finding:
    """The one shape of a check over many hosts: OK on every checked host, or `status` on the
    hosts in `bad` (host -> what was found there, which becomes the finding's `found`).
    Over no host at all it is skipped: nothing checked is never an OK."""
    if not checked and not bad:
        return Finding(check_id, Status.SKIP, "not checked: no host reported facts")
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
    )
