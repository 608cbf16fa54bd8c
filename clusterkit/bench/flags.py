"""`clusterkit bench`'s sweep and run flags, as plain values, and the launcher's options they
make (checked here, before any connection: one-line usage errors naming the flag)."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

from clusterkit.bench.options import BenchOptions
from clusterkit.errors import UsageError
from clusterkit.inventory.model import BenchSettings
from clusterkit.node.bench_common import DTYPES, parse_collectives, parse_size

T = TypeVar("T")


@dataclass(frozen=True)
class BenchFlags:
    """The sweep and the run as `clusterkit bench` asks for them (None: the inventory's
    clusterkit.bench, else its default)."""

    # the sweep (nccl-tests *_perf flags)
    minbytes: str | None = None
    maxbytes: str | None = None
    stepfactor: int | None = None
    iters: int | None = None
    warmup_iters: int | None = None
    validate: int = 1
    datatype: str | None = None
    collective: str | None = None
    # the run
    backend: str = "auto"
    nproc_per_node: int | None = None
    gate_size: str | None = None
    master_port: int | None = None
    image: str | None = None
    timeout: float | None = None
    join_timeout: float | None = None
    find_slow: bool | None = None
    per_node: bool = False
    group_size: int | None = None
    min_busbw: float | None = None


def bench_timeout(request: BenchFlags, settings: BenchSettings) -> float:
    """--timeout, else clusterkit.bench.timeout (whose default is the documented one)."""
    return settings.timeout if request.timeout is None else request.timeout


def bench_options(
    request: BenchFlags,
    settings: BenchSettings,
    facts: Mapping[str, Mapping[str, Any]],
    environ: Mapping[str, str] = types.MappingProxyType({}),
) -> BenchOptions:
    """Validate the sweep flags (one-line usage errors) and build the launcher's options:
    flags over the inventory's `clusterkit.bench`, over its defaults. `environ` holds the
    variables the run was started with (none given: none)."""
    _parsed("-b", parse_size, request.minbytes)
    _parsed("-e", parse_size, request.maxbytes)
    gate_size = _parsed("--gate-size", parse_size, request.gate_size or None)
    if request.group_size is not None and request.group_size < 2:
        raise UsageError(f"bench --group-size: at least 2 nodes, not {request.group_size}")
    collectives = _parsed(
        "--collective", lambda text: tuple(parse_collectives(text)), request.collective
    )
    if request.per_node and (request.nproc_per_node or 1) < 2:
        raise UsageError(
            f"bench --per-node: needs --nproc-per-node 2 or more, not {request.nproc_per_node or 1}"
            " (one rank on a node alone has no bus bandwidth)"
        )
    if request.datatype is not None and request.datatype not in DTYPES:
        raise UsageError(
            f"bench -d: unknown type {request.datatype!r} ({', '.join(sorted(DTYPES))})"
        )
    options = BenchOptions.from_settings(
        settings,
        minbytes=request.minbytes,
        maxbytes=request.maxbytes,
        stepfactor=request.stepfactor,
        iters=request.iters,
        warmup_iters=request.warmup_iters,
        check=request.validate,
        datatype=request.datatype,
        backend=request.backend,
        collectives=collectives,
        nproc_per_node=request.nproc_per_node,
        gate_size=gate_size,
        min_busbw=request.min_busbw,
        join_timeout=request.join_timeout,
        master_port=request.master_port,
        image=request.image,
        find_slow=request.find_slow,
        find_slow_group=request.group_size,
        per_node=request.per_node or None,
        environ=dict(environ),
        facts=facts,
    )
    if parse_size(options.minbytes) > parse_size(options.maxbytes):
        raise UsageError(
            f"clusterkit bench: the smallest size {options.minbytes} (-b) is larger than "
            f"the largest {options.maxbytes} (-e)"
        )
    return replace(
        options, join_timeout=min(options.join_timeout, bench_timeout(request, settings))
    )


def _parsed(flag: str, parse: Callable[[str], T], value: str | None) -> T | None:
    """`parse(value)`, its ValueError as a one-line usage error naming the flag; None unset."""
    if value is None:
        return None
    try:
        return parse(value)
    except ValueError as error:
        raise UsageError(f"bench {flag}: {error}") from None
