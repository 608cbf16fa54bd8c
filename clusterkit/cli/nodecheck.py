"""`clusterkit node-check`: its arguments, and the typed request they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.options import (
    add_python_option,
    add_report_options,
    add_seconds,
)
from clusterkit.cli.parser import Parser
from clusterkit.cli.requests import ReportRequest, report


@dataclass(frozen=True)
class NodeCheckRequest:
    """`clusterkit node-check`, as its flags ask for it."""

    report: ReportRequest
    settings: str | None = None  # --settings FILE: the `clusterkit:` mapping
    slurm_drain: bool = False
    node_name: str | None = None  # Slurm's name for this node; None: found here
    python: str | None = None  # the job's Python; None: the settings', else python3
    strict: bool = False
    timeout: float = 30.0


def request(args: argparse.Namespace) -> NodeCheckRequest:
    return NodeCheckRequest(
        report=report(args),
        settings=args.settings,
        slurm_drain=args.slurm_drain,
        node_name=args.node_name,
        python=args.python,
        strict=args.strict,
        timeout=args.timeout,
    )


def add(sub: argparse._SubParsersAction[Parser]) -> None:
    parser = sub.add_parser(
        "node-check",
        help="this node's own health checks, for Slurm's HealthCheckProgram or Prolog",
        description="Run the single-node checks (GPU health, driver/CUDA, expected pins, "
        "/dev/shm, memlock, clock, NCCL debug variables) on this machine, in well under a "
        "second. Exit status as `check`.",
    )
    parser.add_argument(
        "--settings",
        default=None,
        metavar="FILE",
        help="YAML file with a `clusterkit:` mapping (expected pins), as in an inventory",
    )
    parser.add_argument(
        "--slurm-drain",
        action="store_true",
        help="on failure drain this node (reason `clusterkit: <check ids>`); resume it once "
        "it passes, only if clusterkit drained it",
    )
    parser.add_argument(
        "--node-name",
        default=None,
        metavar="NAME",
        help="Slurm's name for this node (default: $SLURMD_NODENAME, else hostname -s)",
    )
    add_python_option(parser, "the settings' ansible_python_interpreter")
    parser.add_argument("--strict", action="store_true", help="warnings fail the verdict too")
    add_seconds(
        parser,
        "--timeout",
        "deadline for the probe (default: 30; Slurm kills a health check at 60)",
        default=30.0,
    )
    add_report_options(parser)
    parser.set_defaults(handler="clusterkit.commands.nodecheck:run")
