"""Collective bandwidth worker: one rank of `clusterkit bench`, started by torchrun.

This file, with the node libraries it imports (bench_common, bench_rendezvous, bench_measure,
bench_result, bench_table) inserted in place of those imports, is shipped as one file to
nodes that may not have clusterkit installed: it needs only torch and the standard library,
runs as a script (`torchrun ... worker.py -b 1M -e 1G`) and is importable
(`clusterkit.node.bench_worker`). It must stay Python 3.8 compatible: no runtime use of 3.10
syntax.

The one node program neither composed with the prelude nor started behind the bootstrap:
it imports torch (the others are stdlib only and run under `python -S`), and torchrun, not
clusterkit, starts it on every rank, as a file (the launcher writes it into a private run
folder first), or as `torchrun -m clusterkit.bench` on one machine. So it keeps its own
frame markers, held equal to framing.py's by a test. Rank 0 prints one nccl-tests
`<collective>_perf` table per collective (--collective
all_reduce,all_gather,reduce_scatter,alltoall) on stdout and the result as JSON (between
framing markers with --frame, into a file with -J).

Methodology (see docs/bench.md): every size is warmed up, then timed with a host clock
around `iters` back-to-back all_reduce calls followed by a device synchronize, exactly like
nccl-tests, twice: out of place (separate input and output buffers: the input is copied into
the output, which is then reduced, exactly what torch's functional all_reduce does) and in
place (torch's dist.all_reduce). Both blocks are printed and averaged, as nccl-tests does.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time

from clusterkit.node.bench_common import (
    COLLECTIVES,
    DTYPES,
    EXIT_FAILED,
    EXIT_USAGE,
    BenchError,
    parse_collectives,
    parse_size,
    size_sweep,
)
from clusterkit.node.bench_measure import Unsupported, measure
from clusterkit.node.bench_rendezvous import (
    await_go,
    check_world_size,
    device_info,
    die_with_parent,
    env_int,
    gather_json,
    join_world,
    log_line,
    write_pid,
)
from clusterkit.node.bench_result import collective_result
from clusterkit.node.bench_table import collective_results, format_tables

FRAME_BEGIN = "\n--clusterkit-begin--\n"  # same markers as clusterkit.framing
FRAME_END = "\n--clusterkit-end--\n"


# --- the benchmark ------------------------------------------------------------------------


def _collectives_flag(text: str) -> list[str]:
    try:
        return parse_collectives(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="clusterkit-bench-worker",
        description="all_reduce bandwidth test, nccl-tests flags; run under torchrun",
    )
    parser.add_argument("-b", "--minbytes", default="8M", help="smallest size (default 8M)")
    parser.add_argument("-e", "--maxbytes", default="64M", help="largest size (default 64M)")
    parser.add_argument("-f", "--stepfactor", type=int, default=2, help="size factor")
    parser.add_argument("-n", "--iters", type=int, default=20, help="timed iterations")
    parser.add_argument("-w", "--warmup_iters", type=int, default=5, help="warmup iterations")
    parser.add_argument("-c", "--check", type=int, default=1, help="check correctness (0/1)")
    parser.add_argument("-d", "--datatype", default="float", choices=sorted(DTYPES))
    parser.add_argument("--backend", default="auto", choices=("auto", "nccl", "gloo"))
    parser.add_argument(
        "--collective",
        default=["all_reduce"],
        type=_collectives_flag,
        help="NAME[,NAME...]: " + ", ".join(COLLECTIVES) + " (default all_reduce)",
    )
    parser.add_argument(
        "--expect-world-size", type=int, default=None, help="nodes x GPUs; checked first"
    )
    parser.add_argument(
        "--join-timeout", type=float, default=60.0, help="seconds for every rank to arrive"
    )
    parser.add_argument("-J", "--output-file", default=None, help="write the JSON result here")
    parser.add_argument("--frame", action="store_true", help="print the JSON result framed")
    parser.add_argument("--run-dir", default=None, help="where the launcher's kill looks")
    parser.add_argument(
        "--barrier-dir",
        default=None,
        help="rank 0 writes DIR/ready once the group has joined and measures after DIR/go",
    )
    parser.add_argument(
        "--barrier-timeout", type=float, default=0.0, help="seconds to wait for DIR/go"
    )
    parser.add_argument(
        "--fill", type=float, default=0.0, help="time each block over this many seconds, not -n"
    )
    return parser


def _validate(args: argparse.Namespace) -> tuple[list[int], str, int]:
    torch_name, elem_bytes = DTYPES[args.datatype]
    try:
        sizes = size_sweep(
            parse_size(args.minbytes), parse_size(args.maxbytes), args.stepfactor, elem_bytes
        )
    except ValueError as error:
        raise BenchError("usage", str(error), EXIT_USAGE) from None
    if args.iters < 1 or args.warmup_iters < 0:
        raise BenchError("usage", "need -n >= 1 and -w >= 0", EXIT_USAGE)
    return sizes, torch_name, elem_bytes


def run(argv: list[str] | None = None) -> dict | None:
    """Run this rank. Returns the result dict on rank 0, None elsewhere; raises BenchError."""
    args = build_parser().parse_args(argv)
    sizes, torch_name, elem_bytes = _validate(args)
    rank, world_size = env_int("RANK"), env_int("WORLD_SIZE")
    if rank is None or world_size is None or os.environ.get("MASTER_ADDR") is None:
        raise BenchError(
            "usage",
            "RANK/WORLD_SIZE/MASTER_ADDR are not set: start this under torchrun",
            EXIT_USAGE,
        )
    local_rank = env_int("LOCAL_RANK") or 0
    die_with_parent()
    write_pid(args.run_dir, rank)
    check_world_size(world_size, args.expect_world_size)

    import warnings

    import torch
    import torch.distributed as dist

    # torch 2.10+ renames all_gather_into_tensor/reduce_scatter_tensor; the old names still
    # work on every torch this supports, so their deprecation notice is noise here.
    warnings.filterwarnings("ignore", category=FutureWarning, message=".*is deprecated.*")
    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    host = socket.gethostname()
    control = join_world(dist, backend, rank, world_size, args.join_timeout)
    log_line(f"rank {rank} joined on {host} (world size {world_size}, backend {backend})")

    me = dict(device_info(torch, backend, local_rank), rank=rank, host=host, pid=os.getpid())
    devices = gather_json(torch, dist, me, world_size, control)
    if args.barrier_dir:
        await_go(dist, control, rank, args.barrier_dir, args.barrier_timeout)
    dtype = getattr(torch, torch_name)
    results = []
    for collective in args.collective:
        begun = time.time()
        try:
            measured = measure(
                torch, dist, backend, sizes, dtype, elem_bytes, args, rank, world_size, control,
                collective,
            )  # fmt: skip
            unsupported = ""
        except Unsupported as why:
            measured, unsupported = {}, str(why)
        except RuntimeError as error:
            raise BenchError("rank-failed", f"rank {rank} on {host}: {error}") from None
        gathered = gather_json(torch, dist, measured, world_size, control)
        if rank == 0:
            context = (sizes, args, elem_bytes, world_size, devices, backend, torch, begun)
            results.append(collective_result(collective, gathered, unsupported, context))
    dist.destroy_process_group()
    if rank != 0:
        return None
    first = dict(results[0])
    if len(results) > 1:
        first["more_collectives"] = results[1:]
    return first


def main(argv: list[str] | None = None) -> int:
    """Script entry: run, print the table and JSON on rank 0, map failures to exit codes."""
    frame = "--frame" in (argv if argv is not None else sys.argv[1:])
    try:
        result = run(argv)
    except BenchError as error:
        log_line(f"error {error.kind}: {error}")
        if frame and (env_int("LOCAL_RANK") or 0) == 0:
            rank = env_int("RANK")
            payload = {"error": {"kind": str(error.kind), "message": str(error), "rank": rank}}
            sys.stdout.write(FRAME_BEGIN + json.dumps(payload) + FRAME_END)
            sys.stdout.flush()
        return error.exit_code
    except SystemExit:
        raise
    except Exception as error:
        log_line(f"error rank-failed: rank {os.environ.get('RANK')}: {error}")
        return EXIT_FAILED
    if result is None:
        return 0
    sys.stdout.write(format_tables(result))
    args = build_parser().parse_args(argv)
    if args.output_file:
        with open(args.output_file, "w") as handle:
            json.dump(result, handle, indent=1)
    if frame:
        sys.stdout.write(FRAME_BEGIN + json.dumps(result) + FRAME_END)
    sys.stdout.flush()
    wrong = sum(
        max(0, (place or {}).get("nwrong") or 0)
        for one in collective_results(result)
        for r in one["results"]
        for place in (r.get("out_of_place"), r.get("in_place"))
    )
    return EXIT_FAILED if wrong else 0


def exit_now(status: int) -> None:
    """Leave once the results are out, without the interpreter's teardown: there torch's
    c10d threads abort a finished rank now and then (SIGABRT, "terminate called without an
    active exception", about 1 run in 30 on a loaded machine). That would fail a measured
    run on its last line, and keep torchrun's agents on the other nodes in their exit
    barrier for 300 s."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    exit_now(main())
