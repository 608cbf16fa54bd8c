"""The inputs of `clusterkit cost` resolved into one scenario: flags over the inventory's
`clusterkit.cost` block over the price catalog over defaults, each value checked against its
limits and remembered with where it came from, then the estimate. Every bad input is one
usage error that names the flag or the inventory key it came from.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import date
from typing import Any

from clusterkit.cost import catalog as price_catalog
from clusterkit.cost import simulate
from clusterkit.cost.estimate import Estimate, Provenance, estimate
from clusterkit.cost.rates import ADVISOR_BUCKETS, RateSource, parse_rate, read_trace
from clusterkit.cost.scenario import CapacityWait, Hazard, Scenario
from clusterkit.errors import UsageError
from clusterkit.inventory.model import CostSettings
from clusterkit.words import counted

# Public 4-node spot traces: time to get all nodes back had a median of 0.3-0.5 h and a mean
# of 0.8-2.9 h.
DEFAULT_WAIT_MEDIAN_H = 0.4
DEFAULT_WAIT_MEAN_H = 1.5
DEFAULT_CHECKPOINT_MIN = 5.0
DEFAULT_RESTART_MIN = 10.0
DEFAULT_GPUS_PER_NODE = 8
MAX_SEED = 2**32 - 1


@dataclass(frozen=True)
class Limit:
    """The range an input must lie in: wide enough for any real job, narrow enough that the
    model's figures stay finite numbers."""

    low: float
    high: float
    low_open: bool = False  # the low end itself is not allowed
    unit: str = ""

    def rule(self) -> str:
        low = f"above {_plain(self.low)}" if self.low_open else f"at least {_plain(self.low)}"
        return f"must be {low} and at most {_plain(self.high)}{self.unit}"

    def holds(self, value: float) -> bool:
        above = value > self.low if self.low_open else value >= self.low
        return math.isfinite(value) and above and value <= self.high


LIMITS = {
    "nodes": Limit(1, 100_000),
    "gpus_per_node": Limit(1, 1024),  # as the inventory reader allows
    "hours": Limit(0, 100_000, low_open=True, unit=" h"),
    "checkpoint_min": Limit(0, 10_080, unit=" min"),
    "restart_min": Limit(0, 10_080, unit=" min"),
    "interval": Limit(1, 6_000_000, unit=" min"),
    "deadline": Limit(0, 1_000_000, low_open=True, unit=" h"),
    "preempt_rate": Limit(0, 100, unit=" per node-hour"),
    "hardware_rate": Limit(0, 100, unit=" per node-hour"),
    "correlation": Limit(1, 100_000),
    "capacity_wait_median": Limit(0, 10_000, low_open=True, unit=" h"),
    "capacity_wait_mean": Limit(0, 10_000, low_open=True, unit=" h"),
    "on_demand_price": Limit(0, 1_000_000, low_open=True, unit=" USD"),
    "spot_price": Limit(0, 1_000_000, low_open=True, unit=" USD"),
    "max_price_age_days": Limit(0, 36_500, unit=" days"),
    "trials": Limit(0, simulate.MAX_TRIALS),
    "seed": Limit(0, MAX_SEED),
}

# Inventory keys under `clusterkit.cost` (the fields of CostSettings), each named like its flag.
INVENTORY_KEYS = tuple(field.name for field in fields(CostSettings))


@dataclass(frozen=True)
class InventoryCost:
    """What an inventory says for `clusterkit cost`: its host count and its cost block."""

    path: str
    hosts: int
    settings: CostSettings


@dataclass(frozen=True)
class CostRequest:
    """The inputs as given: flags (each None when not given, named like the inventory's
    keys), the inventory's, and the simulation's size. Resolved here in that order, then
    the catalog, then the defaults."""

    flags: CostSettings = field(default_factory=CostSettings)
    nodes: int | None = None  # --nodes
    inventory: InventoryCost | None = None
    trials: float = 10_000
    seed: float = 0


