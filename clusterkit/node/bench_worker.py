"""Collective bandwidth worker: one rank of `clusterkit bench`, started by torchrun.

This file is shipped alone to nodes that may not have clusterkit installed: it needs only
torch and the standard library, runs as a script (`torchrun ... worker.py -b 1M -e 1G`) and
is importable (`clusterkit.node.bench_worker`). It must stay Python 3.8 compatible: no runtime
use of 3.10 syntax.

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
import datetime
import json
import os
import platform
import re
import signal
import socket
import sys
import time

FRAME_BEGIN = "\n--clusterkit-begin--\n"  # same markers as clusterkit.framing
FRAME_END = "\n--clusterkit-end--\n"
LOG_PREFIX = "clusterkit-bench:"  # stderr lines the launcher reads to attribute failures
try:  # installed (`torchrun -m clusterkit.bench`, and the control side formatting tables)
    from clusterkit import __version__ as VERSION
except ImportError:  # this file alone on a node: its own table is not the one users read
    VERSION = "(worker)"

EXIT_FAILED = 1  # a rank failed or the data came back wrong
EXIT_USAGE = 2  # bad flags
EXIT_WORLD = 3  # world size mismatch or ranks that never arrived: the run could not start

DTYPES = {
    # nccl-tests name: (torch attribute, element bytes)
    "int8": ("int8", 1),
    "uint8": ("uint8", 1),
    "int32": ("int32", 4),
    "int": ("int32", 4),
    "int64": ("int64", 8),
    "half": ("float16", 2),
    "float16": ("float16", 2),
    "bfloat16": ("bfloat16", 2),
    "float": ("float32", 4),
    "float32": ("float32", 4),
    "double": ("float64", 8),
    "float64": ("float64", 8),
}
_SUFFIX = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


class BenchError(Exception):
    """A failure with a kind the launcher maps to a finding (world-size, join, rank-failed)."""

    def __init__(self, kind: str, message: str, exit_code: int = EXIT_FAILED) -> None:
        super().__init__(message)
        self.kind = kind
        self.exit_code = exit_code


# --- pure helpers (unit-tested without torch) -------------------------------------------


def parse_size(text: str) -> int:
    """nccl-tests sizes: bytes with an optional K/M/G/T suffix, powers of 1024 (`1M` = 2**20)."""
    match = re.fullmatch(r"\s*(\d+)\s*([KkMmGgTt]?)[Bb]?\s*", str(text))
    if not match:
        raise ValueError(f"not a size: {text!r} (bytes, or a number with K/M/G, e.g. 64M)")
    return int(match.group(1)) * _SUFFIX[match.group(2).upper()]


def size_sweep(min_bytes: int, max_bytes: int, factor: int, elem_bytes: int) -> list[int]:
    """The sizes nccl-tests visits: min, min*f, ... up to max, each rounded down to whole
    elements (at least one)."""
    if min_bytes < 1 or max_bytes < min_bytes:
        raise ValueError("need 1 <= min bytes <= max bytes")
    if factor < 2 and min_bytes != max_bytes:
        raise ValueError("size factor must be at least 2")
    sizes: list[int] = []
    size = min_bytes
    while size <= max_bytes:
        aligned = max(elem_bytes, size // elem_bytes * elem_bytes)
        if not sizes or aligned != sizes[-1]:
            sizes.append(aligned)
        if factor < 2:
            break
        size *= factor
    return sizes


# nccl-tests collectives: name -> (redop column, bus factor numerator k: busbw = algbw*k(n-1)/n)
COLLECTIVES = {
    "all_reduce": ("sum", 2),
    "all_gather": ("none", 1),
    "reduce_scatter": ("sum", 1),
    "alltoall": ("none", 1),
}


def parse_collectives(text: str) -> list[str]:
    """`all_reduce,all_gather` -> names in the order given, each once; ValueError names the
    unknown one."""
    names: list[str] = []
    for part in str(text).split(","):
        name = part.strip()
        if name not in COLLECTIVES:
            known = ", ".join(COLLECTIVES)
            raise ValueError(f"unknown collective {name!r} (one or more of {known})")
        if name not in names:
            names.append(name)
    return names


def bus_factor(ranks: int, collective: str = "all_reduce") -> float:
    """nccl-tests' bus bandwidth factor: 2(n-1)/n for all_reduce, (n-1)/n for all_gather,
    reduce_scatter and alltoall; 0 for one rank, which nccl-tests prints as 0.00 (the gate
    treats a one-rank run as "does not apply", see gate.evaluate)."""
    return COLLECTIVES[collective][1] * (ranks - 1) / ranks if ranks > 0 else 0.0


def bandwidths(
    size_bytes: int, seconds: float, ranks: int, collective: str = "all_reduce"
) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9), as nccl-tests: algbw = S/t with S the size column (the
    whole buffer: for all_gather, reduce_scatter and alltoall count per rank x n x element
    bytes), busbw = algbw x bus_factor."""
    algbw = size_bytes / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, algbw * bus_factor(ranks, collective)


