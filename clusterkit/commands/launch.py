"""`clusterkit launch`: check, then run torchrun on every node with exactly what was checked.

inventory -> the check's stages (or a passing report, or nothing with --no-check) -> the
launch plan (clusterkit/launch/plan.py) -> printed (--print) or run and supervised over the
same connections (clusterkit/launch/supervise.py) -> the job's exit status.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, TextIO

from clusterkit.commands.attempts import Attempts, subset
from clusterkit.commands.common import (
    checked_session,
    connect_options,
    load_targets,
    report_view,
    target_request,
)
from clusterkit.commands.lint import lint_before_launch
from clusterkit.commands.preflight import entry_preflight
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.facts import PROBE_VERSION, FactsByHost, HostFacts, MalformedFacts, parse_facts
from clusterkit.inventory.model import Inventory
from clusterkit.launch.incidents import restart_minutes, trace_text
from clusterkit.launch.plan import LaunchSettings, NodeLaunch, PlanNode, build_plan, ranks_per_node
from clusterkit.launch.plan import render_print as render_plan
from clusterkit.launch.spares import NodeCount, NodePool, problems_by_host
from clusterkit.launch.supervise import JobOutcome, SuperviseOptions
from clusterkit.lint import Context
from clusterkit.net.plan import NetworkOptions
from clusterkit.probe import PROBE_SECONDS
from clusterkit.redact import redact_text
from clusterkit.report import Report, emit, write_whole
from clusterkit.report.escape import printable
from clusterkit.report.progress import progress
from clusterkit.safefiles import PrivateFolder, UnsafePathError
from clusterkit.slurm.check import in_steps, slurm_stages, srun_session_of
from clusterkit.slurm.drain import drain_command, drain_left_out
from clusterkit.slurm.target import SlurmTarget
from clusterkit.stages import Session, StageResult, build_report, run_stages
from clusterkit.stages.connect import ConnectStage
from clusterkit.stages.launch import job_finding
from clusterkit.stages.probe import ProbeStage
from clusterkit.stages.runner import record
from clusterkit.stages.session import NoProgress, SessionOptions
from clusterkit.status import ExitStatus
from clusterkit.transport.srun import SrunSession
from clusterkit.words import counted

DEFAULT_RUN_ARGS = ("--shm-size", "16g", "--network", "host", "--ulimit", "memlock=-1:-1")


@dataclass
class Gate:
    """What the launch knows before it starts: facts, stage details, and whether to go."""

    status: ExitStatus
    how: str  # "checked", "report FILE", "not checked"
    facts: dict[str, HostFacts] = field(default_factory=dict)
    details: dict[str, Any] = field(default_factory=dict)
    session: Session | None = None  # open connections, kept for the job
    report: Report | None = None  # a failed check's, shown when the job cannot go ahead


def run(args: argparse.Namespace, env: Environment) -> ExitStatus | int:
    if not args.job:
        raise no_job(args.inventory)
    inventory, target = load_targets(target_request(args), env)
    options = supervise_options(args, env)
    try:
        return launch(args, env, inventory, options, target)
    finally:
        if options.log_dir is not None:
            options.log_dir.close()


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
    args: argparse.Namespace,
    env: Environment,
    inventory: Inventory,
    options: SuperviseOptions,
    target: SlurmTarget | None = None,
) -> int:
    gate = open_gate(args, env, inventory, target)
    try:
        pool = node_pool(args, env, inventory, gate)
        if pool is None:
            return gate.status if gate.status is not ExitStatus.PASSED else ExitStatus.FAILED
        context = lint_context(args, inventory, gate, pool)
        if not lint_before_launch(args, env, context, partial(note, env)):
            return ExitStatus.FAILED
        run_id = uuid.uuid4().hex[:12]
        if args.print or args.print_dir:
            chosen = subset(inventory, pool.active)
            plan = build_plan(settings_for(args)(chosen, gate.facts, gate.details, run_id))
            print_plan(plan, args.print_dir, env.stdout)
            return ExitStatus.PASSED
        assert gate.session is not None
        refused = entry_preflight(args, inventory, gate.session, pool.active, partial(note, env))
        if refused is not None:
            return refused
        gate.session.progress = NoProgress()  # the job's own lines are the progress now
        attempts = Attempts(
            args,
            env,
            inventory,
            gate.session,
            pool,
            options,
            run_id,
            settings_for(args),
            partial(note, env),
        )
        if (srun := srun_session_of(gate.session.transports)) is not None:
            attempts.steps = lambda stages: in_steps(srun, stages)
            attempts.left_out = slurm_left_out(args, env, srun)
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
        record_run(args, env, gate, attempts)
        return outcome.status
    finally:
        if gate.session is not None:
            gate.session.close()


def node_pool(
    args: argparse.Namespace, env: Environment, inventory: Inventory, gate: Gate
) -> NodePool | None:
    """The hosts the job starts on (master first) and the spares; None when the job cannot
    start. Without --nnodes every host runs and every one must pass; with it, hosts that
    fail the check are left out, named, as long as enough healthy ones remain."""
    names = [inventory.master.name, *[h.name for h in inventory.hosts if h is not inventory.master]]
    count = args.nnodes or NodeCount(len(names), len(names))
    if count.least > len(names):
        raise UsageError(
            f"--nnodes {count}: the inventory has {counted(len(names), 'host')}",
            hint="give at most as many nodes as there are hosts (the rest are spares)",
        )
    pool = NodePool(count, tuple(names))
    if gate.status is not ExitStatus.PASSED and not leave_out_failing(args, env, gate, pool):
        return None
    pool.fill(first=True)
    if not pool.enough:
        show_gate_report(args, env, gate)
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


def leave_out_failing(
    args: argparse.Namespace, env: Environment, gate: Gate, pool: NodePool
) -> bool:
    """With --nnodes, the hosts that failed the check leave the pool, each named with why;
    False (nothing starts) without --nnodes, or when the check failed for every node."""
    if args.nnodes is None or gate.session is None:
        show_gate_report(args, env, gate)
        note(env, f"clusterkit: the check did not pass: nothing was started (exit {gate.status})")
        return False
    names = list(pool.order)
    problems, whole = problems_by_host(gate.session.findings, names, strict=args.strict)
    for host, error in gate.session.unreachable.items():
        problems.setdefault(host, [f"unreachable: {error.detail}"])
    if whole:
        show_gate_report(args, env, gate)
        note(env, f"clusterkit: the check failed for every node ({whole[0]}): nothing was started")
        return False
    for host in pool.exclude(problems):
        note(env, printable(f"clusterkit: {host} failed the check, left out: {problems[host][0]}"))
    return True


def show_gate_report(args: argparse.Namespace, env: Environment, gate: Gate) -> None:
    """The failed check's report, when --nnodes held it back and the job does not start."""
    if args.nnodes is not None and gate.report is not None and not args.check_output:
        emit(gate.report, args.format, None, env, **report_view(args))


