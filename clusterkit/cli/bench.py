"""`clusterkit bench`: its arguments (the nccl-tests *_perf flags and the run's)."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from clusterkit.bench.flags import BenchFlags
from clusterkit.cli.options import (
    add_bench_gate_options,
    add_connection_options,
    add_inventory_arguments,
    add_nproc_per_node,
    add_report_options,
    add_seconds,
    add_slurm_options,
)
from clusterkit.cli.parser import (
    Deprecated,
    Parser,
    positive_int,
)
from clusterkit.cli.requests import (
    Connection,
    ReportRequest,
    TargetRequest,
    connection,
    report,
    target,
)
from clusterkit.inventory.model import BenchSettings


@dataclass(frozen=True)
class BenchRequest:
    """`clusterkit bench`, as its flags ask for it: the hosts, the sweep and run
    (clusterkit.bench.flags), and where the results go."""

    target: TargetRequest
    connection: Connection
    report: ReportRequest
    flags: BenchFlags
    result_json: str | None = None
    exclude_file: str | None = None


def request(args: argparse.Namespace) -> BenchRequest:
    return BenchRequest(
        target=target(args),
        connection=connection(args),
        report=report(args),
        flags=BenchFlags(
            minbytes=args.minbytes,
            maxbytes=args.maxbytes,
            stepfactor=args.stepfactor,
            iters=args.iters,
            warmup_iters=args.warmup_iters,
            validate=args.validate,
            datatype=args.datatype,
            collective=args.collective,
            backend=args.backend,
            nproc_per_node=args.nproc_per_node,
            gate_size=args.gate_size,
            master_port=args.master_port,
            image=args.image,
            timeout=args.timeout,
            join_timeout=args.join_timeout,
            find_slow=args.find_slow,
            per_node=args.per_node,
            group_size=args.group_size,
            min_busbw=args.min_busbw,
        ),
        result_json=args.result_json,
        exclude_file=args.exclude_file,
    )


def add(sub: argparse._SubParsersAction[Parser]) -> None:
    parser = sub.add_parser(
        "bench",
        help="collective bandwidth test on every node (nccl-tests compatible output)",
        description="Run all_reduce (and all_gather, reduce_scatter, alltoall with "
        "--collective) across every node of the inventory (torchrun, one rank per GPU) and "
        "print nccl-tests style bus bandwidth per size; fail when a collective's busbw at the "
        "gate size is under its threshold. With --per-node, every node is also measured alone "
        "(all at once) against an intra-node threshold; with --find-slow, groups of nodes are "
        "measured in rounds to name a slow node. Exit status: 0 pass, 1 below a threshold or a "
        "rank failed, 2 bad input, 3 a node could not run.",
    )
    add_inventory_arguments(parser, "(default: this machine)")
    _add_bench_sweep_options(parser)
    run = parser.add_argument_group("run")
    _add_bench_run_options(run)
    _add_bench_rounds_options(run)
    add_bench_gate_options(parser)
    add_slurm_options(parser)
    add_connection_options(parser)
    add_report_options(parser)
    parser.set_defaults(handler="clusterkit.commands.bench:run")


def _add_bench_sweep_options(parser: argparse.ArgumentParser) -> None:
    """The nccl-tests *_perf flags, with their short names. Defaults: the inventory's
    clusterkit.bench, else BenchSettings (shared with `check`)."""
    sweep = parser.add_argument_group(
        "sweep (nccl-tests *_perf flags; defaults: clusterkit.bench in the inventory)"
    )
    sweep.add_argument("-b", "--minbytes", help=f"smallest size (default {BenchSettings.minbytes})")
    sweep.add_argument("-e", "--maxbytes", help=f"largest size (default {BenchSettings.maxbytes})")
    sweep.add_argument(
        "-f",
        "--stepfactor",
        type=positive_int,
        help=f"size factor (default {BenchSettings.stepfactor})",
    )
    sweep.add_argument(
        "-n",
        "--iters",
        type=positive_int,
        help=f"timed iterations (default {BenchSettings.iters})",
    )
    sweep.add_argument(
        "-w",
        "--warmup-iters",
        type=int,
        help=f"warmup iterations (default {BenchSettings.warmup_iters})",
    )
    sweep.add_argument(
        "-c",
        "--validate",
        type=int,
        choices=(0, 1),
        default=1,
        help="verify the collectives' results (nccl-tests -c; default 1)",
    )
    sweep.add_argument(
        "--check",
        dest="validate",
        type=int,
        choices=(0, 1),
        action=Deprecated,
        replacement="--validate",
    )
    sweep.add_argument(
        "-d", "--datatype", help=f"float, half, bfloat16, ... (default {BenchSettings.datatype})"
    )
    sweep.add_argument(
        "--collective",
        default=None,
        metavar="NAME[,NAME...]",
        help="all_reduce, all_gather, reduce_scatter, alltoall: each with its own table and "
        "gate (default: clusterkit.bench.collectives, else all_reduce)",
    )


def _add_bench_run_options(run: argparse._ArgumentGroup) -> None:
    """How the ranks run: backend, ranks, port, image, deadlines and the result file."""
    run.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto")
    add_nproc_per_node(run, "clusterkit.expect.gpus_per_node, GPUs found, else 1")
    run.add_argument(
        "--gate-size", default=None, metavar="SIZE", help="size the gate reads (default: -e)"
    )
    run.add_argument("--master-port", type=positive_int, default=None, metavar="PORT")
    run.add_argument(
        "--image",
        default=None,
        help="run inside this image (default: clusterkit.image); '' uses the node interpreter",
    )
    add_seconds(
        run,
        "--timeout",
        "deadline for the whole run; everything is killed after it "
        f"(default: {BenchSettings.timeout:g})",
    )
    add_seconds(
        run,
        "--join-timeout",
        f"how long ranks wait for each other to arrive (default: {BenchSettings.join_timeout:g})",
    )
    run.add_argument(
        "-J", "--result-json", default=None, metavar="FILE", help="nccl-tests style JSON result"
    )


def _add_bench_rounds_options(run: argparse._ArgumentGroup) -> None:
    """The runs after the global one: every node alone, and groups of nodes in rounds."""
    run.add_argument(
        "--find-slow",
        action="store_const",
        const=True,
        default=None,
        help="after the all-reduce, measure groups of nodes in rounds and name a slow node "
        "(default: clusterkit.bench.find_slow)",
    )
    run.add_argument(
        "--per-node",
        action="store_true",
        help="after the global run, bench every node alone (its own ranks, all nodes at once) "
        "and name a node below its intra-node threshold or the others' median; needs 2+ "
        "ranks per node",
    )
    run.add_argument(
        "--group-size",
        type=positive_int,
        default=None,
        metavar="K",
        help=f"nodes per group with --find-slow (default {BenchSettings.find_slow_group})",
    )