def row_shape(size_bytes: int, elem_bytes: int, ranks: int, collective: str) -> tuple[int, int]:
    """(size column, count column) of one nccl-tests row for a swept size: all_reduce keeps
    size/elem elements; the others split them over the ranks (count per rank, at least one)
    and print the whole buffer, count x n x element bytes, as nccl-tests' setupArgs does."""
    count = max(1, size_bytes // elem_bytes)
    if collective == "all_reduce":
        return count * elem_bytes, count
    per_rank = max(1, count // max(1, ranks))
    return per_rank * max(1, ranks) * elem_bytes, per_rank


# --- node-side plumbing -------------------------------------------------------------------


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL this rank when its torchrun agent dies: torchrun starts ranks in
    their own session, so killing the agent's process group would otherwise orphan them."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        pr_set_pdeathsig = 1
        libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)
        if os.getppid() == 1:  # the parent already died before prctl took effect
            os._exit(EXIT_FAILED)
    except (OSError, AttributeError):
        pass


def _write_pid(run_dir: str | None, rank: int) -> None:
    """Record this rank's pid (its own session: torchrun uses start_new_session) so a kill
    command sent by the launcher can end it by run id."""
    if not run_dir:
        return
    path = os.path.join(run_dir, f"rank{rank}.kill")
    try:
        with open(path, "w") as handle:
            handle.write(f"{os.getpid()}\n")
    except OSError:
        pass


def _log(message: str) -> None:
    sys.stderr.write(f"{LOG_PREFIX} {message}\n")
    sys.stderr.flush()


def _env_int(name: str) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else None


def _device_info(torch, backend: str, local_rank: int) -> dict:
    """This rank's device: CUDA name and PCI bus id, or the CPU."""
    if backend == "nccl":
        props = torch.cuda.get_device_properties(local_rank)
        try:
            bus = f"{props.pci_domain_id:04x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}"
        except (AttributeError, TypeError):
            bus = "?"
        return {"device": local_rank, "bus_id": bus, "name": props.name}
    name = platform.processor() or platform.machine() or "cpu"
    return {"device": local_rank, "bus_id": "cpu", "name": "CPU " + name}


def _synchronize(torch, backend: str) -> None:
    if backend == "nccl":
        torch.cuda.synchronize()


def _parse_barrier_failure(message: str) -> list[int]:
    """Ranks a failed monitored_barrier names ("Ranks 1, 2 failed to pass monitoredBarrier",
    "Rank 2 failed to pass monitoredBarrier")."""
    match = re.search(r"Ranks?\s+([\d,\s]+?)\s+failed to pass monitoredBarrier", message)
    if not match:
        return []
    return [int(part) for part in re.findall(r"\d+", match.group(1))]


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


def _check_world_size(world_size: int, expected: int | None) -> None:
    if expected is not None and world_size != expected:
        raise BenchError(
            "world-size",
            f"WORLD_SIZE is {world_size} but {expected} ranks were expected "
            "(nodes x GPUs per node): a partial run would measure the wrong thing",
            EXIT_WORLD,
        )


def _join(dist, backend: str, rank: int, world_size: int, timeout_s: float):
    """Initialise the process group and a gloo side group, then prove every rank arrived:
    monitored_barrier names the ranks that did not."""
    timeout = datetime.timedelta(seconds=timeout_s)
    dist.init_process_group(backend=backend, timeout=timeout)
    control = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else None
    try:
        dist.monitored_barrier(group=control, timeout=timeout, wait_all_ranks=True)
    except RuntimeError as error:
        missing = _parse_barrier_failure(str(error))
        raise BenchError(
            "join",
            f"ranks {','.join(map(str, missing)) or '?'} did not arrive within "
            f"{timeout_s:g}s: {str(error).splitlines()[0]}",
            EXIT_WORLD,
        ) from None
    return control


def _await_go(dist, group, rank: int, barrier_dir: str, timeout: float) -> None:
    """Groups of `bench --find-slow` measure at the same moment, so none is timed on a
    machine or fabric the others have left idle: rank 0 says the group is ready (a file the
    launcher waits for) and waits for the launcher's go, then every rank leaves a barrier.
    Without a go in time the group measures anyway (the launcher may be gone)."""
    if rank == 0:
        go = os.path.join(barrier_dir, "go")
        try:
            with open(os.path.join(barrier_dir, "ready"), "w"):
                pass
        except OSError as error:
            _log(f"cannot write the ready file: {error}")
        end = time.monotonic() + timeout
        while not os.path.exists(go) and time.monotonic() < end:
            time.sleep(0.05)
        if not os.path.exists(go):
            _log(f"no go within {timeout:g}s: measuring anyway")
    dist.barrier(group=group)


def _gather_json(torch, dist, value, world_size: int, group) -> list:
    """Every rank's `value` (JSON), gathered as byte tensors on the gloo control group.
    dist.all_gather_object decodes through tensor.numpy(), so it fails on a node without
    numpy; the bench must not need a package the job itself may not."""
    data = json.dumps(value).encode()
    sizes = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(sizes, torch.tensor([len(data)], dtype=torch.int64), group=group)
    lengths = [int(size.item()) for size in sizes]
    payload = torch.zeros(max(lengths), dtype=torch.uint8)
    payload[: len(data)] = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    chunks = [torch.zeros(max(lengths), dtype=torch.uint8) for _ in range(world_size)]
    dist.all_gather(chunks, payload, group=group)
    return [json.loads(bytes(chunk[:n].tolist())) for chunk, n in zip(chunks, lengths)]


def _timed(torch, dist, backend, op, iters):
    """Seconds per op: one untimed op and a barrier, then `iters` back-to-back ops and a
    device synchronize inside a host clock (nccl-tests' BenchTime)."""
    op()
    _synchronize(torch, backend)
    dist.barrier()
    _synchronize(torch, backend)
    start = time.perf_counter()
    for _ in range(iters):
        op()
    _synchronize(torch, backend)
    return (time.perf_counter() - start) / iters


def _buffers(torch, collective, count, dtype, device, rank, ranks):
    """The ops of one row, as nccl-tests lays out its buffers: {place: (op, fill, expect)}
    and "buffers" (zeroed before each timed block: a sum of zeros stays finite).
    `fill()` writes this rank's input (rank+1 in every element it sends), `expect()` counts
    the wrong elements of the output afterwards. In place uses nccl-tests' offsets (the
    input is this rank's slice of the output, or the reverse); alltoall has no in-place
    block here (None: printed N/A)."""
    zeros = lambda n: torch.zeros(n, dtype=dtype, device=device)  # noqa: E731
    per = count
    if collective == "all_reduce":
        source, output = zeros(per), zeros(per)
        total = ranks * (ranks + 1) // 2
        return {
            "buffers": (source, output),
            "out_of_place": (
                lambda: (output.copy_(source), dist_call("all_reduce", output)),
                lambda: source.fill_(rank + 1),
                lambda: _count_wrong(torch, output, [total]),
            ),
            "in_place": (
                lambda: dist_call("all_reduce", source),
                lambda: source.fill_(rank + 1),
                lambda: _count_wrong(torch, source, [total]),
            ),
        }
    if collective == "all_gather":
        send, recv = zeros(per), zeros(per * ranks)
        mine = recv.narrow(0, rank * per, per)
        gathered = [r + 1 for r in range(ranks)]
        return {
            "buffers": (send, recv),
            "out_of_place": (
                lambda: dist_call("all_gather_into_tensor", recv, send),
                lambda: send.fill_(rank + 1),
                lambda: _count_wrong(torch, recv, gathered),
            ),
            "in_place": (
                lambda: dist_call("all_gather_into_tensor", recv, mine),
                lambda: (recv.zero_(), mine.fill_(rank + 1)),
                lambda: _count_wrong(torch, recv, gathered),
            ),
        }
    if collective == "reduce_scatter":
        send, recv = zeros(per * ranks), zeros(per)
        mine = send.narrow(0, rank * per, per)
        total = ranks * (ranks + 1) // 2
        return {
            "buffers": (send, recv),
            "out_of_place": (
                lambda: dist_call("reduce_scatter_tensor", recv, send),
                lambda: send.fill_(rank + 1),
                lambda: _count_wrong(torch, recv, [total]),
            ),
            "in_place": (
                lambda: dist_call("reduce_scatter_tensor", mine, send),
                lambda: send.fill_(rank + 1),
                lambda: _count_wrong(torch, mine, [total]),
            ),
        }
    send, recv = zeros(per * ranks), zeros(per * ranks)
    return {
        "buffers": (send, recv),
        "out_of_place": (
            lambda: dist_call("all_to_all_single", recv, send),
            lambda: send.fill_(rank + 1),
            lambda: _count_wrong(torch, recv, [r + 1 for r in range(ranks)]),
        ),
        "in_place": None,
    }


_DIST = None  # torch.distributed, set by run(): the op lambdas above stay one line each


def dist_call(name, *tensors):
    return getattr(_DIST, name)(*tensors)


def _count_wrong(torch, result, chunks: list) -> int:
    """Elements of `result` that differ from its expected value: `chunks` holds one value
    per equal slice (one value: the whole buffer)."""
    parts = result.chunk(len(chunks)) if len(chunks) > 1 else [result]
    wrong = 0
    for part, value in zip(parts, chunks):
        target = torch.tensor(value, device=result.device).to(result.dtype)
        wrong += int((part != target).sum().item())
    return wrong


def _wrong(torch, backend, op, fill, expect) -> int:
    fill()
    op()
    _synchronize(torch, backend)
    return expect()


def _supported(torch, dist, backend, op, group) -> str:
    """ "" when every rank could run `op`, else why not: a backend without the collective
    (older gloo has no reduce_scatter) raises on every rank; all ranks agree on it."""
    reason = ""
    try:
        op()
        _synchronize(torch, backend)
    except (RuntimeError, NotImplementedError, AttributeError, ValueError) as error:
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
    flag = torch.tensor([1 if reason else 0], dtype=torch.int64)
    dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=group)
    if flag.item() and not reason:
        reason = "another rank could not run it"
    return reason


