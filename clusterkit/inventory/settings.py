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
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import Any, NoReturn, TypeVar

from clusterkit.bench.worker import COLLECTIVES, DTYPES, parse_size
from clusterkit.cost.rates import ADVISOR_BUCKETS
from clusterkit.cost.scenario import HAZARDS, Hazard
from clusterkit.errors import InventoryError, UsageError
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
from clusterkit.inventory.yamlfile import LineMap, is_template
from clusterkit.versions import Constraint

VARIABLE = "clusterkit"


class Invalid(Exception):
    """A value that breaks its rule: what is wrong, and optionally what to write instead."""

    def __init__(self, problem: str, hint: str | None = None) -> None:
        super().__init__(problem)
        self.problem, self.hint = problem, hint


Rule = Callable[[Any], Any]  # raw YAML value (never None) -> typed value, or raises Invalid


# --- rules ------------------------------------------------------------------------------------


def text(value: Any) -> str:
    """A literal, non-empty string; YAML numbers keep the text they were written as."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise Invalid(f"must be a string, got {type(value).__name__}")
    written = getattr(value, "source_text", None) or str(value)
    if not written.strip():
        raise Invalid("must not be empty")
    if is_template(written):
        raise Invalid(
            f"is a Jinja template ({written!r})", hint="clusterkit settings must be literal values"
        )
    return written.strip()


def constraint(value: Any) -> str:
    """A version pin such as ">=550" or "2.5.1": rejected here, not when checks run."""
    written = text(value)
    try:
        Constraint(written)
    except ValueError:
        raise Invalid(
            f"{written!r} is not a version constraint",
            hint='write a version or a range, e.g. "2.5.1", "==2.5.*" or ">=550,<560"',
        ) from None
    return written


def integer(low: int, high: int) -> Callable[[Any], int]:
    def rule(value: Any) -> int:
        number = value if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(value, str) and value.strip().isdigit():
            number = int(value)
        if number is None or not low <= number <= high:
            raise Invalid(f"must be an integer {low}..{high}, got {value!r}")
        return number

    return rule


def number(
    *, above: float | None = None, low: float | None = None, unit: str = ""
) -> Callable[[Any], float]:
    """A finite number, > `above` or >= `low`; quoted numbers are accepted like Ansible does."""
    bound = (
        f"above {above:g}" if above is not None else f"at least {low:g}" if low is not None else ""
    )
    allowed = f"a number{' ' + bound if bound else ''}{' (' + unit + ')' if unit else ''}"

    def rule(value: Any) -> float:
        parsed = math.nan
        if not isinstance(value, bool) and isinstance(value, int | float | str):
            try:
                parsed = float(value)
            except ValueError:
                parsed = math.nan
        fits = math.isfinite(parsed)
        fits = fits and (above is None or parsed > above) and (low is None or parsed >= low)
        if not fits:
            raise Invalid(f"must be {allowed}, got {value!r}")
        return parsed

    return rule


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"must be true or false, got {value!r}")
    return value


def fraction(value: Any) -> float:
    """A number strictly between 0 and 1."""
    try:
        parsed = number(above=0)(value)
    except Invalid:
        parsed = math.nan
    if not 0 < parsed < 1:
        raise Invalid(f"must be a number above 0 and below 1, got {value!r}")
    return parsed


def choice(*allowed: str) -> Rule:
    def rule(value: Any) -> str:
        written = text(value)
        if written not in allowed:
            raise Invalid(f"must be one of {', '.join(allowed)}, got {written!r}")
        return written

    return rule


def size(value: Any) -> str:
    """nccl-tests sizes: bytes with an optional K/M/G/T suffix (`64M`)."""
    written = text(value)
    try:
        parse_size(written)
    except ValueError:
        raise Invalid(
            f"must be a size in bytes with an optional K/M/G suffix (e.g. 64M), got {value!r}"
        ) from None
    return written


def list_of(item: Rule, what: str) -> Rule:
    def rule(value: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise Invalid(f"must be a list of {what}, got {type(value).__name__}")
        try:
            return tuple(item(entry) for entry in value)
        except Invalid as error:
            raise Invalid(f"must be a list of {what}: {error.problem}", error.hint) from None

    return rule


def number_or_off(unit: str) -> Rule:
    positive = number(above=0, unit=unit)

    def rule(value: Any) -> float | str:
        # YAML 1.1 reads a bare `off` as false, as Ansible does.
        if value is False or (isinstance(value, str) and value.strip().lower() == "off"):
            return "off"
        try:
            return positive(value)
        except Invalid:
            raise Invalid(f"must be a number above 0 ({unit}) or off, got {value!r}") from None

    return rule


def preempt_rate(value: Any) -> str:
    """A rate per node-hour or an AWS advisor bucket; kept as text for `cost` to parse."""
    written = text(value)
    cleaned = written.replace(" ", "")
    if cleaned not in ADVISOR_BUCKETS:
        try:
            rate = float(cleaned.removesuffix("/h"))
        except ValueError:
            rate = math.nan
        if not (math.isfinite(rate) and rate >= 0):
            raise Invalid(
                f"must be a rate per node-hour or an advisor bucket "
                f"({', '.join(ADVISOR_BUCKETS)}), got {value!r}"
            )
    return written


def hazard(value: Any) -> str:
    written = text(value)
    try:
        Hazard.parse(written)
    except UsageError:
        raise Invalid(f"must be one of {', '.join(HAZARDS)} (K > 0), got {value!r}") from None
    return written


def absolute_path(value: Any) -> str:
    """An absolute path on the nodes, without control characters (it reaches a command)."""
    written = text(value)
    if not written.startswith("/") or any(ord(c) < 32 or ord(c) == 127 for c in written):
        raise Invalid(f"must be an absolute path, got {written!r}")
    return written


# A network interface name as Linux takes one (dev_valid_name: at most 15 bytes, never `.` or
# `..`, no `/`, `:` or white space), in the characters real names use: no control character
# reaches NCCL, a node's command line or a report.
_IFNAME = re.compile(r"[A-Za-z0-9_.@+-]{1,15}")
_IFNAME_HINT = (
    "NCCL_SOCKET_IFNAME syntax: names of at most 15 letters, digits, '.', '_', '-', '@' or '+',"
    " comma-separated, optionally each with :port, the list led by ^ (exclude) and/or = (exact)"
)


def interface(value: Any) -> str:
    """An NCCL_SOCKET_IFNAME value (`eth0`, `=eth0`, `^docker,lo`, `ib0:1`) whose every name
    could be a Linux interface's."""
    written = text(value)
    names = written.removeprefix("^").removeprefix("=")
    for entry in names.split(","):
        name, colon, port = entry.partition(":")
        if not _IFNAME.fullmatch(name) or name in (".", "..") or (colon and not port.isdigit()):
            where = f" in {written!r}" if entry != written else ""
            raise Invalid(f"{entry!r}{where} is not an interface name", _IFNAME_HINT)
    return written