def slurm_left_out(
    args: argparse.Namespace, env: Environment, srun: SrunSession
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
        if args.slurm_drain:
            problem = drain_left_out(host, why, env.environ)
            if problem is None:
                note(env, printable(f"clusterkit: {host} drained"))
                return
            note(env, printable(f"clusterkit: {host} not drained: {problem}"))
        note(env, printable(f"clusterkit: for an admin, to drain it: {drain_command(host, why)}"))

    return left_out


def record_run(args: argparse.Namespace, env: Environment, gate: Gate, attempts: Attempts) -> None:
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
    if args.trace:
        hours = (time.monotonic() - attempts.started) / 3600
        text = trace_text(attempts.incidents, len(attempts.pool.active), hours)
        try:
            write_whole(args.trace, text.encode())
        except OSError as error:
            note(env, printable(f"clusterkit: --trace {args.trace}: not written: {error}"))
    if args.check_output and gate.session is not None:
        gate.session.details["launch"] = attempts.details()
        if attempts.outcome is not None:  # the report's verdict is the launch's, not the gate's
            record(gate.session, "launch", StageResult([job_finding(attempts.outcome)]))
            gate.session.stages["launch"] = "ran"
        report = build_report(gate.session, "launch", seconds=0.0, strict=args.strict)
        emit(report, args.format, args.check_output, env, **report_view(args))


def lint_context(
    args: argparse.Namespace, inventory: Inventory, gate: Gate, pool: NodePool
) -> Context:
    """The cluster the lint judges the script for: the nodes the job starts on, and the
    ranks per node the plan will give them."""
    expected = inventory.settings.expect.gpus_per_node
    nproc = ranks_per_node(args.nproc_per_node, expected, gate.facts)
    return Context(nodes=len(pool.active), nproc_per_node=nproc)


def note(env: Environment, text: str) -> None:
    """clusterkit's own line on stderr; it may quote the job (last lines): secrets redacted."""
    print(redact_text(text), file=env.stderr, flush=True)


def supervise_options(args: argparse.Namespace, env: Environment) -> SuperviseOptions:
    log_dir = open_folder("--log-dir", args.log_dir) if args.log_dir else None
    return SuperviseOptions(
        hang_timeout=args.hang_timeout,
        straggler_fault=args.straggler_fault,
        watch=not args.no_hardware_watch,
        stop_grace=args.stop_grace,
        node_timeout=args.node_timeout,
        stacks=args.stacks,
        time_limit=args.time_limit,
        log_dir=log_dir,
        out=env.stdout,
        note=partial(note, env),
    )


# --- the gate -----------------------------------------------------------------------------


def open_gate(
    args: argparse.Namespace,
    env: Environment,
    inventory: Inventory,
    target: SlurmTarget | None = None,
) -> Gate:
    if args.check_report:
        return report_gate(args, env, inventory, target)
    if args.no_check:
        if args.print or args.print_dir:
            note(
                env,
                "clusterkit: --no-check: planned WITHOUT checking the cluster: ranks per node "
                "from --nproc-per-node, else expect.gpus_per_node; addresses as the inventory "
                "writes them",
            )
            return Gate(ExitStatus.PASSED, "not checked")
        note(env, "clusterkit: --no-check: launching WITHOUT checking the cluster")
        return connect_gate(args, env, inventory, "not checked", target)
    return check_gate(args, env, inventory, target)


def check_gate(
    args: argparse.Namespace, env: Environment, inventory: Inventory, target: SlurmTarget | None
) -> Gate:
    """The whole check, as `clusterkit check` runs it; connections stay open for the job."""
    started = time.monotonic()
    with progress(env) as bar:
        session = checked_session(args, env, inventory, bar, target)
    report = build_report(session, "launch", seconds=time.monotonic() - started, strict=args.strict)
    status = report.exit_status
    # With --nnodes a failed check may still go ahead without the failing hosts: node_pool
    # shows the report only when it does not.
    if (status is not ExitStatus.PASSED and args.nnodes is None) or args.check_output:
        emit(report, args.format, args.check_output, env, **report_view(args))
    if status is ExitStatus.PASSED and not session.unreachable:
        note(env, f"clusterkit: check passed in {report.seconds:.1f} s")
    return Gate(status, "checked", session.facts, session.details, session, report)


def connect_gate(
    args: argparse.Namespace,
    env: Environment,
    inventory: Inventory,
    how: str,
    target: SlurmTarget | None,
) -> Gate:
    """Connections (every host, or nothing starts) and the probe's facts, no verdict."""
    session = Session(inventory, None, SessionOptions(forks=args.forks))
    try:
        stages = [ConnectStage(connect_options(args, env)), ProbeStage(PROBE_SECONDS)]
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
    args: argparse.Namespace, env: Environment, inventory: Inventory, target: SlurmTarget | None
) -> Gate:
    """A passing JSON report of `check` (or `launch`), young enough, naming these hosts."""
    path = Path(args.check_report)
    try:
        report = json.loads(path.read_text())
        age = time.time() - path.stat().st_mtime
    except OSError as error:
        raise UsageError(f"--check-report {path}: {error.strerror}") from None
    except ValueError as error:
        raise UsageError(f"--check-report {path}: not a JSON report ({error})") from None
    problem = report_problem(report, age, args.max_age, [h.name for h in inventory.hosts])
    if problem:
        note(env, f"clusterkit: --check-report {path}: {problem}: nothing was started")
        return Gate(ExitStatus.USAGE, f"report {path}")
    note(env, f"clusterkit: reusing the check report {path} ({age:.0f} s old)")
    facts = {name: report_facts(entry) for name, entry in report["hosts"].items()}
    details = dict(report.get("details") or {})
    if args.print or args.print_dir:
        return Gate(ExitStatus.PASSED, f"report {path}", facts, details)
    gate = connect_gate(args, env, inventory, f"report {path}", target)
    gate.facts, gate.details = facts, details
    return gate