FILL_PROBE_OPS = 3  # timed to size a --fill window: few, so a slow group is not late to it


def _fill_iters(torch, dist, backend, op, iters, seconds, group):
    """How many back-to-back ops fill `seconds`, from a timed run of a few, agreed by every
    rank (the smallest): the groups of `bench --find-slow` then all time over the same
    window instead of the slow one finishing alone on a machine the others have left."""
    probe = max(1, min(iters, FILL_PROBE_OPS))
    per_op = _timed(torch, dist, backend, op, probe)
    wanted = torch.tensor([max(probe, int(seconds / max(per_op, 1e-9)))], dtype=torch.int64)
    dist.all_reduce(wanted, op=dist.ReduceOp.MIN, group=group)
    return int(wanted.item())


class Unsupported(Exception):
    """The backend lacks this collective: reported, not a failure."""


def _measure(
    torch, dist, backend, sizes, dtype, elem_bytes, args, rank, world_size, group,
    collective="all_reduce",
):  # fmt: skip
    """Per size: warm up, then time and check the out-of-place and the in-place collective.
    Returns this rank's {"out_of_place", "in_place"} -> (seconds per op, wrong elements),
    one entry per size (wrong is -1 when not checked; a block that is not measured, like
    alltoall in place, has no entries). With --fill each timed block runs as many ops as
    fill that many seconds (see _fill_iters) instead of -n. Raises Unsupported."""
    global _DIST
    _DIST = dist
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
    measured: dict[str, tuple[list[float], list[int]]] = {
        "out_of_place": ([], []),
        "in_place": ([], []),
    }
    for index, size in enumerate(sizes):
        count = row_shape(size, elem_bytes, world_size, collective)[1]
        blocks = _buffers(torch, collective, count, dtype, device, rank, world_size)
        first = blocks["out_of_place"][0]
        if index == 0:
            reason = _supported(torch, dist, backend, first, group)
            if reason:
                raise Unsupported(reason)
        for _ in range(args.warmup_iters):
            first()
        for place in ("out_of_place", "in_place"):
            block = blocks[place]
            if block is None:
                continue
            op, fill, expect = block
            times, wrong = measured[place]
            for buffer in blocks["buffers"]:
                buffer.zero_()
            iters = args.iters
            if args.fill:
                iters = _fill_iters(torch, dist, backend, op, iters, args.fill, group)
            times.append(_timed(torch, dist, backend, op, iters))
            wrong.append(_wrong(torch, backend, op, fill, expect) if args.check else -1)
        del blocks, first
    return measured