def build(
    request: CostRequest,
    today: date | None = None,
    *,
    environ: Mapping[str, str] | None = None,
) -> Estimate:
    """Every input resolved, then the estimate; `today` ages the catalog's prices, and
    `environ` holds the run's variables: where the user's catalog is (None: this
    process's)."""
    values = _merge(request)
    warnings: list[str] = []
    nodes = values.get("nodes")
    if nodes is None:
        raise UsageError(
            "no node count: give --nodes N or an inventory (or a --trace with `# nodes: N`)"
        )
    hours = _number(values, "hours", required=True)
    assert hours is not None  # required: _number raised a usage error otherwise
    prices, provenance_prices, gpus_from_catalog = _prices(values, warnings, today, environ)
    rate = _rate(values, provenance_prices.pop("interruption", None))
    warnings += rate.trace_warnings(job_node_hours=float(nodes) * hours)
    correlation_origin = "default: independent"
    correlation = _number(values, "correlation")
    if correlation is not None:
        correlation_origin = values.origin("correlation")
    elif rate.correlation is not None:
        correlation, correlation_origin = rate.correlation, "measured in the trace"
    gpus = values.get("gpus_per_node")
    if gpus is None:
        gpus = gpus_from_catalog or DEFAULT_GPUS_PER_NODE
    scenario = Scenario(
        nodes=_count(values, "nodes"),
        gpus_per_node=_count(values, "gpus_per_node", gpus),
        hours=hours,
        checkpoint_h=_minutes(values, "checkpoint_min", DEFAULT_CHECKPOINT_MIN),
        restart_h=_restart_hours(values, rate),
        preempt_rate=rate.rate,
        on_demand_price=prices[0],
        spot_price=prices[1],
        correlation=correlation or 1.0,
        hardware_rate=_number(values, "hardware_rate"),
        capacity_wait=_capacity_wait(values),
        deadline_h=_number(values, "deadline"),
        interval_h=_optional_minutes(values, "interval"),
        hazard=Hazard.parse(str(values.get("hazard") or "exponential")),
    )
    if scenario.spot_price >= scenario.on_demand_price:
        warnings.append(
            f"spot ${scenario.spot_price:g} is not below on-demand "
            f"${scenario.on_demand_price:g} per node-hour: check the prices"
        )
    if scenario.correlation > scenario.nodes:
        warnings.append(
            f"correlation {scenario.correlation:g} exceeds the {scenario.nodes} nodes: "
            f"capped at {scenario.nodes}"
        )
    provenance = Provenance(
        rate_origin=rate.origin,
        correlation_origin=correlation_origin,
        notes=(rate.note,) if rate.note else (),
        **provenance_prices,
    )
    trials = int(_flag_number("trials", request.trials))
    seed = int(_flag_number("seed", request.seed))
    return estimate(scenario, provenance, trials=trials, seed=seed, warnings=tuple(warnings))


class _Values:
    """Flag values over inventory values, remembering where each came from."""

    def __init__(self) -> None:
        self._values: dict[str, tuple[Any, str]] = {}

    def set(self, key: str, value: Any, origin: str) -> None:
        if value is not None:
            self._values[key] = (value, origin)

    def get(self, key: str) -> Any:
        return self._values.get(key, (None, ""))[0]

    def origin(self, key: str) -> str:
        return self._values.get(key, (None, ""))[1]

    def flag(self, key: str) -> str:
        """How to name the value in an error: the flag or the inventory key."""
        origin = self.origin(key)
        return origin if origin.startswith("inventory") else f"--{key.replace('_', '-')}"


def _merge(request: CostRequest) -> _Values:
    values = _Values()
    if request.inventory is not None:
        _from_inventory(request.inventory, values)
    for key in INVENTORY_KEYS:
        values.set(key, getattr(request.flags, key), "flag")
    values.set("nodes", request.nodes, "flag")
    if values.get("nodes") is None and values.get("trace") is not None:
        _nodes_from_trace(str(values.get("trace")), values)
    return values


def _nodes_from_trace(path: str, values: _Values) -> None:
    """No --nodes and no inventory: the node count the trace watched (`# nodes: N`, which
    `launch --trace` writes)."""
    watched = read_trace(path).nodes
    if watched is not None and watched.is_integer():
        values.set("nodes", int(watched), f"trace {path} (# nodes: {watched:g})")