def report_problem(report: Any, age: float, max_age: float, hosts: list[str]) -> str | None:
    """Why a saved report cannot stand in for a check now, or None."""
    if not isinstance(report, dict) or not isinstance(report.get("hosts"), dict):
        return "not a clusterkit JSON report"
    if report.get("verdict") != "pass":
        return f"its verdict is {report.get('verdict')!r}, not pass"
    if problem := launch_problem(report.get("details")):
        return problem
    if age > max_age:
        return f"it is {age:.0f} s old, more than --max-age {max_age:g}"
    named = sorted(report["hosts"])
    if named != sorted(hosts):
        return f"it names hosts {', '.join(named)}, the inventory {', '.join(sorted(hosts))}"
    if (version := report.get("probe_version")) != PROBE_VERSION:
        return f"its facts are of probe version {version!r}, this clusterkit reads {PROBE_VERSION}"
    for name, entry in report["hosts"].items():
        try:
            report_facts(entry)
        except MalformedFacts as error:
            return f"host {name}: {error}"
    return None


def launch_problem(details: object) -> str | None:
    """A launch's report is a gate only for a launch that succeeded on every node it
    started with: one that failed, or left a node out, vouches for nobody."""
    launch = details.get("launch") if isinstance(details, dict) else None
    if launch is None:
        return None
    if not isinstance(launch, dict) or launch.get("result") != "succeeded":
        result = launch.get("result") if isinstance(launch, dict) else launch
        return f"it records a launch that did not succeed ({str(result)[:40]!r})"
    if excluded := launch.get("excluded"):
        names = ", ".join(str(host)[:64] for host in excluded)[:300]
        return f"it records a launch that left nodes out ({names})"
    return None


