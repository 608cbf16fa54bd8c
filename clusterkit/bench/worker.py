"""All-reduce bandwidth worker: one rank of `clusterkit bench`, started by torchrun.

This file is shipped alone to nodes that may not have clusterkit installed: it needs only
torch and the standard library, runs as a script (`torchrun ... worker.py -b 1M -e 1G`) and
is importable (`clusterkit.bench.worker`). It must stay Python 3.8 compatible: no runtime
use of 3.10 syntax. Rank 0 prints the nccl-tests `all_reduce_perf` table on stdout and
the result as JSON (between framing markers with --frame, into a file with -J).

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


def bus_factor(ranks: int) -> float:
    """all_reduce bus bandwidth factor 2(n-1)/n: 0 for one rank, which nccl-tests prints as
    0.00 (the gate treats a one-rank run as "does not apply", see gate.evaluate)."""
    return 2.0 * (ranks - 1) / ranks if ranks > 0 else 0.0


def bandwidths(size_bytes: int, seconds: float, ranks: int) -> tuple[float, float]:
    """(algbw, busbw) in GB/s (1e9), as nccl-tests: algbw = S/t, busbw = algbw*2(n-1)/n."""
    algbw = size_bytes / seconds / 1e9 if seconds > 0 else 0.0
    return algbw, algbw * bus_factor(ranks)


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


def _wrong(torch, dist, backend, op, source, result, rank, expected, dtype):
    """Elements of `result` that differ from n(n+1)/2 after reducing rank+1 everywhere."""
    source.fill_(rank + 1)
    op()
    _synchronize(torch, backend)
    target = torch.tensor(expected, device=result.device).to(dtype)
    return int((result != target).sum().item())


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


def _measure(torch, dist, backend, sizes, dtype, elem_bytes, args, rank, world_size, group):
    """Per size: warm up, then time and check the out-of-place and the in-place all_reduce.
    Returns this rank's {"out_of_place", "in_place"} -> (seconds per op, wrong elements),
    one entry per size (wrong is -1 when not checked). With --fill each timed block runs as
    many ops as fill that many seconds (see _fill_iters) instead of -n."""
    device = torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else None
    expected = world_size * (world_size + 1) // 2
    measured: dict[str, tuple[list[float], list[int]]] = {
        "out_of_place": ([], []),
        "in_place": ([], []),
    }
    for size in sizes:
        count = size // elem_bytes
        source = torch.zeros(count, dtype=dtype, device=device)
        output = torch.zeros(count, dtype=dtype, device=device)

        def in_place(buffer=source):
            dist.all_reduce(buffer)

        def out_of_place(source=source, output=output):
            output.copy_(source)
            dist.all_reduce(output)

        for _ in range(args.warmup_iters):
            in_place()
        for place, op, result in (
            ("out_of_place", out_of_place, output),
            ("in_place", in_place, source),
        ):
            times, wrong = measured[place]
            source.zero_()  # a sum of zeros stays finite however many ops run
            iters = args.iters
            if args.fill:
                iters = _fill_iters(torch, dist, backend, op, iters, args.fill, group)
            times.append(_timed(torch, dist, backend, op, iters))
            if args.check:
                wrong.append(
                    _wrong(torch, dist, backend, op, source, result, rank, expected, dtype)
                )
            else:
                wrong.append(-1)
        del source, output
    return measured


def _place(size: int, times: list[float], wrongs: list[int], world_size: int) -> dict:
    """One block of an nccl-tests row: the ranks' mean time (nccl-tests' default -a 1)."""
    mean_time = sum(times) / len(times)
    algbw, busbw = bandwidths(size, mean_time, world_size)
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
) -> list[dict]:
    """One nccl-tests JSON result per size, with the slowest rank's view (in place) added.
    per_rank_*: [rank][size] seconds per op and wrong elements, in place; the out-of-place
    pair likewise (out_of_place is None when it was not measured)."""
    results = []
    for index, size in enumerate(sizes):
        times = [rank_times[index] for rank_times in per_rank_times]
        slowest = max(range(len(times)), key=lambda r: times[r])
        slow_algbw, slow_busbw = bandwidths(size, times[slowest], world_size)
        wrongs = [rank_wrong[index] for rank_wrong in per_rank_wrong]
        out_of_place = None
        if per_rank_oop_times is not None and per_rank_oop_wrong is not None:
            out_of_place = _place(
                size,
                [rank_times[index] for rank_times in per_rank_oop_times],
                [rank_wrong[index] for rank_wrong in per_rank_oop_wrong],
                world_size,
            )
        results.append(
            {
                "size": size,
                "count": size // elem_bytes,
                "type": datatype,
                "redop": "sum",
                "root": -1,
                "out_of_place": out_of_place,
                "in_place": _place(size, times, wrongs, world_size),
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

    import torch
    import torch.distributed as dist

    backend = args.backend
    if backend == "auto":
        backend = "nccl" if torch.cuda.is_available() and dist.is_nccl_available() else "gloo"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
    host = socket.gethostname()
    started = time.time()
    control = _join(dist, backend, rank, world_size, args.join_timeout)
    _log(f"rank {rank} joined on {host} (world size {world_size}, backend {backend})")

    me = dict(_device_info(torch, backend, local_rank), rank=rank, host=host, pid=os.getpid())
    devices = _gather_json(torch, dist, me, world_size, control)
    if args.barrier_dir:
        _await_go(dist, control, rank, args.barrier_dir, args.barrier_timeout)
    try:
        dtype = getattr(torch, torch_name)
        measured = _measure(
            torch, dist, backend, sizes, dtype, elem_bytes, args, rank, world_size, control
        )
    except RuntimeError as error:
        raise BenchError("rank-failed", f"rank {rank} on {host}: {error}") from None
    gathered = _gather_json(torch, dist, measured, world_size, control)
    dist.destroy_process_group()
    if rank != 0:
        return None
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
    )
    return {
        "config": {
            "collective": "all_reduce_perf",
            "minBytes": sizes[0],
            "maxBytes": sizes[-1],
            "stepFactor": args.stepfactor,
            "warmupIters": args.warmup_iters,
            "iters": args.iters,
            "aggIters": 1,
            "validation": args.check,
            "datatype": args.datatype,
            "op": "sum",
            "nThread": 1,
            "nGpus": 1,
            "out_of_place": "input copied into a separate output buffer, then reduced",
            "fill_seconds": args.fill or None,
        },
        "devices": devices,
        "results": results,
        "average_bus_bandwidth": _average_busbw(results),
        "world_size": world_size,
        "backend": backend,
        "versions": _versions(torch),
        "started": started,
        "duration_s": time.time() - started,
        "timing": f"host clock around {args.iters} back-to-back ops, then device synchronize",
    }


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


def format_table(result: dict) -> str:
    """The nccl-tests all_reduce_perf report for a result dict (worker JSON)."""
    config = result["config"]
    versions = result.get("versions", {})
    lines = [
        f"# nccl-tests compatible output: clusterkit bench {VERSION}, "
        f"torch {versions.get('torch')}, backend {result.get('backend')}, "
        f"nccl {versions.get('nccl') or 'n/a'}",
        "# Collective test starting: all_reduce_perf",
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
    lines += ["#", _GROUP_HEADER, _COLUMNS, _UNITS]
    wrong_total = 0
    for row in result["results"]:
        lines.append(
            f"{row['size']:12d}  {row['count']:12d}  {row['type']:>8}  {'sum':>6}  {-1:6d}"
            + _fmt_place(row.get("out_of_place"))
            + _fmt_place(row.get("in_place"))
        )
        for place in (row.get("out_of_place"), row["in_place"]):
            nwrong = (place or {}).get("nwrong")
            wrong_total += nwrong if nwrong and nwrong > 0 else 0
    average = result.get("average_bus_bandwidth")
    lines += [
        f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {'N/A' if average is None else format(average, 'g')} ",
        "#",
        "# Collective test concluded: all_reduce_perf",
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
    sys.stdout.write(format_table(result))
    args = build_parser().parse_args(argv)
    if args.output_file:
        with open(args.output_file, "w") as handle:
            json.dump(result, handle, indent=1)
    if frame:
        sys.stdout.write(FRAME_BEGIN + json.dumps(result) + FRAME_END)
    sys.stdout.flush()
    wrong = sum(
        max(0, (place or {}).get("nwrong") or 0)
        for r in result["results"]
        for place in (r.get("out_of_place"), r["in_place"])
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
