"""`launch`'s gate: what the launch knows before the job starts (the check's stages, a saved
report of them, or bare connections), the hosts the job starts on and its spares, what
leaving a Slurm node out does, and the run's record. It composes stages, so it lives here;
clusterkit/commands/launch.py turns the request into these options and the run."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clusterkit.contract.session import SessionOptions
from clusterkit.contract.stage import Stage
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.escape import printable
from clusterkit.facts import HostFacts
from clusterkit.inventory.model import Inventory
from clusterkit.launch.attempts import Attempts
from clusterkit.launch.incidents import restart_minutes, trace_text
from clusterkit.launch.reuse import read_saved
from clusterkit.launch.spares import NodeCount, NodePool, problems_by_host
from clusterkit.launch.stage import job_finding
from clusterkit.probe import PROBE_SECONDS
from clusterkit.probe.stage import ProbeStage
from clusterkit.redact import redact_text
from clusterkit.report import Report, emit, write_whole
from clusterkit.report.progress import progress
from clusterkit.slurm.check import in_steps, slurm_stages
from clusterkit.slurm.drain import drain_command, drain_left_out
from clusterkit.slurm.target import SlurmTarget
from clusterkit.stages import Session, StageResult, build_report, run_stages
from clusterkit.stages.connect import ConnectStage
from clusterkit.stages.lists import CheckPlan, checked_session
from clusterkit.stages.runner import record
from clusterkit.status import ExitStatus
from clusterkit.transport.srun import SrunSession
from clusterkit.words import counted


@dataclass(frozen=True)
class GateOptions:
    """What the gate and the run's record read of `launch`'s flags, as plain values."""

    plan: CheckPlan  # the check's stages, and the connections of a check-less gate
    strict: bool = False
    nnodes: NodeCount | None = None  # None: every host runs, and every one must pass
    no_check: bool = False
    check_report: str | None = None  # a saved passing report instead of the check
    max_age: float = 3600.0
    check_output: str | None = None  # the JSON report of the gate and the launch
    print_only: bool = False  # --print or --print-dir: the plan, nothing run
    format: str = "text"
    view: dict[str, bool] = field(default_factory=dict)  # the text report's extent
    slurm_drain: bool = False
    trace: str | None = None


def note(env: Environment, text: str) -> None:
    """clusterkit's own line on stderr; it may quote the job (last lines): secrets redacted."""
    print(redact_text(text), file=env.stderr, flush=True)


@dataclass
class Gate:
    """What the launch knows before it starts: facts, stage details, and whether to go."""

    status: ExitStatus
    how: str  # "checked", "report FILE", "not checked"
    facts: dict[str, HostFacts] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    session: Session | None = None  # open connections, kept for the job
    report: Report | None = None  # a failed check's, shown when the job cannot go ahead


def node_pool(
    options: GateOptions, env: Environment, inventory: Inventory, gate: Gate
) -> NodePool | None:
    """The hosts the job starts on (master first) and the spares; None when the job cannot
    start. Without --nnodes every host runs and every one must pass; with it, hosts that
    fail the check are left out, named, as long as enough healthy ones remain."""
    names = [inventory.master.name, *[h.name for h in inventory.hosts if h is not inventory.master]]
    count = options.nnodes or NodeCount(len(names), len(names))
    if count.least > len(names):
        raise UsageError(
            f"--nnodes {count}: the inventory has {counted(len(names), 'host')}",
            hint="give at most as many nodes as there are hosts (the rest are spares)",
        )
    pool = NodePool(count, tuple(names))
    if gate.status is not ExitStatus.PASSED and not leave_out_failing(options, env, gate, pool):
        return None
    pool.fill(first=True)
    if not pool.enough:
        show_gate_report(options, env, gate)
        note(
            env,
            f"clusterkit: {counted(len(pool.active), 'healthy node')}, --nnodes needs "
            f"{count.least}: nothing was started",
        )
        return None
    if pool.excluded:
        note(
            env,
            f"clusterkit: the check failed on {', '.join(pool.excluded)}: the job goes ahead "
            f"without {'it' if len(pool.excluded) == 1 else 'them'}, on "
            f"{counted(len(pool.active), 'node')} (--nnodes {count})",
        )
    return pool


