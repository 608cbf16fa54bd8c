"""`clusterkit bench`: connect -> probe (fabric facts) -> torchrun on every node -> gate
(then each node alone with --per-node, groups in rounds with --find-slow)."""

from __future__ import annotations

import time
from typing import Any, TypeVar

from clusterkit.bench.flags import bench_options, bench_timeout
from clusterkit.bench.nccltests import write_json
from clusterkit.bench.stage import BenchStage
from clusterkit.checks.model import Status
from clusterkit.cli.bench import BenchRequest
from clusterkit.commands.common import connect_options, load_targets, report_view
from clusterkit.contract.session import SessionOptions
from clusterkit.environment import Environment
from clusterkit.probe import PROBE_SECONDS
from clusterkit.probe.stage import ProbeStage
from clusterkit.report import Report, emit
from clusterkit.slurm.check import slurm_stages, write_exclude_file
from clusterkit.stages import Session, build_report, run_stages
from clusterkit.stages.connect import ConnectStage
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline

T = TypeVar("T")


def failed_result(report: Report) -> dict[str, Any]:
    """What -J holds when nothing was measured: no rows, and why (a CI job reading the
    file must not find last run's numbers, nor nothing at all)."""
    cause = next(
        (f for f in report.findings if f.status in (Status.ERROR, Status.FAIL)),
        None,
    )
    error = {"check": cause.id, "message": cause.message, "hosts": cause.hosts} if cause else {}
    return {"results": [], "error": error or {"message": "no result was measured"}}


def run(request: BenchRequest, env: Environment) -> ExitStatus:
    started = time.monotonic()
    inventory, slurm = load_targets(request.target, env)
    settings = inventory.settings.bench
    deadline = Deadline.after(bench_timeout(request.flags, settings))
    bench_options(request.flags, settings, {}, env.environ)  # usage errors before any connection
    session = Session(inventory, deadline, SessionOptions(forks=request.connection.forks))
    stages = [
        ConnectStage(connect_options(request.connection, env)),
        ProbeStage(PROBE_SECONDS),
        # No preflight: the stage itself refuses a partial world or a node whose probe
        # failed, and says so.
        BenchStage(
            lambda session: bench_options(request.flags, settings, session.facts, env.environ),
            preflight=False,
        ),
    ]
    try:
        # On Slurm nodes over srun (inside an allocation): each stage in one job step.
        run_stages(session, slurm_stages(slurm, stages, env.environ))
    finally:
        session.close()
    report = build_report(session, "bench", seconds=time.monotonic() - started)
    if request.result_json:
        result = (session.details.get("bench") or {}).get("result")
        write_json(result or failed_result(report), request.result_json)
    emit(report, request.report.format, request.report.output, env, **report_view(request.report))
    if request.exclude_file:
        write_exclude_file(request.exclude_file, report, [host.name for host in inventory.hosts])
    return report.exit_status
