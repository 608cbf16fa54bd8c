"""`clusterkit cost`: resolve the inputs (flags over inventory over catalog over defaults),
estimate, and write the table, JSON and picture."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from clusterkit.cost import catalog as price_catalog
from clusterkit.cost.estimate import Estimate, Provenance, estimate
from clusterkit.cost.rates import RateSource, parse_rate, read_trace
from clusterkit.cost.scenario import CapacityWait, Hazard, Scenario
from clusterkit.errors import UsageError
from clusterkit.inventory.model import CostSettings
from clusterkit.report.terminal import wants_color
from clusterkit.status import ExitStatus

# Public 4-node spot traces: time to get all nodes back had a median of 0.3-0.5 h and a mean
# of 0.8-2.9 h.
DEFAULT_WAIT_MEDIAN_H = 0.4
DEFAULT_WAIT_MEAN_H = 1.5
DEFAULT_CHECKPOINT_MIN = 5.0
DEFAULT_RESTART_MIN = 10.0
DEFAULT_GPUS_PER_NODE = 8

# Inventory keys under `clusterkit.cost` (the fields of CostSettings), each named like its flag.
INVENTORY_KEYS = tuple(field.name for field in fields(CostSettings))


def run(args: argparse.Namespace) -> ExitStatus:
    result = build(args)
    if args.plot:
        from clusterkit.cost.plot import write_png

        write_png(result, args.plot)
    _write(result, args)
    return ExitStatus.PASSED


def build(args: argparse.Namespace) -> Estimate:
    """Every input resolved, then the estimate."""
    values = _merge(args)
    warnings: list[str] = []
    nodes = values.get("nodes")
    if nodes is None:
        raise UsageError("no node count: give --nodes N or an inventory")
    hours = _number(values, "hours", required=True, minimum=0, strict=True)
    assert hours is not None  # required: _number raised a usage error otherwise
    prices, provenance_prices, gpus_from_catalog = _prices(values, warnings)
    rate = _rate(values)
    correlation_origin = "default: independent"
    correlation = _number(values, "correlation", minimum=1)
    if correlation is not None:
        correlation_origin = values.origin("correlation")
    elif rate.correlation is not None:
        correlation, correlation_origin = rate.correlation, "measured in the trace"
    gpus = values.get("gpus_per_node") or gpus_from_catalog or DEFAULT_GPUS_PER_NODE
    scenario = Scenario(
        nodes=_count(nodes, "nodes"),
        gpus_per_node=_count(gpus, "gpus-per-node"),
        hours=hours,
        checkpoint_h=_minutes(values, "checkpoint_min", DEFAULT_CHECKPOINT_MIN),
        restart_h=_minutes(values, "restart_min", DEFAULT_RESTART_MIN),
        preempt_rate=rate.rate,
        on_demand_price=prices[0],
        spot_price=prices[1],
        correlation=correlation or 1.0,
        hardware_rate=_number(values, "hardware_rate", minimum=0),
        capacity_wait=_capacity_wait(values),
        deadline_h=_number(values, "deadline", minimum=0, strict=True),
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
    return estimate(
        scenario, provenance, trials=_trials(args.trials), seed=args.seed, warnings=tuple(warnings)
    )


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


def _merge(args: argparse.Namespace) -> _Values:
    values = _Values()
    if args.inventory:
        _from_inventory(args.inventory, values)
    for key in (*INVENTORY_KEYS, "nodes"):
        values.set(key, getattr(args, key, None), "flag")
    return values


def _from_inventory(path: str, values: _Values) -> None:
    from clusterkit.inventory import load_inventory

    inventory = load_inventory(path)
    values.set("nodes", len(inventory.hosts), f"inventory {path} ({len(inventory.hosts)} hosts)")
    section = inventory.settings.cost  # typed and range-checked when the inventory was read
    for key in INVENTORY_KEYS:
        values.set(key, getattr(section, key), f"inventory {path}: clusterkit.cost.{key}")


def _number(
    values: _Values, key: str, *, required: bool = False, minimum: float, strict: bool = False
) -> float | None:
    raw = values.get(key)
    if raw is None:
        if required:
            raise UsageError(f"no {key}: give --{key.replace('_', '-')}")
        return None
    try:
        number = float(raw)
    except (TypeError, ValueError):
        raise UsageError(f"{values.flag(key)} {raw!r}: not a number") from None
    too_small = number <= minimum if strict else number < minimum
    if too_small or not math.isfinite(number):
        rule = f"must be {'above' if strict else 'at least'} {minimum:g}"
        shown = f"{raw:g}" if isinstance(raw, float) else raw
        raise UsageError(f"{values.flag(key)} {shown}: {rule}")
    return number


def _minutes(values: _Values, key: str, default: float) -> float:
    minutes = _number(values, key, minimum=0)
    return (default if minutes is None else minutes) / 60.0


def _optional_minutes(values: _Values, key: str) -> float | None:
    minutes = _number(values, key, minimum=0, strict=True)
    return None if minutes is None else minutes / 60.0


def _count(raw: Any, name: str) -> int:
    whole = isinstance(raw, int) and not isinstance(raw, bool)
    if not (whole or (isinstance(raw, str) and raw.strip().isdigit())) or int(raw) < 1:
        raise UsageError(f"--{name} {raw}: must be a whole number, at least 1")
    return int(raw)


def _trials(trials: int) -> int:
    if trials < 0:
        raise UsageError(f"--trials {trials}: must not be negative (0 skips the simulation)")
    return trials


def _rate(values: _Values) -> RateSource:
    trace, given = values.get("trace"), values.get("preempt_rate")
    if trace is not None and given is not None:
        raise UsageError("give --preempt-rate or --trace, not both")
    if trace is not None:
        return read_trace(str(trace))
    if given is None:
        raise UsageError(
            "no preemption rate: give --preempt-rate RATE (per node-hour) or an advisor "
            "bucket such as '<5%', or --trace FILE"
        )
    source = parse_rate(str(given), values.origin("preempt_rate"))
    return source


def _capacity_wait(values: _Values) -> CapacityWait | None:
    median, mean = values.get("capacity_wait_median"), values.get("capacity_wait_mean")
    if "off" in (str(median).lower(), str(mean).lower()):
        return None
    median_h = _number(values, "capacity_wait_median", minimum=0, strict=True)
    mean_h = _number(values, "capacity_wait_mean", minimum=0, strict=True)
    median_h = DEFAULT_WAIT_MEDIAN_H if median_h is None else median_h
    mean_h = max(DEFAULT_WAIT_MEAN_H, median_h) if mean_h is None else mean_h
    return CapacityWait(median_h, mean_h)


def _prices(
    values: _Values, warnings: list[str]
) -> tuple[tuple[float, float], dict[str, Any], int | None]:
    """(on-demand, spot) per node-hour, their provenance, and the catalog's GPU count."""
    on_demand = _number(values, "on_demand_price", minimum=0, strict=True)
    spot = _number(values, "spot_price", minimum=0, strict=True)
    instance, region = values.get("instance"), values.get("region")
    catalog_path = values.get("catalog")
    if instance is None and catalog_path is None and (on_demand is None or spot is None):
        known = ", ".join(e.instance for e in price_catalog.load().entries)
        raise UsageError(
            f"no prices: give --on-demand-price and --spot-price, or --instance (known: {known})"
        )
    if instance is None and catalog_path is None:
        return (on_demand, spot), {"price_origin": "flags"}, None  # type: ignore[return-value]
    max_age = _number(values, "max_price_age_days", minimum=0)
    loaded = price_catalog.load(
        None if catalog_path is None else str(catalog_path),
        max_age_days=price_catalog.DEFAULT_MAX_AGE_DAYS if max_age is None else max_age,
    )
    if instance is None:
        raise UsageError(f"--catalog {loaded.path}: give --instance to pick a row")
    entry = loaded.lookup(str(instance), None if region is None else str(region))
    relevant = [w for w in loaded.warnings if entry.name in w or not _names_entry(w, loaded)]
    if on_demand is None or spot is None:
        warnings.extend(relevant)
    on_demand = on_demand if on_demand is not None else entry.on_demand
    spot = spot if spot is not None else entry.spot
    for price, flag in ((on_demand, "--on-demand-price"), (spot, "--spot-price")):
        if price is None:
            raise UsageError(
                f"{entry.name}: no usable {flag[2:-6]} price in {loaded.path}; give {flag}"
            )
    from_flags = values.get("on_demand_price") is not None and values.get("spot_price") is not None
    provenance = {
        "price_origin": "flags" if from_flags else f"catalog ({loaded.snapshot or 'undated'})",
        "instance": entry.instance,
        "region": entry.region,
        "spot_range": None
        if values.get("spot_price") is not None or entry.spot_low is None
        else (entry.spot_low, entry.spot_high),
        "catalog_path": loaded.path,
        "catalog_source": loaded.source,
        "catalog_date": None if loaded.snapshot is None else loaded.snapshot.isoformat(),
    }
    return (on_demand, spot), provenance, entry.gpus  # type: ignore[return-value]


def _names_entry(warning: str, loaded: price_catalog.Catalog) -> bool:
    return any(entry.name in warning for entry in loaded.entries)


def _write(result: Estimate, args: argparse.Namespace) -> None:
    from clusterkit.cost.report import render_json, render_text

    if args.format == "json":
        text = render_json(result)
    else:
        color = args.output is None and wants_color(sys.stdout)
        text = render_text(result, color=color)
    if args.output is None:
        sys.stdout.write(text)
        return
    try:
        Path(args.output).write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--output {args.output}: cannot write: {error.strerror}") from None