def leave_out_failing(options: GateOptions, env: Environment, gate: Gate, pool: NodePool) -> bool:
    """With --nnodes, the hosts that failed the check leave the pool, each named with why;
    False (nothing starts) without --nnodes, or when the check failed for every node."""
    if options.nnodes is None or gate.session is None:
        show_gate_report(options, env, gate)
        note(env, f"clusterkit: the check did not pass: nothing was started (exit {gate.status})")
        return False
    names = list(pool.order)
    problems, whole = problems_by_host(gate.session.findings, names, strict=options.strict)
    for host, error in gate.session.unreachable.items():
        problems.setdefault(host, [f"unreachable: {error.detail}"])
    if whole:
        show_gate_report(options, env, gate)
        note(env, f"clusterkit: the check failed for every node ({whole[0]}): nothing was started")
        return False
    for host in pool.exclude(problems):
        note(env, printable(f"clusterkit: {host} failed the check, left out: {problems[host][0]}"))
    return True


def show_gate_report(options: GateOptions, env: Environment, gate: Gate) -> None:
    """The failed check's report, when --nnodes held it back and the job does not start."""
    if options.nnodes is not None and gate.report is not None and not options.check_output:
        emit(gate.report, options.format, None, env, **options.view)


def stage_runner(srun: SrunSession | None) -> Callable[[Session, list[Stage]], None]:
    """How the attempts run stages: as they are over SSH; each in one job step under srun."""
    if srun is None:
        return run_stages
    return lambda session, stages: run_stages(session, in_steps(srun, stages))


def slurm_left_out(
    options: GateOptions, env: Environment, srun: SrunSession
) -> Callable[[str, str, bool], None]:
    """What leaving a Slurm node out does: no later step goes there; with --slurm-drain the
    node is drained with the reason (where this user may), else the admin's command is
    printed. A node blamed only by the job (what it printed, its memory, where its ranks
    waited) is left out of this run and never drained for everyone else."""

    def left_out(host: str, why: str, its_own: bool) -> None:
        srun.unlaunchable.setdefault(host, f"left out by clusterkit: {why}")
        if not its_own:
            note(
                env,
                f"clusterkit: {host} not drained: only the job's output or behaviour blames "
                "it, not the node's own evidence (kernel log, nvidia-smi, its checks)",
            )
            return
        if options.slurm_drain:
            problem = drain_left_out(host, why, env.environ)
            if problem is None:
                note(env, printable(f"clusterkit: {host} drained"))
                return
            note(env, printable(f"clusterkit: {host} not drained: {problem}"))
        note(env, printable(f"clusterkit: for an admin, to drain it: {drain_command(host, why)}"))

    return left_out


def record_run(options: GateOptions, env: Environment, gate: Gate, attempts: Attempts) -> None:
    """The incidents: in the JSON report (--check-output), as a trace for `clusterkit cost`
    (--trace), and the measured restart cost in the form `cost --restart-min` takes."""
    minutes = restart_minutes(attempts.incidents)
    if attempts.incidents:
        note(
            env,
            f"clusterkit: {counted(len(attempts.incidents), 'incident')}, "
            f"{counted(attempts.attempt + 1, 'attempt')}"
            + (
                f"; left out: {', '.join(attempts.pool.excluded)}" if attempts.pool.excluded else ""
            ),
        )
    if minutes is not None:
        note(env, f"clusterkit: measured restart overhead: cost --restart-min {minutes:.2f}")
    if options.trace:
        hours = (time.monotonic() - attempts.started) / 3600
        text = trace_text(attempts.incidents, len(attempts.pool.active), hours)
        try:
            write_whole(options.trace, text.encode())
        except OSError as error:
            note(env, printable(f"clusterkit: --trace {options.trace}: not written: {error}"))
    if options.check_output and gate.session is not None:
        gate.session.details["launch"] = attempts.details()
        if attempts.outcome is not None:  # the report's verdict is the launch's, not the gate's
            record(gate.session, "launch", StageResult([job_finding(attempts.outcome)]))
            gate.session.stages["launch"] = "ran"
        report = build_report(gate.session, "launch", seconds=0.0, strict=options.strict)
        emit(report, options.format, options.check_output, env, **options.view)


