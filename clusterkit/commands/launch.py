"""`clusterkit launch`: check, then run torchrun on every node with exactly what was checked.

inventory -> the check's stages (or a passing report, or nothing with --no-check) -> the
launch plan (clusterkit/launch/plan.py) -> printed (--print) or run over the same
connections: the attempts and their recovery (clusterkit/launch/attempts.py), each attempt
supervised (clusterkit/launch/supervise.py) -> the job's exit status. Everything but turning
the request into the run, and printing, lives in clusterkit/launch/ and, where stages are
composed (the gate, the node pool, the run's record), clusterkit/stages/launch_gate.py.
"""

from __future__ import annotations

import uuid
from functools import partial

from clusterkit.cli.launch import LaunchRequest
from clusterkit.commands.common import check_plan, load_targets, report_view
from clusterkit.commands.lint import lint_before_launch
from clusterkit.commands.preflight import entry_preflight
from clusterkit.contract.session import NoProgress
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.escape import printable
from clusterkit.inventory.model import Inventory
from clusterkit.launch.attempts import Attempts, subset
from clusterkit.launch.folders import open_folder, print_plan
from clusterkit.launch.job import JobOutcome, SuperviseOptions
from clusterkit.launch.plan import build_plan, ranks_per_node
from clusterkit.launch.settings import settings_for
from clusterkit.launch.spares import NodePool
from clusterkit.launch.summary import outcome_lines
from clusterkit.lint import Context
from clusterkit.redact import redact_text
from clusterkit.slurm.check import srun_session_of
from clusterkit.slurm.target import SlurmTarget
from clusterkit.stages import Session
from clusterkit.stages.launch_gate import (
    Gate,
    GateOptions,
    node_pool,
    note,
    open_gate,
    record_run,
    slurm_left_out,
    stage_runner,
)
from clusterkit.stages.lists import check_stages
from clusterkit.status import ExitStatus
from clusterkit.words import counted


def run(request: LaunchRequest, env: Environment) -> ExitStatus | int:
    if not request.job.script:
        raise no_job(request.inventory)
    inventory, target = load_targets(request.target, env)
    options = supervise_options(request, env)
    try:
        return launch(request, env, inventory, options, target)
    finally:
        if options.log_dir is not None:
            options.log_dir.close()


def gate_options(request: LaunchRequest, env: Environment) -> GateOptions:
    """What the gate (clusterkit/stages/launch_gate.py) reads of the flags, as plain values."""
    return GateOptions(
        check_plan(request.check, env),
        strict=request.check.strict,
        nnodes=request.nnodes,
        no_check=request.no_check,
        check_report=request.check_report,
        max_age=request.max_age,
        check_output=request.check_output,
        print_only=bool(request.print_only or request.print_dir),
        format=request.report.format,
        view=report_view(request.report),
        slurm_drain=request.slurm_drain,
        trace=request.trace,
    )


def no_job(inventory: str | None) -> UsageError:
    """No words after `--`: where the job goes, and what became of a script given before."""
    if inventory and inventory.endswith(".py"):
        return UsageError(
            f"clusterkit launch: {inventory} was read as the inventory, and no job was given",
            hint=f"the job goes after --: clusterkit launch [INVENTORY] -- {inventory} [ARGS]",
        )
    return UsageError(
        "clusterkit launch: no script to run",
        hint="the job goes after --: clusterkit launch [INVENTORY] -- train.py [ARGS]",
    )


