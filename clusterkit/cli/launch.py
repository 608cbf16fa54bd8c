"""`clusterkit launch`: its arguments (the gate, the job, resilience, supervision), the typed
request they become, and the typed requests of the script's lint and pre-flight."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.options import (
    FORMATS,
    add_bench_gate_options,
    add_check_run_options,
    add_connection_options,
    add_inventory_arguments,
    add_nproc_per_node,
    add_only_problems,
    add_seconds,
    add_slurm_options,
)
from clusterkit.cli.parser import (
    Parser,
    count_or_zero,
    node_count,
    positive_float,
)
from clusterkit.cli.requests import (
    CheckRun,
    ReportRequest,
    TargetRequest,
    check_run,
    report,
    target,
)
from clusterkit.launch.attempts import RecoveryOptions
from clusterkit.launch.job import NODE_TIMEOUT
from clusterkit.launch.recovery import RestartBudget
from clusterkit.launch.settings import JobFlags
from clusterkit.launch.spares import NodeCount


@dataclass(frozen=True)
class LaunchLint:
    """What `launch` lints before the job starts: the job's words, --lint and --strict."""

    job: tuple[str, ...]  # the words after --: the entry script first
    mode: str = "warn"  # --lint: warn, strict or off
    strict: bool = False


@dataclass(frozen=True)
class EntryCheck:
    """What the entry script's pre-flight reads: the job's words, --workdir and --forks."""

    job: tuple[str, ...]
    workdir: str | None = None
    forks: int | None = None


def launch_lint(args: argparse.Namespace) -> LaunchLint:
    return LaunchLint(job=tuple(args.job), mode=args.lint, strict=args.strict)


def entry_check(args: argparse.Namespace) -> EntryCheck:
    return EntryCheck(job=tuple(args.job), workdir=args.workdir, forks=args.forks)


@dataclass(frozen=True)
class LaunchRequest:
    """The launch's command line, read once: typed, so a renamed flag is a type error."""

    job: JobFlags
    target: TargetRequest
    check: CheckRun  # the gate's check, and the re-check of a new node set
    report: ReportRequest
    recovery: RecoveryOptions
    lint: LaunchLint
    entry: EntryCheck
    inventory: str | None = None  # the positional inventory, as given
    nnodes: NodeCount | None = None  # None: every host runs, and every one must pass
    no_check: bool = False
    check_report: str | None = None  # a saved passing report instead of the check
    max_age: float = 3600.0
    check_output: str | None = None  # the JSON report of the gate and the launch
    print_only: bool = False  # --print: the plan, nothing run
    print_dir: str | None = None
    trace: str | None = None
    slurm_drain: bool = False
    log_dir: str | None = None
    hang_timeout: float | None = None
    straggler_fault: bool = False
    hardware_watch: bool = True
    stop_grace: float = 5.0
    node_timeout: float = NODE_TIMEOUT
    stacks: str = "auto"
    time_limit: float | None = None


def request(args: argparse.Namespace) -> LaunchRequest:
    """The launch's flags, each read once (the shared groups by clusterkit.cli.requests)."""
    check = check_run(args)
    return LaunchRequest(
        job=JobFlags(
            tuple(args.job), args.nproc_per_node, args.join_timeout, args.workdir, not args.no_check
        ),
        target=target(args),
        check=check,
        report=report(args),
        recovery=RecoveryOptions(
            budget=RestartBudget(node=args.max_restarts, job=args.max_restarts_on_errors),
            strict=check.strict,
            forks=check.connection.forks,
            skip=check.skip,
            recheck=args.recheck,
        ),
        lint=launch_lint(args),
        entry=entry_check(args),
        inventory=args.inventory,
        nnodes=args.nnodes,
        no_check=args.no_check,
        check_report=args.check_report,
        max_age=args.max_age,
        check_output=args.check_output,
        print_only=args.print,
        print_dir=args.print_dir,
        trace=args.trace,
        slurm_drain=args.slurm_drain,
        log_dir=args.log_dir,
        hang_timeout=args.hang_timeout,
        straggler_fault=args.straggler_fault,
        hardware_watch=not args.no_hardware_watch,
        stop_grace=args.stop_grace,
        node_timeout=args.node_timeout,
        stacks=args.stacks,
        time_limit=args.time_limit,
    )


HANG_TIMEOUT = 1800.0  # torch's default process-group timeout for gloo: a job stuck longer dies


def hang_seconds(text: str) -> float | None:
    """--hang-timeout: positive SECONDS, or 0 for off."""
    if text.strip() in ("0", "0.0", "off"):
        return None
    return positive_float(text)


def add(sub: argparse._SubParsersAction[Parser]) -> None:
    parser = sub.add_parser(
        "launch",
        help="check, then run torchrun on every node with the checked settings",
        description="Run the check and, only when it passes, start the job after `--` with "
        "torchrun on every node (static rendezvous, the checked master, port and interface), "
        "stream every rank's output as host/rank, stop everything on the first failure, a hang "
        "or Ctrl-C. Exit status: the job's (0 every rank succeeded; a failed rank's own status, "
        "128+N for a signal), 124 hung, 3 a node was lost, 130/143 Ctrl-C/SIGTERM; the check's "
        "status when it did not pass. Example: clusterkit launch inv.yaml -- train.py --epochs 3",
    )
    add_inventory_arguments(parser, "(default: this machine)")
    _add_launch_gate(parser)
    _add_launch_job(parser)
    _add_resilience(parser)
    _add_supervision(parser)
    add_bench_gate_options(parser)
    add_slurm_options(parser, exclude_file=False)
    add_connection_options(parser)
    parser.set_defaults(handler="clusterkit.commands.launch:run", output=None, fix_plan=False)