def open_gate(
    options: GateOptions,
    env: Environment,
    inventory: Inventory,
    target: SlurmTarget | None = None,
) -> Gate:
    if options.check_report:
        return report_gate(options, Path(options.check_report), env, inventory, target)
    if options.no_check:
        if options.print_only:
            note(
                env,
                "clusterkit: --no-check: planned WITHOUT checking the cluster: ranks per node "
                "from --nproc-per-node, else expect.gpus_per_node; addresses as the inventory "
                "writes them",
            )
            return Gate(ExitStatus.PASSED, "not checked")
        note(env, "clusterkit: --no-check: launching WITHOUT checking the cluster")
        return connect_gate(options, env, inventory, "not checked", target)
    return check_gate(options, env, inventory, target)


def check_gate(
    options: GateOptions, env: Environment, inventory: Inventory, target: SlurmTarget | None
) -> Gate:
    """The whole check, as `clusterkit check` runs it; connections stay open for the job."""
    started = time.monotonic()
    with progress(env) as bar:
        session = checked_session(options.plan, env, inventory, bar, target)
    report = build_report(
        session, "launch", seconds=time.monotonic() - started, strict=options.strict
    )
    status = report.exit_status
    # With --nnodes a failed check may still go ahead without the failing hosts: node_pool
    # shows the report only when it does not.
    if (status is not ExitStatus.PASSED and options.nnodes is None) or options.check_output:
        emit(report, options.format, options.check_output, env, **options.view)
    if status is ExitStatus.PASSED and not session.unreachable:
        note(env, f"clusterkit: check passed in {report.seconds:.1f} s")
    return Gate(status, "checked", session.facts, session.details, session, report)


def connect_gate(
    options: GateOptions,
    env: Environment,
    inventory: Inventory,
    how: str,
    target: SlurmTarget | None,
) -> Gate:
    """Connections (every host, or nothing starts) and the probe's facts, no verdict."""
    session = Session(inventory, None, SessionOptions(forks=options.plan.connect.forks))
    try:
        stages = [
            ConnectStage(options.plan.connect),
            ProbeStage(PROBE_SECONDS),
        ]
        connect, probe = slurm_stages(target, stages, env.environ)
        run_stages(session, [connect])
        if session.unreachable:
            for name, error in session.unreachable.items():
                note(env, f"clusterkit: {name}: {error.detail}")
            session.close()
            return Gate(ExitStatus.INCOMPLETE, how)
        run_stages(session, [probe])
    except BaseException:
        session.close()
        raise
    return Gate(ExitStatus.PASSED, how, session.facts, {}, session)


def report_gate(
    options: GateOptions,
    path: Path,
    env: Environment,
    inventory: Inventory,
    target: SlurmTarget | None,
) -> Gate:
    """A passing JSON report of `check` (or `launch`), young enough, naming these hosts."""
    saved = read_saved(path, options.max_age, [h.name for h in inventory.hosts])
    if saved.problem:
        note(env, f"clusterkit: --check-report {path}: {saved.problem}: nothing was started")
        return Gate(ExitStatus.USAGE, f"report {path}")
    note(env, f"clusterkit: reusing the check report {path} ({saved.age:.0f} s old)")
    facts, details = saved.facts, saved.details
    if options.print_only:
        return Gate(ExitStatus.PASSED, f"report {path}", facts, details)
    gate = connect_gate(options, env, inventory, f"report {path}", target)
    gate.facts, gate.details = facts, details
    return gate
