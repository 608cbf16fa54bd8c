"""The bench result as rank 0 assembles it: per collective, per size, the slowest rank's
time and bandwidths, with the versions that measured them.
"""

from __future__ import annotations

import time

from clusterkit.node.bench_common import COLLECTIVES, bandwidths, row_shape
from clusterkit.node.bench_measure import place_of


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
            in_place = place_of(size, times, wrongs, world_size, collective)
        if per_rank_oop_times is not None and per_rank_oop_wrong is not None:
            oop_times = [rank_times[index] for rank_times in per_rank_oop_times]
            oop_wrongs = [rank_wrong[index] for rank_wrong in per_rank_oop_wrong]
            out_of_place = place_of(size, oop_times, oop_wrongs, world_size, collective)
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


def collective_result(collective: str, gathered: list, unsupported: str, context) -> dict:
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
