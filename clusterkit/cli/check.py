"""`clusterkit check`: its arguments, and the typed request they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.options import (
    add_bench_gate_options,
    add_check_run_options,
    add_connection_options,
    add_inventory_arguments,
    add_python_option,
    add_report_options,
    add_slurm_options,
)
from clusterkit.cli.parser import Parser
from clusterkit.cli.requests import (
    CheckRun,
    ReportRequest,
    TargetRequest,
    check_run,
    report,
    target,
)


@dataclass(frozen=True)
class CheckRequest:
    """`clusterkit check`, as its flags ask for it."""

    target: TargetRequest
    run: CheckRun
    report: ReportRequest
    fix_plan: bool = False
    baseline: str | None = None  # --baseline FILE: compared with
    save_baseline: str | None = None  # --save-baseline FILE: written on a pass
    exclude_file: str | None = None  # --exclude-file FILE: the failing nodes, on failure


def request(args: argparse.Namespace) -> CheckRequest:
    return CheckRequest(
        target=target(args, python=args.python),
        run=check_run(args, dcgm_level=args.dcgm_level),
        report=report(args),
        fix_plan=args.fix_plan,
        baseline=args.baseline,
        save_baseline=args.save_baseline,
        exclude_file=args.exclude_file,
    )


def add(sub: argparse._SubParsersAction[Parser]) -> None:
    parser = sub.add_parser(
        "check",
        help="decide whether a multi-node torchrun job can go ahead",
        description="Probe every node of an Ansible inventory and check parity, health, "
        "network paths and all-reduce bandwidth. Without an inventory, checks this machine.",
    )
    add_inventory_arguments(parser, "(default: this machine)")
    add_check_run_options(parser, strict_help="warnings fail the verdict too")
    parser.add_argument(
        "--fix-plan",
        action="store_true",
        help="print the provisioning commands that fix the current findings",
    )
    parser.add_argument(
        "--dcgm-level",
        type=int,
        choices=(0, 1, 2, 3),
        default=None,
        metavar="{1,2,3}",
        help="also run NVIDIA DCGM's `dcgmi diag -r N` on every node (1 quick, 2 medium, "
        "3 long; 0 off; default: clusterkit.dcgm_level, else off; docs/checks.md)",
    )
    add_bench_gate_options(parser)
    add_python_option(parser, "ansible_python_interpreter")
    add_slurm_options(parser)
    add_connection_options(parser)
    add_report_options(parser)
    _add_baseline_options(parser)
    parser.set_defaults(handler="clusterkit.commands.check:run")


def _add_baseline_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("baseline (docs/report.md)")
    group.add_argument(
        "--save-baseline",
        metavar="FILE",
        help="record this run's known-good state (versions, GPUs, VBIOS, MTUs, bus "
        "bandwidth) in FILE; written only when the verdict is pass",
    )
    group.add_argument(
        "--baseline",
        metavar="FILE",
        help="name every difference from the baseline in FILE (baseline.drift: a warning, "
        "unless clusterkit.expect pins the value)",
    )
