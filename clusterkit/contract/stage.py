"""The one shape of a stage: a name, why it cannot run now, and what running it found."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from clusterkit.checks.model import Finding
from clusterkit.contract.names import STAGE_ORDER, StageName
from clusterkit.contract.session import Session


@dataclass
class StageResult:
    """What one stage found. `details` goes to the JSON report under the stage's name,
    `text` under the stage's findings in the text report. `ran` is False when the stage
    started but found nothing to act on (reported as "not run")."""

    findings: list[Finding] = field(default_factory=list)
    details: Any = None
    text: list[str] = field(default_factory=list)
    ran: bool = True


class Stage(ABC):
    """A step of a command over the session's hosts.

    The class says when and how the stage runs (name, gating, concurrency, bound); `run`
    hands the session and the stage's bound to one entry point of the package that does the
    work, `run_<name>_stage(session, deadline, ...) -> StageResult` (net/steps.py,
    image/stage.py, storage/stage.py, bench/stage.py), or does the work itself where it is a
    few lines over shared parts (connect, probe, static, dcgm, launch).

    The runner (not the stage) records the outcome: it stamps `name` onto every finding,
    records a skipped stage with its reason, and sets `session.workers`: every host at once
    when `together` (the nodes must all act at the same moment: a barrier, a collective),
    else the session's forks.
    """

    name: StageName  # declared in clusterkit/contract/names.py, which orders the report
    together: bool = False  # every node must act at once; never limited by --forks

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """A stage whose name is not declared would be left out of the report's order and
        of --skip: refuse it when its class is defined, not when a report looks odd."""
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name is not None and name not in STAGE_ORDER:
            raise TypeError(f"{cls.__name__}.name {name!r} is not in clusterkit/contract/names.py")

    def skip_reason(self, session: Session) -> str | None:
        """Why the stage cannot or must not run now, or None."""
        if self.name in session.options.skip:
            return "skipped by --skip"
        return None

    def skipped(self, reason: str) -> list[Finding]:
        """Findings that stand for the stage when it is skipped (usually none)."""
        del reason
        return []

    def steps(self, session: Session) -> int:
        """Units of progress the stage reports (`session.progress.done` calls); 0: the
        stage is instant and shows no progress phase."""
        del session
        return 1

    @abstractmethod
    def run(self, session: Session) -> StageResult: ...


def no_hosts_reason(session: Session) -> str | None:
    """A stage that acts on nodes has nothing to act on without a connection."""
    return None if session.transports else "no host could be reached"