def _place(
    size: int, times: list[float], wrongs: list[int], world_size: int, collective: str
) -> dict:
    """One block of an nccl-tests row: the ranks' mean time (nccl-tests' default -a 1)."""
    mean_time = sum(times) / len(times)
    algbw, busbw = bandwidths(size, mean_time, world_size, collective)
    nwrong = -1 if any(w < 0 for w in wrongs) else sum(wrongs)
    return {"time": mean_time * 1e6, "alg_bw": algbw, "bus_bw": busbw, "nwrong": nwrong}


def summarise(
    sizes: list[int],
    datatype: str,
    elem_bytes: int,
    world_size: int,
    per_rank_times: list[list[float]],
    per_rank_wrong: list[list[int]],
    devices: list[dict],
    per_rank_oop_times: list[list[float]] | None = None,
    per_rank_oop_wrong: list[list[int]] | None = None,
    collective: str = "all_reduce",
) -> list[dict]:
    """One nccl-tests JSON result per swept size, with the slowest rank's view added (of the
    in-place block, or out of place where in place is not measured: alltoall).
    per_rank_*: [rank][size] seconds per op and wrong elements, in place (empty rows: not
    measured); the out-of-place pair likewise (None when it was not measured)."""
    results = []
    for index, swept in enumerate(sizes):
        size, count = row_shape(swept, elem_bytes, world_size, collective)
        in_place = out_of_place = None
        if per_rank_times and all(len(rank_times) > index for rank_times in per_rank_times):
            times = [rank_times[index] for rank_times in per_rank_times]
            wrongs = [rank_wrong[index] for rank_wrong in per_rank_wrong]
            in_place = _place(size, times, wrongs, world_size, collective)
        if per_rank_oop_times is not None and per_rank_oop_wrong is not None:
            oop_times = [rank_times[index] for rank_times in per_rank_oop_times]
            oop_wrongs = [rank_wrong[index] for rank_wrong in per_rank_oop_wrong]
            out_of_place = _place(size, oop_times, oop_wrongs, world_size, collective)
            if in_place is None:
                times = oop_times
        slowest = max(range(len(times)), key=lambda r: times[r])
        slow_algbw, slow_busbw = bandwidths(size, times[slowest], world_size, collective)
        results.append(
            {
                "size": size,
                "count": count,
                "type": datatype,
                "redop": COLLECTIVES[collective][0],
                "root": -1,
                "out_of_place": out_of_place,
                "in_place": in_place,
                "slowest": {
                    "rank": slowest,
                    "host": devices[slowest]["host"],
                    "time": times[slowest] * 1e6,
                    "alg_bw": slow_algbw,
                    "bus_bw": slow_busbw,
                },
                "rank_times_us": [t * 1e6 for t in times],
            }
        )
    return results