def launch(
    request: LaunchRequest,
    env: Environment,
    inventory: Inventory,
    options: SuperviseOptions,
    target: SlurmTarget | None = None,
) -> int:
    gating = gate_options(request, env)
    gate = open_gate(gating, env, inventory, target)
    try:
        pool = node_pool(gating, env, inventory, gate)
        if pool is None:
            return gate.status if gate.status is not ExitStatus.PASSED else ExitStatus.FAILED
        context = lint_context(request, inventory, gate, pool)
        if not lint_before_launch(request.lint, env, context, partial(note, env)):
            return ExitStatus.FAILED
        run_id = uuid.uuid4().hex[:12]
        if request.print_only or request.print_dir:
            chosen = subset(inventory, pool.active)
            plan = build_plan(settings_for(request.job)(chosen, gate.facts, gate.details, run_id))
            print_plan(plan, request.print_dir, env.stdout)
            return ExitStatus.PASSED
        assert gate.session is not None
        refused = entry_preflight(
            request.entry, inventory, gate.session, pool.active, partial(note, env)
        )
        if refused is not None:
            return refused
        gate.session.progress = NoProgress()  # the job's own lines are the progress now
        attempts = attempts_of(request, gating, env, inventory, gate.session, pool, options, run_id)
        facts, details = gate.facts, gate.details
        if inventory.master.name not in pool.active:
            settled = attempts.settle()
            if settled is None:
                return ExitStatus.FAILED
            facts, details = settled
        note(
            env,
            f"clusterkit: launching run {run_id} on {counted(len(pool.active), 'node')} "
            f"({gate.how})",
        )
        outcome = attempts.run(facts, details)
        if outcome is None:  # the session itself refused: a node is gone since the gate
            return ExitStatus.INCOMPLETE
        if outcome.result == "interrupted":
            raise KeyboardInterrupt  # every node is stopped; the entry point names the signal
        attempts.outcome = outcome
        report_outcome(outcome, options, env)
        record_run(gating, env, gate, attempts)
        return outcome.status
    finally:
        if gate.session is not None:
            gate.session.close()


def attempts_of(
    request: LaunchRequest,
    gating: GateOptions,
    env: Environment,
    inventory: Inventory,
    session: Session,
    pool: NodePool,
    options: SuperviseOptions,
    run_id: str,
) -> Attempts:
    """The launch's attempts over the gate's connections: over srun, stages run in job steps
    and a node left out is drained (or its drain command printed)."""
    srun = srun_session_of(session.transports)
    attempts = Attempts(
        request.recovery,
        inventory,
        session,
        pool,
        options,
        run_id,
        settings_for(request.job),
        partial(note, env),
        check_stages=partial(check_stages, gating.plan),
        run_stages=stage_runner(srun),
    )
    if srun is not None:
        attempts.left_out = slurm_left_out(gating, env, srun)
    return attempts


def lint_context(
    request: LaunchRequest, inventory: Inventory, gate: Gate, pool: NodePool
) -> Context:
    """The cluster the lint judges the script for: the nodes the job starts on, and the
    ranks per node the plan will give them."""
    expected = inventory.settings.expect.gpus_per_node
    nproc = ranks_per_node(request.job.nproc_per_node, expected, gate.facts)
    return Context(nodes=len(pool.active), nproc_per_node=nproc)


def supervise_options(request: LaunchRequest, env: Environment) -> SuperviseOptions:
    log_dir = open_folder("--log-dir", request.log_dir) if request.log_dir else None
    return SuperviseOptions(
        hang_timeout=request.hang_timeout,
        straggler_fault=request.straggler_fault,
        watch=request.hardware_watch,
        stop_grace=request.stop_grace,
        node_timeout=request.node_timeout,
        stacks=request.stacks,
        time_limit=request.time_limit,
        log_dir=log_dir,
        out=env.stdout,
        note=partial(note, env),
    )


def report_outcome(outcome: JobOutcome, options: SuperviseOptions, env: Environment) -> None:
    lines = outcome_lines(outcome)
    text = "\n".join(printable(line) for line in lines)  # node text: one line each, inert
    note(env, text)
    if options.log_dir is not None:
        try:
            options.log_dir.write("outcome.txt", redact_text(text) + "\n")
        except OSError as error:
            note(env, printable(f"clusterkit: --log-dir: outcome.txt not written: {error}"))
