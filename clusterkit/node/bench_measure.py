"""The timing loop: buffers per collective, each size warmed up then timed around
back-to-back calls and a synchronize (out of place and in place), results checked.
"""

from __future__ import annotations

import time

from clusterkit.node.bench_common import bandwidths, row_shape
from clusterkit.node.bench_rendezvous import synchronize


def _timed(torch, dist, backend, op, iters):
    """Seconds per op: one untimed op and a barrier, then `iters` back-to-back ops and a
    device synchronize inside a host clock (nccl-tests' BenchTime)."""
    op()
    synchronize(torch, backend)
    dist.barrier()
    synchronize(torch, backend)
    start = time.perf_counter()
    for _ in range(iters):
        op()
    synchronize(torch, backend)
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
    synchronize(torch, backend)
    return expect()


def _supported(torch, dist, backend, op, group) -> str:
    """ "" when every rank could run `op`, else why not: a backend without the collective
    (older gloo has no reduce_scatter) raises on every rank; all ranks agree on it."""
    reason = ""
    try:
        op()
        synchronize(torch, backend)
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


def measure(
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


def place_of(
    size: int, times: list[float], wrongs: list[int], world_size: int, collective: str
) -> dict:
    """One block of an nccl-tests row: the ranks' mean time (nccl-tests' default -a 1)."""
    mean_time = sum(times) / len(times)
    algbw, busbw = bandwidths(size, mean_time, world_size, collective)
    nwrong = -1 if any(w < 0 for w in wrongs) else sum(wrongs)
    return {"time": mean_time * 1e6, "alg_bw": algbw, "bus_bw": busbw, "nwrong": nwrong}
