"""`clusterkit bench`: connect -> probe (fabric facts) -> torchrun on every node -> gate."""

from __future__ import annotations

import argparse
import os
import time
from dataclasses import replace

from clusterkit.bench.launcher import BenchOptions, BenchOutcome, launch_bench
from clusterkit.bench.nccltests import write_json
from clusterkit.bench.worker import DTYPES, parse_size
from clusterkit.checks.model import Finding, Status
from clusterkit.commands.check import (
    connect_options,
    connection_findings,
    host_entries,
    load_target,
)
from clusterkit.errors import UsageError
from clusterkit.inventory.model import BenchSettings
from clusterkit.probe.runner import probe_all
from clusterkit.report import Report, emit
from clusterkit.status import ExitStatus
from clusterkit.transport.base import Deadline
from clusterkit.transport.connect import connect_all

PROBE_SECONDS = 30.0


def bench_timeout(args: argparse.Namespace, settings: BenchSettings) -> float:
    """--timeout, else clusterkit.bench.timeout (whose default is the documented one)."""
    return settings.timeout if args.timeout is None else args.timeout


def bench_options(args: argparse.Namespace, settings: BenchSettings, facts: dict) -> BenchOptions:
    """Validate the sweep flags (one-line usage errors) and build the launcher's options:
    flags over the inventory's `clusterkit.bench`, over its defaults."""
    for flag, value in (("-b", args.minbytes), ("-e", args.maxbytes)):
        try:
            if value is not None:
                parse_size(value)
        except ValueError as error:
            raise UsageError(f"bench {flag}: {error}") from None
    gate_size = None
    if args.gate_size:
        try:
            gate_size = parse_size(args.gate_size)
        except ValueError as error:
            raise UsageError(f"bench --gate-size: {error}") from None
    if args.datatype is not None and args.datatype not in DTYPES:
        raise UsageError(f"bench -d: unknown type {args.datatype!r} ({', '.join(sorted(DTYPES))})")
    options = BenchOptions.from_settings(
        settings,
        minbytes=args.minbytes,
        maxbytes=args.maxbytes,
        stepfactor=args.stepfactor,
        iters=args.iters,
        warmup_iters=args.warmup_iters,
        check=args.check,
        datatype=args.datatype,
        backend=args.backend,
        nproc_per_node=args.nproc_per_node,
        gate_size=gate_size,
        min_busbw=args.min_busbw,
        join_timeout=args.join_timeout,
        master_port=args.master_port,
        image=args.image,
        environ=dict(os.environ),
        facts=facts,
    )
    if parse_size(options.minbytes) > parse_size(options.maxbytes):
        raise UsageError(
            f"clusterkit bench: the smallest size {options.minbytes} (-b) is larger than "
            f"the largest {options.maxbytes} (-e)"
        )
    return replace(options, join_timeout=min(options.join_timeout, bench_timeout(args, settings)))


def bench_details(outcome: BenchOutcome) -> dict:
    """The bench section of the JSON report: the result, and what each node printed."""
    return {
        "run_id": outcome.run_id,
        "seconds": round(outcome.duration, 3),
        "result": outcome.result,
        "nodes": [
            {
                "host": node.host,
                "node_rank": node.node_rank,
                "exit_code": node.result.exit_code if node.result else None,
                "timed_out": bool(node.result and node.result.timed_out),
                "killed_by_clusterkit": node.killed,
                "transport_error": node.error.detail if node.error else None,
                "stdout_tail": node.stdout[-4000:],
                "stderr_tail": node.stderr[-8000:],
            }
            for node in outcome.nodes
        ],
    }


def not_run_after_probe(hosts: list[str]) -> BenchOutcome:
    """A node whose probe hung or failed would stall the bench as well, and the ranks left
    waiting for it would be blamed: the bench is not started, and the node is named."""
    finding = Finding(
        "bench.not-joined",
        Status.SKIP,
        f"not run: the probe did not complete on {', '.join(hosts)}; those nodes would stall "
        "the rendezvous",
        hosts=hosts,
        stage="bench",
    )
    return BenchOutcome([finding], None, "", [], "", 0.0)


def run(args: argparse.Namespace) -> ExitStatus:
    started = time.monotonic()
    inventory = load_target(args)
    settings = inventory.settings.bench
    deadline = Deadline.after(bench_timeout(args, settings))
    bench_options(args, settings, {})  # usage errors before any connection
    findings: list[Finding] = []
    connections = connect_all(inventory, connect_options(args))
    outcome: BenchOutcome | None = None
    try:
        findings += connection_findings(inventory, connections)
        probed = probe_all(
            connections.transports,
            inventory,
            Deadline.after(min(PROBE_SECONDS, deadline.remaining())),
            workers=args.forks,
        )
        findings += [
            Finding("probe.ran", Status.ERROR, f"{host}: {why}", hosts=[host], stage="probe")
            for host, why in probed.failures.items()
        ]
        options = bench_options(args, settings, probed.facts)
        if probed.failures:
            outcome = not_run_after_probe(list(probed.failures))
        else:
            outcome = launch_bench(connections.transports, inventory, options, deadline)
        findings += outcome.findings
    finally:
        connections.close()
    if outcome.interrupted:
        raise KeyboardInterrupt
    if args.result_json and outcome.result:
        write_json(outcome.result, args.result_json)
    report = Report(
        command="bench",
        inventory=inventory.path,
        findings=findings,
        hosts=host_entries(inventory, connections, probed.facts, probed.failures),
        stages={"bench": "ran" if outcome.nodes else "not run"},
        details={"bench": bench_details(outcome)},
        text_blocks={"bench": outcome.table.splitlines()} if outcome.table else {},
        seconds=time.monotonic() - started,
    )
    emit(report, args.format, args.output)
    return report.exit_status
