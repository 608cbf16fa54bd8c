"""Results of the bench worker (clusterkit/node/bench_worker.py) for unit tests: built by the
worker's own rank-0 code from the timings a test chooses, and checked by the control side's
parser on the way out (clusterkit/bench/results.py), so a test cannot feed the gate a result
no worker could send."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from clusterkit.bench.results import parse_result
from clusterkit.node import bench_result, bench_worker

# A real run: 3 gloo ranks on one machine, all four collectives, 64K to 1M by 4
# (`torchrun --nproc-per-node 3 bench_worker.py -b 64K -e 1M -f 4 -n 3 -w 1
# --collective all_reduce,all_gather,reduce_scatter,alltoall -J ...`).
RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "bench" / "result-gloo-3ranks.json"
# What the worker reads off torch for `versions` on a CPU-only build.
_TORCH = SimpleNamespace(
    __version__="2.5.1+cpu", version=SimpleNamespace(cuda=None), cuda=SimpleNamespace(
        is_available=lambda: False
    )
)  # fmt: skip


def recorded() -> Any:
    """The recorded run's result, as the control side decodes it."""
    return json.loads(RECORDED.read_text())


def worker_result(
    times: Sequence[Sequence[float]],
    *,
    sizes: Sequence[int] = (64 * 1024**2,),
    collective: str = "all_reduce",
    wrong: Sequence[Sequence[int]] | None = None,
    hosts: Sequence[str] | None = None,
) -> Any:
    """One collective's result as rank 0 builds it: `times[rank][size]` seconds per op (the
    same in and out of place), `wrong` elements likewise (none by default), rank r on
    `hosts[r]` (node1, node2, ... by default). Through JSON, as it arrives."""
    ranks = len(times)
    hosts = hosts or [f"node{rank + 1}" for rank in range(ranks)]
    wrong = wrong or [[0] * len(sizes) for _ in range(ranks)]
    devices = [
        {"device": 0, "bus_id": "cpu", "name": "CPU x86_64", "rank": r, "host": hosts[r],
         "pid": 1000 + r}
        for r in range(ranks)
    ]  # fmt: skip
    alltoall = collective == "alltoall"  # no in-place block
    gathered = [
        {"in_place": ([], []) if alltoall else (times[r], wrong[r]),
         "out_of_place": (times[r], wrong[r])}
        for r in range(ranks)
    ]  # fmt: skip
    args = bench_worker.build_parser().parse_args(["--collective", collective])
    context = (list(sizes), args, 4, ranks, devices, "gloo", _TORCH, 1.7e9)
    result = json.loads(
        json.dumps(bench_result.collective_result(collective, gathered, "", context))
    )
    assert parse_result(result) == result
    return result