def run(argv: list[str] | None = None) -> dict | None:
    """Run this rank. Returns the result dict on rank 0, None elsewhere; raises BenchError."""
    args = build_parser().parse_args(argv)
    sizes, torch_name, elem_bytes = _validate(args)
    rank, world_size = _env_int("RANK"), _env_int("WORLD_SIZE")
    if rank is None or world_size is None or os.environ.get("MASTER_ADDR") is None:
        raise BenchError(
            "usage",
            "RANK/WORLD_SIZE/MASTER_ADDR are not set: start this under torchrun",
            EXIT_USAGE,
        )
    local_rank = _env_int("LOCAL_RANK") or 0
    _die_with_parent()
    _write_pid(args.run_dir, rank)
    _check_world_size(world_size, args.expect_world_size)

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
    control = _join(dist, backend, rank, world_size, args.join_timeout)
    _log(f"rank {rank} joined on {host} (world size {world_size}, backend {backend})")

    me = dict(_device_info(torch, backend, local_rank), rank=rank, host=host, pid=os.getpid())
    devices = _gather_json(torch, dist, me, world_size, control)
    if args.barrier_dir:
        _await_go(dist, control, rank, args.barrier_dir, args.barrier_timeout)
    dtype = getattr(torch, torch_name)
    results = []
    for collective in args.collective:
        begun = time.time()
        try:
            measured = _measure(
                torch, dist, backend, sizes, dtype, elem_bytes, args, rank, world_size, control,
                collective,
            )  # fmt: skip
            unsupported = ""
        except Unsupported as why:
            measured, unsupported = {}, str(why)
        except RuntimeError as error:
            raise BenchError("rank-failed", f"rank {rank} on {host}: {error}") from None
        gathered = _gather_json(torch, dist, measured, world_size, control)
        if rank == 0:
            context = (sizes, args, elem_bytes, world_size, devices, backend, torch, begun)
            results.append(_collective_result(collective, gathered, unsupported, context))
    dist.destroy_process_group()
    if rank != 0:
        return None
    first = dict(results[0])
    if len(results) > 1:
        first["more_collectives"] = results[1:]
    return first


