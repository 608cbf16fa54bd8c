"""What the bench worker (clusterkit/node/bench_worker.py) reports, typed: rank 0's result,
nccl-tests' JSON with the slowest rank's view added, or its error report.

A node is not trusted: the frame it prints is checked against these types where it arrives
(`parse_frame`, called by bench/attribution.py), so a result of another shape, an unknown
key included, fails that node with the path of the first bad value (as a node that sent no
result does), and the gate reads typed results: a renamed key is a mypy error, not a gate
that silently skips. The worker ships with the control side, so there is no version to
skew; change its output and these types change with it (tests/unit/bench/test_bench_torchrun.py
runs the real worker's result through them, test_bench_results.py a recorded one).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TypedDict, TypeVar, cast, final

from clusterkit.shape import shape_problem


class MalformedResult(ValueError):
    """A worker's frame does not have this shape; the message names where."""


class Config(TypedDict):
    """The run's settings, under nccl-tests' names."""

    collective: str  # "all_reduce_perf", "all_gather_perf", ...
    minBytes: int
    maxBytes: int
    stepFactor: int
    warmupIters: int
    iters: int
    aggIters: int
    validation: int  # 0: the data was not checked (-c 0)
    datatype: str
    op: str
    nThread: int
    nGpus: int
    out_of_place: str
    fill_seconds: float | None  # each timed block filled this long (--fill), else None


class Device(TypedDict):
    """One rank's device, as `# Using devices` lists it."""

    device: int
    bus_id: str  # PCI bus id, or "cpu"
    name: str
    rank: int
    host: str
    pid: int


class Place(TypedDict):
    """One block of a row (out of place or in place): the ranks' mean time."""

    time: float  # microseconds per op
    alg_bw: float  # GB/s
    bus_bw: float
    nwrong: int  # wrong elements; -1: not checked


class Slowest(TypedDict):
    """The slowest rank's view of a row: what the gate reads."""

    rank: int
    host: str
    time: float
    alg_bw: float
    bus_bw: float


class Row(TypedDict):
    """One swept size, an nccl-tests row."""

    size: int  # bytes, the whole buffer
    count: int  # elements
    type: str
    redop: str
    root: int
    out_of_place: Place | None
    in_place: Place | None  # None: not measured (alltoall)
    slowest: Slowest
    rank_times_us: list[float]  # every rank's time per op, by rank


class Versions(TypedDict):
    torch: str
    cuda: str | None
    nccl: str | None


class GateVerdict(TypedDict):
    """The gate applied to one collective (gate.Verdict.to_dict): set by the control side."""

    passed: bool | None
    size: int
    bus_bw: float | None
    mean_bus_bw: float | None
    slowest_rank: int
    slowest_host: str
    threshold: float | None
    threshold_source: str
    threshold_detail: str
    reason: str


class _Measured(TypedDict):
    config: Config
    devices: list[Device]
    results: list[Row]  # empty when the collective was not measured (`unsupported`)
    average_bus_bandwidth: float | None
    world_size: int
    backend: str  # "nccl" or "gloo"
    versions: Versions
    started: float  # epoch seconds
    duration_s: float
    timing: str


class CollectiveResult(_Measured, total=False):
    """One collective's result."""

    unsupported: str  # why the backend could not run it
    gate: GateVerdict  # added by the gate here, never sent by the worker (parse_frame)


@final  # no other keys: `"error" in frame` tells a result from an ErrorReport
class BenchResult(CollectiveResult, total=False):
    """Rank 0's result: the first collective's, the others after it."""

    more_collectives: list[CollectiveResult]


class WorkerError(TypedDict):
    kind: str  # world-size, join, rank-failed, usage
    message: str
    rank: int | None


@final
class ErrorReport(TypedDict):
    """What rank 0 prints instead of a result when the run could not be done."""

    error: WorkerError


def parse_frame(raw: object) -> BenchResult | ErrorReport:
    """A worker's frame, checked: its result or its error report; MalformedResult naming
    the first bad value."""
    if isinstance(raw, dict) and "error" in raw:
        return _checked(raw, ErrorReport)
    return parse_result(raw)


def parse_result(raw: object) -> BenchResult:
    """A worker's result, checked: MalformedResult naming the first bad value."""
    result = _checked(raw, BenchResult)
    for path, one in _paths(result):
        if "gate" in one:
            raise MalformedResult(f"{path}: unknown key 'gate'")  # the gate's, not the node's
    return result


def collectives(result: BenchResult) -> list[CollectiveResult]:
    """Every collective's result of a run: the first is the top-level one."""
    return [result, *result.get("more_collectives", [])]


def wrong_elements(row: Row) -> int:
    """Wrong elements of one size, out of place and in place (a block may be absent)."""
    places = (row["out_of_place"], row["in_place"])
    return sum(max(0, place["nwrong"]) for place in places if place is not None)


_Frame = TypeVar("_Frame", BenchResult, ErrorReport)


def _checked(raw: object, shape: type[_Frame]) -> _Frame:
    problem = shape_problem(raw, shape, "bench")
    if problem is not None:
        raise MalformedResult(problem)
    return cast(_Frame, raw)


def _paths(result: BenchResult) -> Iterator[tuple[str, CollectiveResult]]:
    yield "bench", result
    for index, one in enumerate(result.get("more_collectives", [])):
        yield f"bench.more_collectives[{index}]", one
