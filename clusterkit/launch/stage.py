"""Stage `launch`: the job itself, after the check's stages, over the same session.

It runs the plan (clusterkit/launch/plan.py, made from what the session learned) under the
supervisor on every node at once, over the session's connections, and records the outcome:
one `launch.job` finding, and the outcome as the stage's details. Gated, it never starts
when an earlier stage of the session failed or could not check.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from clusterkit.checks.model import Finding, Status, verdict_status
from clusterkit.contract.session import Session
from clusterkit.contract.stage import Stage, StageResult, no_hosts_reason
from clusterkit.launch.job import JobOutcome, SuperviseOptions
from clusterkit.launch.plan import LaunchSettings, build_plan
from clusterkit.launch.supervise import Supervisor
from clusterkit.launch.watch import node_devices
from clusterkit.status import ExitStatus


class LaunchStage(Stage):
    """`settings` is what the command made of the flags and the session; `strict` makes
    warnings refuse the launch, as `check --strict` fails on them."""

    name = "launch"
    together = True  # every node's torchrun must start for the rendezvous

    def __init__(
        self,
        settings: LaunchSettings,
        options: SuperviseOptions,
        *,
        gated: bool = True,
        strict: bool = False,
    ) -> None:
        self.settings, self.options, self.gated, self.strict = settings, options, gated, strict
        self.outcome: JobOutcome | None = None
        # The bound of the job step under srun: the job's own time limit, else a week.
        self.seconds = options.time_limit or 7 * 24 * 3600.0

    def skip_reason(self, session: Session) -> str | None:
        hosts = [node.name for node in self.settings.nodes]
        if missing := [host for host in hosts if host not in session.transports]:
            return f"not every node is connected ({', '.join(missing)})"
        if self.gated and verdict_status(session.findings, strict=self.strict) is not (
            ExitStatus.PASSED
        ):
            return "the check did not pass"
        return no_hosts_reason(session)

    def skipped(self, reason: str) -> list[Finding]:
        return [Finding("launch.job", Status.SKIP, f"job not started: {reason}")]

    def run(self, session: Session) -> StageResult:
        pythons = {node.name: node.python for node in self.settings.nodes}
        plan = build_plan(self.settings)
        # What each node's facts list is all its hardware watch may name (a node speaks for
        # itself); launched unchecked, nothing is known and every event is read.
        devices = {host: node_devices(facts) for host, facts in session.facts.items()}
        options = replace(self.options, devices=devices) if devices else self.options
        self.outcome = Supervisor(
            session.transports, plan, self.settings.run_id, pythons, options
        ).run()
        return StageResult([job_finding(self.outcome)], outcome_details(self.outcome))


def job_finding(outcome: JobOutcome) -> Finding:
    status = Status.OK if outcome.status == 0 else Status.FAIL
    hosts = [outcome.first_failure.host] if outcome.first_failure else []
    remedy = outcome.remedy
    return Finding(
        "launch.job",
        status,
        f"job {outcome.result}: {outcome.message}",
        hosts=hosts,
        remedy=remedy.line() if remedy is not None else None,
    )


def outcome_details(outcome: JobOutcome) -> dict[str, Any]:
    first = outcome.first_failure
    hang = outcome.hang
    remedy = outcome.remedy
    return {
        "result": outcome.result,
        "exit_status": outcome.status,
        "message": outcome.message,
        "seconds": round(outcome.seconds, 3),
        "node_exit_codes": outcome.node_codes,
        "evidence_dir": outcome.evidence,
        "hardware": [
            {"host": g.host, "status": g.status.value, "what": g.what} for g in outcome.hardware
        ],
        "first_failure": None
        if first is None
        else {
            "host": first.host,
            "rank": first.rank,
            "exit_code": first.exit_code,
            "signal": first.signal_name,
            "last_lines": list(first.last_lines),
            "remedy": None if remedy is None else {"id": remedy.key, "text": remedy.line()},
        },
        "hang": None
        if hang is None
        else {
            "reason": hang.reason,
            "summary": hang.summary,
            "odd_ones_out": hang.odd_ones_out,
            "missing": hang.missing,
        },
    }