def _add_launch_gate(parser: argparse.ArgumentParser) -> None:
    """The check before the job: `check`'s own options, or a saved report of it."""
    gate = parser.add_argument_group("gate")
    add_check_run_options(gate, strict_help="warnings refuse the launch too")
    gate.add_argument("--no-check", action="store_true", help="launch without checking (loudly)")
    gate.add_argument(
        "--lint",
        choices=("warn", "strict", "off"),
        default="warn",
        help="lint the job's script first (clusterkit lint, docs/lint.md): print the findings "
        "and go ahead (warn, the default), refuse a failing lint (strict; with --strict, a "
        "warning too), or skip it (off)",
    )
    gate.add_argument(
        "--check-report",
        metavar="FILE",
        help="reuse this passing JSON report of `check` instead of checking again",
    )
    add_seconds(
        gate,
        "--max-age",
        "--check-report must be younger than this (default: 3600)",
        default=3600.0,
    )
    gate.add_argument(
        "--check-output",
        metavar="FILE",
        help="write the check's report to FILE (--format picks json, junit or html)",
    )
    gate.add_argument(
        "--format", choices=(*FORMATS, "html"), default="text", help="the check report format"
    )
    add_only_problems(gate, short=True)


def _add_launch_job(parser: argparse.ArgumentParser) -> None:
    job = parser.add_argument_group("job")
    add_nproc_per_node(job, "the GPUs per node when torch can use them, else 1")
    add_seconds(
        job,
        "--join-timeout",
        "how long nodes wait for each other at the rendezvous (default: 300)",
        default=300.0,
    )
    job.add_argument("--workdir", metavar="DIR", help="run the job from DIR on every node")
    job.add_argument(
        "--print",
        action="store_true",
        help="print each node's env file and command instead of running them",
    )
    job.add_argument(
        "--print-dir", metavar="DIR", help="like --print, and write HOST.env and HOST.sh to DIR"
    )


def _add_supervision(parser: argparse.ArgumentParser) -> None:
    """How `launch` watches the running job: logs, hangs, stops and time limits."""
    watch = parser.add_argument_group("supervision")
    watch.add_argument(
        "--log-dir", metavar="DIR", help="rank logs and stack dumps, DIR/attempt-N/ per attempt"
    )
    watch.add_argument(
        "--hang-timeout",
        type=hang_seconds,
        default=HANG_TIMEOUT,
        metavar="SECONDS",
        help="no rank advanced for this long (no collective completed on any rank, no rank "
        "computing outside one; what the ranks print does not count): dump every rank's "
        f"stack and flight record and stop; 0 turns it off (default: {HANG_TIMEOUT:g}, "
        "torch's own gloo timeout)",
    )
    watch.add_argument(
        "--straggler-fault",
        action="store_true",
        help="a node named as a straggler during the run stops the job as a node fault (with "
        "spares, the job moves off it); without it the straggler is only named",
    )
    watch.add_argument(
        "--no-hardware-watch",
        action="store_true",
        help="do not re-read each node's kernel log (new Xids, OOM kills), RDMA ports and "
        "nvidia-smi while the job runs (by default a fault `check` fails a node for stops the "
        "job at once as a node fault)",
    )
    watch.add_argument(
        "--stacks",
        choices=("auto", "py-spy", "faulthandler"),
        default="auto",
        help="how a hang reads the ranks' stacks: py-spy on the node when it is there, else "
        "faulthandler (a SIGUSR1 handler installed in every rank) (default: auto)",
    )
    add_seconds(
        watch,
        "--stop-grace",
        "after SIGTERM, ranks get this long before SIGKILL (default: 5)",
        default=5.0,
    )
    add_seconds(
        watch,
        "--node-timeout",
        "a node silent this long (it speaks at least once a second) is lost (default: 10)",
        default=10.0,
    )
    add_seconds(watch, "--time-limit", "stop the job after this long (default: none)")


def _add_resilience(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("resilience (docs/launch.md)")
    group.add_argument(
        "--nnodes",
        type=node_count,
        default=None,
        metavar="N|MIN:MAX",
        help="run on N of the hosts (MAX when that many are healthy, down to MIN); the others "
        "are spares, and hosts that fail the check are left out (default: every host, all "
        "must pass)",
    )
    group.add_argument(
        "--max-restarts",
        type=count_or_zero,
        default=0,
        metavar="K",
        help="after a node fault (a lost node, a kernel-killed rank, failing hardware): leave "
        "the node out, take a spare, re-check, run the job again; at most K times (default: 0)",
    )
    group.add_argument(
        "--max-restarts-on-errors",
        type=count_or_zero,
        default=0,
        metavar="M",
        help="run the job again after a fault of its own (an exception) at most M times "
        "(default: 0: a bug is not retried)",
    )
    group.add_argument(
        "--recheck",
        choices=("fast", "bench"),
        default="fast",
        help="what a new node set passes before a restart: probe, static and network checks "
        "(fast), and the bandwidth test too (bench) (default: fast)",
    )
    group.add_argument(
        "--trace",
        metavar="FILE",
        help="write the node faults as a trace for `clusterkit cost --trace` (with the "
        "measured restart time)",
    )