def report_facts(entry: object) -> HostFacts:
    """A saved host entry's facts, of the shape the checks read (MalformedFacts if not)."""
    facts = entry.get("facts") if isinstance(entry, dict) else None
    return HostFacts() if facts is None else parse_facts(facts)


# --- the plan -----------------------------------------------------------------------------


def settings_for(
    args: argparse.Namespace,
) -> Callable[[Inventory, FactsByHost, Mapping[str, Any], str], LaunchSettings]:
    """How each attempt's plan is made from its node set's facts: the flags are fixed."""

    def make(
        inventory: Inventory, facts: FactsByHost, details: Mapping[str, Any], run_id: str
    ) -> LaunchSettings:
        return launch_settings(args, inventory, facts, details, run_id)

    return make


def launch_settings(
    args: argparse.Namespace,
    inventory: Inventory,
    all_facts: FactsByHost,
    details: Mapping[str, Any],
    run_id: str,
) -> LaunchSettings:
    settings = inventory.settings
    master = inventory.master
    ordered = [master, *[h for h in inventory.hosts if h is not master]]
    facts = {h.name: all_facts[h.name] for h in ordered if all_facts.get(h.name)}
    torch_versions = {str((f.get("torch") or {}).get("version")) for f in facts.values()}
    torch_versions.discard("None")
    image = settings.image
    return LaunchSettings(
        nodes=tuple(PlanNode(h.name, h.python_interpreter or "python3") for h in ordered),
        master_addr=master_address(inventory, details),
        master_port=settings.master_port,
        nproc_per_node=ranks_per_node(args.nproc_per_node, settings.expect.gpus_per_node, facts),
        script=tuple(args.job),
        interface=settings.interface,
        join_timeout=int(args.join_timeout),
        torch_version=min(torch_versions) if len(torch_versions) == 1 else None,
        image=image,
        image_run_args=image_run_args(settings.image_run_args, details) if image else (),
        gpus=uses_gpus(settings.expect.gpus_per_node, facts),
        workdir=args.workdir,
        run_id=run_id,
        checked=not args.no_check,
    )