# srun options the transport sets itself (which nodes, the deadline, how output comes back):
# overriding one would break the step. srun takes any unambiguous prefix, so prefixes too.
SRUN_OWN_OPTIONS = (
    "nodes", "ntasks", "ntasks-per-node", "nodelist", "exclude", "jobid", "overlap", "time",
    "kill-on-bad-exit", "input", "output", "error", "label", "pty", "distribution",
    "unbuffered", "multi-prog",
)  # fmt: skip
_OPTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


def srun_option(value: Any) -> str:
    """One srun option, `--name` or `--name=value`, with no control characters (it reaches
    srun's argv as one argument, never a shell) and not one the transport sets itself."""
    written = text(value)
    name = written[2:].split("=", 1)[0]
    if not written.startswith("--") or not _OPTION_NAME.fullmatch(name):
        raise Invalid(f"must be one long option such as --gres=gpu:8, got {written!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in written):
        raise Invalid(f"must not hold control characters, got {written!r}")
    clash = [own for own in SRUN_OWN_OPTIONS if own.startswith(name)]
    if clash:
        raise Invalid(
            f"{written!r}: clusterkit sets --{clash[0]} itself",
            hint=f"leave out {', '.join('--' + own for own in SRUN_OWN_OPTIONS)}",
        )
    return written


PORT = integer(1, 65535)

# --- the model: one rule per field of each section --------------------------------------------

_VERSION_RULES: dict[str, Rule] = {
    name: constraint for name in ("driver", "cuda", "torch", "nccl", "python")
}
EXPECT_RULES: dict[str, Rule] = {"gpus_per_node": integer(0, 1024), **_VERSION_RULES}

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