def _from_inventory(inventory: InventoryCost, values: _Values) -> None:
    path = inventory.path
    values.set("nodes", inventory.hosts, f"inventory {path} ({counted(inventory.hosts, 'host')})")
    section = inventory.settings  # typed and range-checked when the inventory was read
    for key in INVENTORY_KEYS:
        values.set(key, getattr(section, key), f"inventory {path}: clusterkit.cost.{key}")


def _number(values: _Values, key: str, *, required: bool = False) -> float | None:
    """A number within its LIMITS, or one UsageError naming the flag or inventory key."""
    raw = values.get(key)
    if raw is None:
        if required:
            raise UsageError(f"no {key}: give --{key.replace('_', '-')}")
        return None
    number = None if isinstance(raw, bool) else _as_float(raw)
    if number is None:
        raise UsageError(f"{values.flag(key)} {_shown(raw)}: not a number")
    if not LIMITS[key].holds(number):
        raise UsageError(f"{values.flag(key)} {_shown(raw)}: {LIMITS[key].rule()}")
    return number


def _plain(number: float) -> str:
    """1000000 as 1,000,000 rather than 1e+06."""
    return f"{int(number):,}" if float(number).is_integer() else f"{number:g}"


def _as_float(raw: Any) -> float | None:
    try:
        return float(raw)
    except (TypeError, ValueError, OverflowError):
        return None


def _shown(raw: Any) -> str:
    """A value as the user gave it, on one line and short."""
    text = f"{raw:g}" if isinstance(raw, float) else str(raw)
    text = "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in text)
    return text if len(text) <= 40 else text[:37] + "..."


def _flag_number(key: str, value: float) -> float:
    if not LIMITS[key].holds(value):
        raise UsageError(f"--{key} {_shown(value)}: {LIMITS[key].rule()}")
    return value


def _minutes(values: _Values, key: str, default: float) -> float:
    minutes = _number(values, key)
    return (default if minutes is None else minutes) / 60.0


def _optional_minutes(values: _Values, key: str) -> float | None:
    minutes = _number(values, key)
    return None if minutes is None else minutes / 60.0


def _count(values: _Values, key: str, raw: Any = None) -> int:
    """A whole number within its LIMITS (an inventory may hold `8`, `"8"` or `8.0`)."""
    raw = values.get(key) if raw is None else raw
    number = None if isinstance(raw, bool) else _as_float(raw)
    if number is None or not number.is_integer() or not LIMITS[key].holds(number):
        limit = LIMITS[key]
        raise UsageError(
            f"{values.flag(key)} {_shown(raw)}: must be a whole number from "
            f"{_plain(limit.low)} to {_plain(limit.high)}"
        )
    return int(number)


def _rate(values: _Values, catalog_bucket: str | None = None) -> RateSource:
    """--trace, else --preempt-rate, else the catalog row's AWS Spot Advisor bucket."""
    trace, given = values.get("trace"), values.get("preempt_rate")
    if trace is not None and given is not None:
        raise UsageError("give --preempt-rate or --trace, not both")
    if trace is not None:
        source = read_trace(str(trace))
        if not LIMITS["preempt_rate"].holds(source.rate):
            raise UsageError(
                f"--trace {trace}: gives {source.rate:.3g} preemptions per node-hour, "
                f"which {LIMITS['preempt_rate'].rule()}"
            )
        return source
    if given is None and catalog_bucket in ADVISOR_BUCKETS:
        bucket = parse_rate(catalog_bucket)
        return replace(bucket, origin=f"{bucket.origin} (the catalog row's, AWS Spot Advisor)")
    if given is None:
        raise UsageError(
            "no preemption rate: give --preempt-rate RATE (per node-hour) or an advisor "
            "bucket such as '<5%', or --trace FILE"
        )
    source = parse_rate(str(given), values.origin("preempt_rate"))
    if not LIMITS["preempt_rate"].holds(source.rate):
        raise UsageError(
            f"{values.flag('preempt_rate')} {_shown(given)}: {LIMITS['preempt_rate'].rule()}"
        )
    return source


def _restart_hours(values: _Values, rate: RateSource) -> float:
    """--restart-min (or the inventory's), else what a launch trace measured, else 10 min."""
    measured = rate.restart_min
    return _minutes(values, "restart_min", DEFAULT_RESTART_MIN if measured is None else measured)