def _collective_result(collective: str, gathered: list, unsupported: str, context) -> dict:
    """Rank 0's nccl-tests JSON for one collective (`unsupported`: why it has no rows)."""
    sizes, args, elem_bytes, world_size, devices, backend, torch, begun = context
    results: list[dict] = []
    if not unsupported:
        results = summarise(
            sizes,
            args.datatype,
            elem_bytes,
            world_size,
            [entry["in_place"][0] for entry in gathered],
            [entry["in_place"][1] for entry in gathered],
            devices,
            [entry["out_of_place"][0] for entry in gathered],
            [entry["out_of_place"][1] for entry in gathered],
            collective,
        )
    result = {
        "config": {
            "collective": f"{collective}_perf",
            "minBytes": sizes[0],
            "maxBytes": sizes[-1],
            "stepFactor": args.stepfactor,
            "warmupIters": args.warmup_iters,
            "iters": args.iters,
            "aggIters": 1,
            "validation": args.check,
            "datatype": args.datatype,
            "op": COLLECTIVES[collective][0],
            "nThread": 1,
            "nGpus": 1,
            "out_of_place": "separate input and output buffers",
            "fill_seconds": args.fill or None,
        },
        "devices": devices,
        "results": results,
        "average_bus_bandwidth": _average_busbw(results),
        "world_size": world_size,
        "backend": backend,
        "versions": _versions(torch),
        "started": begun,
        "duration_s": time.time() - begun,
        "timing": f"host clock around {args.iters} back-to-back ops, then device synchronize",
    }
    if unsupported:
        result["unsupported"] = f"{collective} is not supported by {backend}: {unsupported}"
    return result


def _average_busbw(results: list[dict]) -> float | None:
    """The plain mean of busbw over every block printed (out of place and in place), as
    nccl-tests' "Avg bus bandwidth"."""
    values = [
        place["bus_bw"]
        for row in results
        for place in (row.get("out_of_place"), row.get("in_place"))
        if place is not None and place.get("bus_bw") is not None
    ]
    return sum(values) / len(values) if values else None


def _versions(torch) -> dict:
    nccl = None
    try:
        if torch.cuda.is_available():
            nccl = ".".join(map(str, torch.cuda.nccl.version()))
    except (AttributeError, RuntimeError):
        nccl = None
    return {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl}


# --- nccl-tests table (kept here so the worker stays one file; nccltests.py re-exports) ---

_GROUP_HEADER = "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place          "
_COLUMNS = (
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    "     time   algbw   busbw  #wrong "
)
_UNITS = (
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
    "     (us)  (GB/s)  (GB/s)         "
)


