"""What one bench run is asked to do: the sweep, the gate and how it is launched.

Its own module because both the launcher (which runs the sweep) and the attribution (which
judges it) read the options, and the launcher uses the attribution.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from clusterkit.facts import FactsByHost
from clusterkit.inventory.model import BenchSettings
from clusterkit.node.bench_common import parse_size


@dataclass(frozen=True)
class BenchOptions:
    """Sweep (nccl-tests flags), gate and launch settings; defaults from BenchSettings."""

    minbytes: str = BenchSettings.minbytes
    maxbytes: str = BenchSettings.maxbytes
    stepfactor: int = BenchSettings.stepfactor
    iters: int = BenchSettings.iters
    warmup_iters: int = BenchSettings.warmup_iters
    check: int = 1
    datatype: str = BenchSettings.datatype
    backend: str = "auto"
    collectives: tuple[str, ...] = BenchSettings.collectives
    nproc_per_node: int | None = None  # None: expect.gpus_per_node, probe facts, else 1
    gate_size: int | None = None  # None: the largest size measured
    min_busbw: float | None = None  # None: NCCL_TESTS_MIN_BW, clusterkit.bench, fabric
    join_timeout: float = BenchSettings.join_timeout
    master_addr: str | None = None  # None: the inventory master's address
    master_port: int | None = None  # None: clusterkit.master_port
    image: str | None = None  # None: clusterkit.image; "" forces the node interpreter
    find_slow: bool = BenchSettings.find_slow  # groups in rounds after the global run
    per_node: bool = False  # every node alone after the global run (bench/pernode.py)
    find_slow_group: int = BenchSettings.find_slow_group
    find_slow_bytes: str | None = None  # None: maxbytes
    find_slow_fraction: float = BenchSettings.find_slow_fraction
    find_slow_rounds: int | None = None  # None: pairing.default_rounds
    find_slow_seconds: float = BenchSettings.find_slow_seconds
    find_slow_status: str = BenchSettings.find_slow_status
    environ: Mapping[str, str] = field(default_factory=lambda: dict(os.environ))
    facts: FactsByHost = field(default_factory=dict)

    @classmethod
    def from_settings(cls, settings: BenchSettings, **given: Any) -> BenchOptions:
        """The inventory's `clusterkit.bench` with what was given (flags) on top; None in
        `given` means not given. Ranks never wait for each other past the run's deadline."""
        chosen = {
            "minbytes": settings.minbytes,
            "maxbytes": settings.maxbytes,
            "stepfactor": settings.stepfactor,
            "iters": settings.iters,
            "warmup_iters": settings.warmup_iters,
            "datatype": settings.datatype,
            "gate_size": parse_size(settings.gate_size) if settings.gate_size else None,
            "join_timeout": min(settings.join_timeout, settings.timeout),
            "find_slow": settings.find_slow,
            "find_slow_group": settings.find_slow_group,
            "find_slow_bytes": settings.find_slow_bytes,
            "find_slow_fraction": settings.find_slow_fraction,
            "find_slow_rounds": settings.find_slow_rounds,
            "find_slow_seconds": settings.find_slow_seconds,
            "find_slow_status": settings.find_slow_status,
            "collectives": settings.collectives,
            **{name: value for name, value in given.items() if value is not None},
        }
        return cls(**chosen)
