"""`clusterkit check`: connect -> probe -> static -> network -> image -> bench -> report."""

from __future__ import annotations

import argparse
import time
from typing import TextIO

from clusterkit.checks.model import NEEDS_FIX
from clusterkit.commands.common import checked_session, load_targets, target_request
from clusterkit.environment import Environment
from clusterkit.report import Report, emit
from clusterkit.report.progress import progress
from clusterkit.slurm.check import write_exclude_file
from clusterkit.stages import build_report
from clusterkit.status import ExitStatus


def run(args: argparse.Namespace, env: Environment) -> ExitStatus:
    started = time.monotonic()
    hosts = target_request(args)
    inventory, slurm = load_targets(hosts, env)
    with progress(env) as bar:
        session = checked_session(args, env, inventory, bar, slurm, machine=hosts.machine_only)
        session.close()
    report = build_report(session, "check", seconds=time.monotonic() - started, strict=args.strict)
    plan = fix_plan(report) if args.fix_plan else None
    report.fix_plan = plan
    emit(report, args.format, args.output, env, only_problems=args.only_problems)
    if plan is not None and args.format != "json":
        # Text: after the report. JUnit on stdout is a document: the plan goes to stderr.
        to_stderr = args.format == "junit" and not args.output
        print_fix_plan(plan, env.stderr if to_stderr else env.stdout)
    if args.exclude_file:
        write_exclude_file(args.exclude_file, report, [host.name for host in inventory.hosts])
    return report.exit_status


def fix_plan(report: Report) -> list[str]:
    """The provisioning commands that fix the current findings, deduplicated, in order."""
    return list(
        dict.fromkeys(
            command
            for f in report.findings
            if f.fix and f.status in NEEDS_FIX and (command := f.fix.command(report.inventory))
        )
    )


def print_fix_plan(commands: list[str], stream: TextIO) -> None:
    print("\nfix plan:" if commands else "\nfix plan: nothing a playbook can fix", file=stream)
    for command in commands:
        print(f"  {command}", file=stream)
