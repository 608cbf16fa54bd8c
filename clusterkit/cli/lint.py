"""`clusterkit lint`: its arguments, and the typed request they become."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.cli.options import (
    add_nproc_per_node,
)
from clusterkit.cli.parser import Parser, positive_int


@dataclass(frozen=True)
class LintRequest:
    """`clusterkit lint`, as its flags ask for it."""

    script: str
    script_args: tuple[str, ...] = ()  # the script's own words, after it and after --
    inventory_sources: tuple[str, ...] = ()  # -i: the nodes and their ranks
    nodes: int | None = None
    nproc_per_node: int | None = None
    strict: bool = False
    format: str = "text"


def request(args: argparse.Namespace) -> LintRequest:
    return LintRequest(
        script=args.script,
        script_args=tuple(args.script_args),
        inventory_sources=tuple(args.inventory_sources),
        nodes=args.nodes,
        nproc_per_node=args.nproc_per_node,
        strict=args.strict,
        format=args.format,
    )


def add(sub: argparse._SubParsersAction[Parser]) -> None:
    parser = sub.add_parser(
        "lint",
        help="find the training script's distributed mistakes before the job runs",
        description="Read the training script and the local modules it imports (never run "
        "them) and name the mistakes that break or slow a multi-node torchrun job: a "
        "localhost MASTER_ADDR, mp.spawn under torchrun, the GPU picked by the global rank, a "
        "--local_rank argument, samplers, collectives in except blocks, ... (docs/lint.md). "
        "With an inventory (or --nodes), rules are judged for that cluster. Exit status: 0 "
        "clean or warnings, 1 a failing rule (--strict: a warning too), 2 bad input.",
    )
    parser.add_argument("script", metavar="SCRIPT", help="the job's entry script")
    parser.add_argument(
        "script_args",
        nargs=argparse.REMAINDER,
        metavar="ARGS",
        help="the script's own arguments, as launch would pass them (options of lint go "
        "before SCRIPT)",
    )
    cluster = parser.add_argument_group("the cluster the script will run on")
    cluster.add_argument(
        "-i",
        "--inventory",
        dest="inventory_sources",
        action="append",
        default=[],
        metavar="SOURCE",
        help="Ansible inventory: its hosts are the nodes, clusterkit.expect.gpus_per_node the "
        "ranks per node (repeatable)",
    )
    cluster.add_argument(
        "--nodes", type=positive_int, default=None, metavar="N", help="nodes the job runs on"
    )
    add_nproc_per_node(cluster, "the inventory's expect.gpus_per_node, else not known")
    parser.add_argument("--strict", action="store_true", help="warnings fail too")
    parser.add_argument("--format", choices=("text", "json"), default="text", help="output format")
    parser.set_defaults(handler="clusterkit.commands.lint:run")
