"""The `clusterkit` inventory variable -> ClusterSettings, every key typed and checked at load.

Ansible ignores a variable it does not use, so clusterkit's own settings live in one variable
named `clusterkit`. It is resolved per host like any variable and must come out the same on
every host: one cluster, one set of settings.

Each section is a frozen dataclass (inventory/model.py) and a table of rules here, one per
field. A value that breaks its rule, or a key no rule knows, is an InventoryError naming the
file, the line, the key path and what is allowed, before any host is contacted.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import fields
from typing import Any, NoReturn, TypeVar

from clusterkit.errors import InventoryError
from clusterkit.inventory.graph import Origin
from clusterkit.inventory.model import (
    BenchSettings,
    ClusterSettings,
    CostSettings,
    Expectations,
    NetworkSettings,
    ProbeSettings,
    SlurmSettings,
)
from clusterkit.inventory.yamlfile import LineMap
from clusterkit.node.bench_common import COLLECTIVES, DTYPES, parse_size
from clusterkit.settings.rules import (
    PORT,
    Invalid,
    Rule,
    absolute_path,
    boolean,
    choice,
    constraint,
    fraction,
    hazard,
    integer,
    interface,
    list_of,
    number,
    number_or_off,
    preempt_rate,
    size,
    srun_option,
    text,
)

VARIABLE = "clusterkit"

# --- the model: one rule per field of each section --------------------------------------------

_VERSION_RULES: dict[str, Rule] = {
    name: constraint for name in ("driver", "cuda", "torch", "nccl", "python")
}
EXPECT_RULES: dict[str, Rule] = {
    "gpus_per_node": integer(0, 1024),
    **_VERSION_RULES,
    "ib_ports": integer(0, 64),
    "ib_rate_gbps": number(above=0, unit="Gb/s"),
}

BENCH_RULES: dict[str, Rule] = {
    "minbytes": size,
    "maxbytes": size,
    "stepfactor": integer(1, 1024),
    "iters": integer(1, 1_000_000),
    "warmup_iters": integer(0, 1_000_000),
    "datatype": choice(*DTYPES),
    "gate_size": size,
    "min_busbw": number(above=0, unit="GB/s"),
    "timeout": number(above=0, unit="seconds"),
    "join_timeout": number(above=0, unit="seconds"),
    "find_slow": boolean,
    "find_slow_group": integer(2, 64),
    "find_slow_bytes": size,
    "find_slow_fraction": fraction,
    "find_slow_rounds": integer(2, 64),
    "find_slow_seconds": number(above=0, unit="seconds"),
    "find_slow_status": choice("warn", "fail"),
    "collectives": list_of(choice(*COLLECTIVES), ", ".join(COLLECTIVES)),
}

NETWORK_RULES: dict[str, Rule] = {
    "extra_ports": list_of(PORT, "TCP ports 1..65535"),
    "connect_timeout": number(above=0, unit="seconds"),
    "mesh": choice("full", "auto"),
    "full_mesh_up_to": integer(2, 100_000),
}

PROBE_RULES: dict[str, Rule] = {
    "timeout": number(above=0, unit="seconds"),
    "import_torch": boolean,
}

_MINUTES = number(low=0, unit="minutes")
COST_RULES: dict[str, Rule] = {
    "instance": text,
    "region": text,
    "gpus_per_node": integer(1, 1024),
    "hours": number(above=0, unit="hours"),
    "checkpoint_min": _MINUTES,
    "restart_min": _MINUTES,
    "preempt_rate": preempt_rate,
    "trace": text,
    "correlation": number(low=1, unit="nodes per event"),
    "capacity_wait_median": number_or_off("hours"),
    "capacity_wait_mean": number_or_off("hours"),
    "hardware_rate": number(low=0, unit="failures per node-hour"),
    "on_demand_price": number(above=0, unit="USD per node-hour"),
    "spot_price": number(above=0, unit="USD per node-hour"),
    "deadline": number(above=0, unit="hours"),
    "interval": number(above=0, unit="minutes"),
    "hazard": hazard,
    "catalog": text,
    "max_price_age_days": number(low=0, unit="days"),
}

SLURM_RULES: dict[str, Rule] = {
    "srun_args": list_of(srun_option, "srun options (--name or --name=value)"),
}

SECTIONS: dict[str, tuple[type, dict[str, Rule]]] = {
    "expect": (Expectations, EXPECT_RULES),
    "bench": (BenchSettings, BENCH_RULES),
    "network": (NetworkSettings, NETWORK_RULES),
    "probe": (ProbeSettings, PROBE_RULES),
    "cost": (CostSettings, COST_RULES),
    "slurm": (SlurmSettings, SLURM_RULES),
}

TOP_RULES: dict[str, Rule] = {
    "master": text,
    "master_port": PORT,
    "rdzv_port": PORT,
    "interface": interface,
    "image": text,
    "image_run_args": list_of(text, "docker run arguments (strings)"),
    "gpu_busy_mib": integer(0, 10_000_000),
    "shared_paths": list_of(absolute_path, "absolute paths"),
    "dcgm_level": integer(1, 3),
}
TOP_KEYS = (*TOP_RULES, *SECTIONS)

# --- reading ----------------------------------------------------------------------------------

T = TypeVar("T")


class _Reader:
    """Reads one `clusterkit` mapping; errors name the file, the key path and its line."""

    def __init__(self, origin: Origin) -> None:
        self.path, self.line = origin

    def fail(self, key: str, problem: str, line: int | None, hint: str | None = None) -> NoReturn:
        raise InventoryError(self.path, problem, line=line or self.line, key=key, hint=hint)

    def mapping(self, key: str, value: Any, allowed: tuple[str, ...]) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            self.fail(key, f"must be a mapping, got {type(value).__name__}", _line(value))
        for name in value:
            if name not in allowed:
                close = difflib.get_close_matches(str(name), allowed, n=1)
                hint = (
                    f"did you mean {key}.{close[0]}?" if close else f"known: {', '.join(allowed)}"
                )
                self.fail(f"{key}.{name}", "unknown key", _key_line(value, name), hint=hint)
        return value

    def values(self, key: str, parent: Mapping[str, Any], rules: dict[str, Rule]) -> dict[str, Any]:
        """Each key of `parent` that has a value, through its rule."""
        typed: dict[str, Any] = {}
        for name, rule in rules.items():
            value = parent.get(name)
            if value is None:
                continue
            try:
                typed[name] = rule(value)
            except Invalid as error:
                self.fail(f"{key}.{name}", error.problem, _key_line(parent, name), error.hint)
        return typed

    def section(self, key: str, value: Any, model: type[T], rules: dict[str, Rule]) -> T:
        parent = self.mapping(key, value, tuple(rules))
        return model(**self.values(key, parent, rules))


def _line(value: Any) -> int | None:
    return value.line if isinstance(value, LineMap) else None


def _key_line(mapping: Mapping[str, Any], key: str) -> int | None:
    return mapping.line_of(key) if isinstance(mapping, LineMap) else None


def _check_bench(reader: _Reader, bench: BenchSettings, value: Any) -> None:
    """Rules that join two bench keys."""
    if parse_size(bench.minbytes) > parse_size(bench.maxbytes):
        where = _key_line(value, "minbytes") if isinstance(value, Mapping) else None
        reader.fail(
            f"{VARIABLE}.bench.minbytes",
            f"{bench.minbytes} is larger than maxbytes {bench.maxbytes}",
            where,
        )


def parse_settings(value: Any, origin: Origin) -> ClusterSettings:
    """ClusterSettings from the resolved `clusterkit` variable (None: all defaults)."""
    reader = _Reader(origin)
    top = reader.mapping(VARIABLE, value, TOP_KEYS)
    sections: dict[str, Any] = {
        name: reader.section(f"{VARIABLE}.{name}", top.get(name), model, rules)
        for name, (model, rules) in SECTIONS.items()
    }
    _check_bench(reader, sections["bench"], top.get("bench"))
    return ClusterSettings(**reader.values(VARIABLE, top, TOP_RULES), **sections)


def field_names(model: type) -> set[str]:
    """The fields of a settings dataclass (a test holds every rule table to its model)."""
    return {f.name for f in fields(model)}