def _fmt_time(microseconds: float | None) -> str:
    """nccl-tests' BenchTime: %7.0f from 10000 us, %7.1f from 100 us, else %7.2f."""
    if microseconds is None:
        return f"{'N/A':>7}"
    if microseconds >= 10000:
        return f"{microseconds:7.0f}"
    return f"{microseconds:7.1f}" if microseconds >= 100 else f"{microseconds:7.2f}"


def _fmt_bw(value: float | None) -> str:
    return f"{'N/A':>6}" if value is None else f"{value:6.2f}"


def _fmt_place(place: dict | None) -> str:
    if place is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    wrong = "N/A" if place["nwrong"] is None or place["nwrong"] < 0 else str(place["nwrong"])
    time_ = _fmt_time(place["time"])
    algbw, busbw = _fmt_bw(place["alg_bw"]), _fmt_bw(place["bus_bw"])
    return f"  {time_}  {algbw}  {busbw}  {wrong:>6}"


def collective_results(result: dict) -> list:
    """Every collective's result of a run: the first is the top-level one."""
    return [result, *result.get("more_collectives", [])]


def format_tables(result: dict) -> str:
    """One nccl-tests report per collective measured, one after the other, as a script
    running all_reduce_perf then all_gather_perf prints them."""
    return "".join(format_table(one) for one in collective_results(result))


def format_table(result: dict) -> str:
    """The nccl-tests `<collective>_perf` report of one collective's result (worker JSON)."""
    config = result["config"]
    title = config.get("collective") or "all_reduce_perf"
    versions = result.get("versions", {})
    lines = [
        f"# nccl-tests compatible output: clusterkit bench {VERSION}, "
        f"torch {versions.get('torch')}, backend {result.get('backend')}, "
        f"nccl {versions.get('nccl') or 'n/a'}",
        f"# Collective test starting: {title}",
        f"# nThread {config['nThread']} nGpus {config['nGpus']} minBytes {config['minBytes']} "
        f"maxBytes {config['maxBytes']} step: {config['stepFactor']}(factor) "
        f"warmup iters: {config['warmupIters']} iters: {config['iters']} agg iters: 1 "
        f"validation: {config['validation']} graph: 0",
        "#",
        "# Using devices",
    ]
    for device in result["devices"]:
        lines.append(
            f"#  Rank {device['rank']:2d} Group  0 Pid {device.get('pid', 0):6d} on "
            f"{device['host']:>10} device {device['device']:2d} [{device['bus_id']}] "
            f"{device['name']}"
        )
    if result.get("unsupported"):
        lines += [f"# {result['unsupported']}", "#", f"# Collective test concluded: {title}", "#"]
        return "\n".join(lines) + "\n"
    lines += ["#", _GROUP_HEADER, _COLUMNS, _UNITS]
    wrong_total = 0
    for row in result["results"]:
        lines.append(
            f"{row['size']:12d}  {row['count']:12d}  {row['type']:>8}  "
            f"{row.get('redop', 'sum'):>6}  {row.get('root', -1):6d}"
            + _fmt_place(row.get("out_of_place"))
            + _fmt_place(row.get("in_place"))
        )
        for place in (row.get("out_of_place"), row.get("in_place")):
            nwrong = (place or {}).get("nwrong")
            wrong_total += nwrong if nwrong and nwrong > 0 else 0
    average = result.get("average_bus_bandwidth")
    lines += [
        f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {'N/A' if average is None else format(average, 'g')} ",
        "#",
        f"# Collective test concluded: {title}",
        "#",
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Script entry: run, print the table and JSON on rank 0, map failures to exit codes."""
    frame = "--frame" in (argv if argv is not None else sys.argv[1:])
    try:
        result = run(argv)
    except BenchError as error:
        _log(f"error {error.kind}: {error}")
        if frame and (_env_int("LOCAL_RANK") or 0) == 0:
            rank = _env_int("RANK")
            payload = {"error": {"kind": str(error.kind), "message": str(error), "rank": rank}}
            sys.stdout.write(FRAME_BEGIN + json.dumps(payload) + FRAME_END)
            sys.stdout.flush()
        return error.exit_code
    except SystemExit:
        raise
    except Exception as error:
        _log(f"error rank-failed: rank {os.environ.get('RANK')}: {error}")
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
