"""`clusterkit check`: connect -> probe -> static -> network -> image -> bench -> report."""

from __future__ import annotations

import argparse
import time

from clusterkit.checks.model import Status
from clusterkit.commands.common import checked_session, load_target
from clusterkit.remedy import command_of
from clusterkit.report import Report, emit
from clusterkit.report.progress import progress
from clusterkit.stages import build_report
from clusterkit.status import ExitStatus


def run(args: argparse.Namespace) -> ExitStatus:
    started = time.monotonic()
    inventory = load_target(args)
    with progress() as bar:
        session = checked_session(args, inventory, bar)
        session.close()
    report = build_report(session, "check", seconds=time.monotonic() - started, strict=args.strict)
    emit(report, args.format, args.output)
    if args.fix_plan:
        print_fix_plan(report)
    return report.exit_status


def print_fix_plan(report: Report) -> None:
    """The provisioning commands that fix the current findings, one per line, deduplicated."""
    commands = dict.fromkeys(
        command
        for f in report.findings
        if (command := command_of(f.remedy))
        and f.status in (Status.FAIL, Status.WARN, Status.ERROR)
    )
    print("\nfix plan:" if commands else "\nfix plan: nothing a playbook can fix")
    for command in commands:
        print(f"  {command}")
