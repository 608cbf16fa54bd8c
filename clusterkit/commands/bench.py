"""`clusterkit bench`: connect -> probe (fabric facts) -> torchrun on every node -> gate
(then each node alone with --per-node, groups in rounds with --find-slow)."""

from __future__ import annotations

import argparse
import time
import types
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from clusterkit.bench.nccltests import write_json
from clusterkit.bench.options import BenchOptions
from clusterkit.checks.model import Status
from clusterkit.commands.common import (
    connect_options,
    load_targets,
    report_view,
    target_request,
)
from clusterkit.environment import Environment
from clusterkit.errors import UsageError
from clusterkit.inventory.model import BenchSettings
from clusterkit.node.bench_worker import DTYPES, parse_collectives, parse_size
from clusterkit.probe import PROBE_SECONDS
from clusterkit.report import Report, emit
from clusterkit.slurm.check import slurm_stages, write_exclude_file
from clusterkit.stages import Session, build_report, run_stages
from clusterkit.stages.bench import BenchStage
from clusterkit.stages.connect import ConnectStage
from clusterkit.stages.probe import ProbeStage
from clusterkit.stages.session import SessionOptions
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline

T = TypeVar("T")


def bench_timeout(args: argparse.Namespace, settings: BenchSettings) -> float:
    """--timeout, else clusterkit.bench.timeout (whose default is the documented one)."""
    return settings.timeout if args.timeout is None else args.timeout


def bench_options(
    args: argparse.Namespace,
    settings: BenchSettings,
    facts: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str] = types.MappingProxyType({}),
) -> BenchOptions:
    """Validate the sweep flags (one-line usage errors) and build the launcher's options:
    flags over the inventory's `clusterkit.bench`, over its defaults. `environ` holds the
    variables the run was started with (none given: none)."""
    _parsed("-b", parse_size, args.minbytes)
    _parsed("-e", parse_size, args.maxbytes)
    gate_size = _parsed("--gate-size", parse_size, args.gate_size or None)
    if args.group_size is not None and args.group_size < 2:
        raise UsageError(f"bench --group-size: at least 2 nodes, not {args.group_size}")
    collectives = _parsed(
        "--collective", lambda text: tuple(parse_collectives(text)), args.collective
    )
    if args.per_node and (args.nproc_per_node or 1) < 2:
        raise UsageError(
            f"bench --per-node: needs --nproc-per-node 2 or more, not {args.nproc_per_node or 1}"
            " (one rank on a node alone has no bus bandwidth)"
        )
    if args.datatype is not None and args.datatype not in DTYPES:
        raise UsageError(f"bench -d: unknown type {args.datatype!r} ({', '.join(sorted(DTYPES))})")
    options = BenchOptions.from_settings(
        settings,
        minbytes=args.minbytes,
        maxbytes=args.maxbytes,
        stepfactor=args.stepfactor,
        iters=args.iters,
        warmup_iters=args.warmup_iters,
        check=args.validate,
        datatype=args.datatype,
        backend=args.backend,
        collectives=collectives,
        nproc_per_node=args.nproc_per_node,
        gate_size=gate_size,
        min_busbw=args.min_busbw,
        join_timeout=args.join_timeout,
        master_port=args.master_port,
        image=args.image,
        find_slow=args.find_slow,
        find_slow_group=args.group_size,
        per_node=args.per_node or None,
        environ=dict(environ),
        facts=facts,
    )
    if parse_size(options.minbytes) > parse_size(options.maxbytes):
        raise UsageError(
            f"clusterkit bench: the smallest size {options.minbytes} (-b) is larger than "
            f"the largest {options.maxbytes} (-e)"
        )
    return replace(options, join_timeout=min(options.join_timeout, bench_timeout(args, settings)))


def _parsed(flag: str, parse: Callable[[str], T], value: str | None) -> T | None:
    """`parse(value)`, its ValueError as a one-line usage error naming the flag; None unset."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as error:
        raise UsageError(f"bench {flag}: {error}") from None


def failed_result(report: Report) -> dict[str, Any]:
    """What -J holds when nothing was measured: no rows, and why (a CI job reading the
    file must not find last run's numbers, nor nothing at all)."""
    cause = next(
        (f for f in report.findings if f.status in (Status.ERROR, Status.FAIL)),
        None,
    )
    error = {"check": cause.id, "message": cause.message, "hosts": cause.hosts} if cause else {}
    return {"results": [], "error": error or {"message": "no result was measured"}}


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    started = time.monotonic()
    inventory, slurm = load_targets(target_request(args), env)
    settings = inventory.settings.bench
    deadline = Deadline.after(bench_timeout(args, settings))
    bench_options(args, settings, {}, env.environ)  # usage errors before any connection
    session = Session(inventory, deadline, SessionOptions(forks=args.forks))
    stages = [
        ConnectStage(connect_options(args, env)),
        ProbeStage(PROBE_SECONDS),
        # No preflight: the stage itself refuses a partial world or a node whose probe
        # failed, and says so.
        BenchStage(
            lambda session: bench_options(args, settings, session.facts, env.environ),
            preflight=False,
        ),
    ]
    try:
        # On Slurm nodes over srun (inside an allocation): each stage in one job step.
        run_stages(session, slurm_stages(slurm, stages, env.environ))
    finally:
        session.close()
    report = build_report(session, "bench", seconds=time.monotonic() - started)
    if args.result_json:
        result = (session.details.get("bench") or {}).get("result")
        write_json(result or failed_result(report), args.result_json)
    emit(report, args.format, args.output, env, **report_view(args))
    if args.exclude_file:
        write_exclude_file(args.exclude_file, report, [host.name for host in inventory.hosts])
    return report.exit_status