def uses_gpus(expected_gpus: int | None, facts: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether the container gets `--gpus all`: any node has GPUs, or, with no facts
    (nothing checked), the inventory expects them."""
    if not facts:
        return bool(expected_gpus)
    return any(int((f.get("gpus") or {}).get("count") or 0) > 0 for f in facts.values())


def master_address(inventory: Inventory, details: Mapping[str, Any]) -> str:
    """The master's address as every node resolved it in the network stage (when they all
    agree), else `clusterkit.master` as written: what the check validated."""
    name = NetworkOptions.from_inventory(inventory).master_name
    nodes = (details.get("network") or {}).get("nodes") or {}
    firsts = {
        tuple(entry.get("master_addresses") or [])[:1]
        for entry in nodes.values()
        if isinstance(entry, dict) and entry.get("ran")
    }
    if len(firsts) == 1 and (only := next(iter(firsts))):
        return str(only[0])
    return name


def image_run_args(
    configured: tuple[str, ...] | None, details: Mapping[str, Any]
) -> tuple[str, ...]:
    """clusterkit.image_run_args, else the image's own run flags as the image stage read
    them from its label, else the flags images built by clusterkit carry by default."""
    if configured is not None:
        return configured
    for entry in (details.get("image") or {}).values():
        if isinstance(entry, dict) and isinstance(entry.get("run_args"), list):
            return tuple(str(arg) for arg in entry["run_args"] if arg != "--gpus")
    return DEFAULT_RUN_ARGS


def open_folder(flag: str, directory: str) -> PrivateFolder:
    """The folder of --log-dir or --print-dir, made private when new; refused when another
    user could plant or swap what clusterkit writes there."""
    try:
        return PrivateFolder.open(directory)
    except OSError as error:
        raise UsageError(folder_error(flag, directory, error)) from None


def folder_error(flag: str, directory: str, error: OSError) -> str:
    detail = str(error) if isinstance(error, UnsafePathError) else error.strerror or str(error)
    return printable(f"{flag} {directory}: {detail}")


def print_plan(plan: list[NodeLaunch], directory: str | None, stdout: TextIO) -> None:
    if directory:
        with open_folder("--print-dir", directory) as folder:
            try:
                for node in plan:  # host names are checked file names (inventory loading)
                    env_name = f"{node.host}.env"
                    folder.write(env_name, node.env_file(), 0o600)
                    script = node.script(str(folder.child(env_name)))
                    folder.write(f"{node.host}.sh", script, 0o700)
            except OSError as error:
                raise UsageError(folder_error("--print-dir", directory, error)) from None
    stdout.write(render_plan(plan, directory or "."))


# --- the job ------------------------------------------------------------------------------


def report_outcome(outcome: JobOutcome, options: SuperviseOptions, env: Environment) -> None:
    lines = [f"clusterkit: job {outcome.result} after {outcome.seconds:.1f} s: {outcome.message}"]
    first = outcome.first_failure
    if first is not None and first.last_lines:
        lines.append(f"clusterkit: last lines of {first.who}:")
        lines += [f"  {line}" for line in first.last_lines[-10:]]
    if (remedy := outcome.remedy) is not None:
        lines.append(f"clusterkit: remedy: {remedy.line()}")
    if outcome.hang is not None:
        hang = outcome.hang
        for odd in hang.odd_ones_out:
            lines.append(f"clusterkit: odd one out: {odd}")
        if hang.missing:
            lines.append(f"clusterkit: no stacks from {', '.join(hang.missing)}")
        if outcome.evidence is not None:
            lines.append(f"clusterkit: stack dumps in {outcome.evidence}/stacks-HOST-RANK.txt")
        for dropped in hang.malformed:
            lines.append(f"clusterkit: malformed stack dump from {dropped}")
    if outcome.evidence is not None and first is not None:
        lines.append(f"clusterkit: this attempt's rank logs in {outcome.evidence}")
    lines.append(f"clusterkit: exit status {outcome.status}")
    text = "\n".join(printable(line) for line in lines)  # node text: one line each, inert
    note(env, text)
    if options.log_dir is not None:
        try:
            options.log_dir.write("outcome.txt", redact_text(text) + "\n")
        except OSError as error:
            note(env, printable(f"clusterkit: --log-dir: outcome.txt not written: {error}"))
