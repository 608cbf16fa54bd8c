"""Run the stages of a command over a session, and turn the session into a report."""

from __future__ import annotations

from collections.abc import Iterable

from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult
from clusterkit.report import Report


def run_stages(session: Session, stages: Iterable[Stage]) -> None:
    """Each stage in turn: skipped with its reason, or run with the concurrency it needs;
    its findings, details and text land in the session under its name."""
    for stage in stages:
        reason = stage.skip_reason(session)
        if reason is not None:
            session.stages[stage.name] = reason
            result = StageResult(stage.skipped(reason))
        else:
            hosts = len(session.transports) or len(session.inventory.hosts)
            forks = session.options.forks
            session.workers = max(1, hosts) if stage.together or forks is None else forks
            if steps := stage.steps(session):
                order = [host.name for host in session.inventory.hosts]
                session.progress.phase(stage.name, steps, order)
            result = stage.run(session)
            session.stages[stage.name] = "ran" if result.ran else "not run"
        record(session, stage.name, result)


def record(session: Session, name: str, result: StageResult) -> None:
    """The one place a stage's findings get its name."""
    for finding in result.findings:
        finding.stage = name
    session.findings += result.findings
    if result.details is not None:
        session.details[name] = result.details
    if result.text:
        session.text[name] = list(result.text)


def build_report(session: Session, command: str, *, seconds: float, strict: bool = False) -> Report:
    return Report(
        command=command,
        inventory=session.inventory.path,
        findings=session.findings,
        hosts=session.host_entries(),
        stages=session.stages,
        details=session.details,
        text_blocks=session.text,
        strict=strict,
        seconds=seconds,
    )