def _capacity_wait(values: _Values) -> CapacityWait | None:
    median, mean = values.get("capacity_wait_median"), values.get("capacity_wait_mean")
    if "off" in (str(median).lower(), str(mean).lower()):
        return None
    median_h = _number(values, "capacity_wait_median")
    mean_h = _number(values, "capacity_wait_mean")
    median_h = DEFAULT_WAIT_MEDIAN_H if median_h is None else median_h
    mean_h = max(DEFAULT_WAIT_MEAN_H, median_h) if mean_h is None else mean_h
    return CapacityWait(median_h, mean_h)


def _prices(
    values: _Values,
    warnings: list[str],
    today: date | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[tuple[float, float], dict[str, Any], int | None]:
    """(on-demand, spot) per node-hour, their provenance, and the catalog's GPU count."""
    on_demand = _number(values, "on_demand_price")
    spot = _number(values, "spot_price")
    instance, region = values.get("instance"), values.get("region")
    catalog_path = values.get("catalog")
    if instance is None and catalog_path is None and (on_demand is None or spot is None):
        # One name per instance type, in catalog order: an entry per region repeats it.
        catalog = price_catalog.load(price_catalog.default_path(environ))
        known = ", ".join(dict.fromkeys(e.instance for e in catalog.entries))
        raise UsageError(
            f"no prices: give --on-demand-price and --spot-price, or --instance (known: {known})"
        )
    if instance is None and catalog_path is None:
        return (on_demand, spot), {"price_origin": "flags"}, None  # type: ignore[return-value]
    max_age = _number(values, "max_price_age_days")
    loaded = price_catalog.load(
        price_catalog.default_path(environ) if catalog_path is None else str(catalog_path),
        today=today,
        max_age_days=price_catalog.DEFAULT_MAX_AGE_DAYS if max_age is None else max_age,
    )
    if instance is None:
        raise UsageError(f"--catalog {loaded.path}: give --instance to pick a row")
    entry = loaded.lookup(str(instance), None if region is None else str(region))
    relevant = [w for w in loaded.warnings if entry.name in w or not _names_entry(w, loaded)]
    # A price given by flag replaces the catalog's: its age no longer matters.
    given = [what for what, price in (("on-demand", on_demand), ("spot", spot)) if price]
    if on_demand is None or spot is None:
        warnings.extend(w for w in relevant if not _about_given_price(w, entry, given))
    on_demand = on_demand if on_demand is not None else entry.on_demand
    spot = spot if spot is not None else entry.spot
    for price, flag in ((on_demand, "--on-demand-price"), (spot, "--spot-price")):
        if price is None:
            raise UsageError(
                f"{entry.name}: no usable {flag[2:-6]} price in {loaded.path}; give {flag}"
            )
    from_flags = values.get("on_demand_price") is not None and values.get("spot_price") is not None
    dated = entry.day or loaded.snapshot  # the row's own date, else the catalog's
    spot_dated = entry.spot_day or dated
    on_demand_date = None if "on-demand" in given or dated is None else dated.isoformat()
    spot_date = None if "spot" in given or spot_dated is None else spot_dated.isoformat()
    used = sorted(day for day in (on_demand_date, spot_date) if day)
    provenance = {
        "price_origin": "flags" if from_flags else f"catalog ({used[0] if used else 'undated'})",
        "on_demand_date": on_demand_date,
        "spot_date": spot_date,
        "flag_prices": tuple(given),
        "instance": entry.instance,
        "region": entry.region,
        "spot_range": None
        if values.get("spot_price") is not None or entry.spot_low is None
        else (entry.spot_low, entry.spot_high),
        "catalog_path": loaded.path,
        "catalog_source": entry.source or loaded.source,
        "catalog_date": used[0] if used else None,  # the oldest price used
        "interruption": entry.interruption,
    }
    return (on_demand, spot), provenance, entry.gpus  # type: ignore[return-value]


def _about_given_price(warning: str, entry: price_catalog.Entry, given: list[str]) -> bool:
    """Whether `warning` is the age of a price a flag replaced."""
    return any(warning.startswith(f"{entry.name}: {what} price from") for what in given)


def _names_entry(warning: str, loaded: price_catalog.Catalog) -> bool:
    return any(entry.name in warning for entry in loaded.entries)
