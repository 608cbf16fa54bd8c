"""The dated price snapshot and its checks: --catalog FILE, else the user catalog that
`clusterkit cost prices update` writes, else the packaged clusterkit/data/prices.json.

Every row carries its own `source` (the provider's price page or API it was read from) and
`date`; spot prices may carry their own (`spot_source`, `spot_date`). Public catalogs carry
traps: spot at or above on-demand, empty spot prices, placeholder prices of 0 or huge
sentinels, VM prices that leave out the GPUs. Each becomes a warning and the price is
dropped rather than used; a row without source or date, or older than the age limit, is
warned about. A row with no `spot` key at all has no usable spot price (its note says why):
no warning, and `cost` asks for --spot-price when it needs one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from importlib import resources
from pathlib import Path
from shlex import quote
from typing import Any

from clusterkit.errors import ConfigError, UsageError

SCHEMA = "clusterkit.prices/2"

# No node-hour costs this much: a price above it is a placeholder.
SENTINEL_PRICE = 5000.0
DEFAULT_MAX_AGE_DAYS = 180


@dataclass(frozen=True)
class Entry:
    provider: str
    instance: str
    region: str
    gpus: int | None
    on_demand: float | None  # USD per node-hour; None when missing or rejected
    spot_low: float | None
    spot_high: float | None
    note: str | None = None
    source: str | None = None  # where the on-demand (list) price was read
    day: date | None = None  # when
    interruption: str | None = None  # AWS Spot Advisor bucket, e.g. "<5%"
    spot_source: str | None = None  # where the spot price was read, when not `source`
    spot_day: date | None = None  # its own date; None: `day`

    @property
    def spot_dated(self) -> date | None:
        """The spot price's date: its own, else the row's."""
        return self.spot_day or self.day

    @property
    def spot(self) -> float | None:
        """The middle of the zone range: what a job landing in a random zone pays."""
        if self.spot_low is None or self.spot_high is None:
            return None
        return round(0.5 * (self.spot_low + self.spot_high), 6)

    @property
    def name(self) -> str:
        return f"{self.instance} ({self.region})"


@dataclass(frozen=True)
class Catalog:
    path: str  # where it was read from
    source: str | None
    snapshot: date | None
    entries: tuple[Entry, ...]
    warnings: tuple[str, ...] = field(default=())

    def lookup(self, instance: str, region: str | None) -> Entry:
        """The entry for an instance type; the region may be left out when only one is known."""
        matches = [e for e in self.entries if e.instance.lower() == instance.lower()]
        if not matches:
            known = ", ".join(sorted({e.instance for e in self.entries}))
            raise UsageError(f"--instance {instance}: not in {self.path} (known: {known})")
        if region is None:
            if len({e.region for e in matches}) == 1:
                return matches[0]
            regions = ", ".join(sorted(e.region for e in matches))
            raise UsageError(f"--instance {instance}: give --region (known: {regions})")
        for entry in matches:
            if entry.region.lower() == region.lower():
                return entry
        regions = ", ".join(sorted(e.region for e in matches))
        raise UsageError(
            f"--region {region}: no price for {instance} there in {self.path} (known: {regions})"
        )


def packaged_path() -> str:
    return str(resources.files("clusterkit.data").joinpath("prices.json"))


def user_path(environ: Mapping[str, str] | None = None) -> Path:
    """What `clusterkit cost prices update` writes by default ($XDG_DATA_HOME or
    ~/.local/share, then clusterkit/prices.json), in `environ` (None: this process's)."""
    environ = os.environ if environ is None else environ
    home = environ.get("HOME") or str(Path.home())
    base = environ.get("XDG_DATA_HOME") or str(Path(home) / ".local" / "share")
    return Path(base) / "clusterkit" / "prices.json"


def default_path(environ: Mapping[str, str] | None = None) -> str:
    """The user catalog when one was written, else the packaged snapshot."""
    user = user_path(environ)
    return str(user) if user.is_file() else packaged_path()


def load(
    path: str | None = None,
    *,
    today: date | None = None,
    max_age_days: float = DEFAULT_MAX_AGE_DAYS,
) -> Catalog:
    """Read and validate a catalog; problems become warnings, malformed files errors."""
    where = path or default_path()
    try:
        document = json.loads(Path(where).read_text(encoding="utf-8"))
    except OSError as error:
        raise UsageError(f"--catalog {where}: cannot read: {error.strerror or error}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ConfigError(f"{where}: not valid JSON: {error}") from None
    if not isinstance(document, dict) or not isinstance(document.get("instances"), list):
        raise ConfigError(f"{where}: expected an object with an `instances` list")
    warnings: list[str] = []
    today = today or date.today()
    snapshot = _snapshot(document, where, today, max_age_days, warnings)
    entries: list[Entry] = []
    seen: set[tuple[str, str]] = set()
    for index, raw in enumerate(document["instances"]):
        entry = _entry(raw, f"{where}: instances[{index}]", warnings)
        entry = _dated(entry, raw, today, max_age_days, warnings)
        key = (entry.instance.lower(), entry.region.lower())
        if key in seen:
            warnings.append(f"{entry.name}: listed twice in {where}; the first is used")
            continue
        seen.add(key)
        entries.append(entry)
    source = document.get("source")
    if not source and not all(entry.source for entry in entries):
        warnings.append(f"{where}: no `source`: where do these prices come from?")
    row_days = [day for e in entries for day in (e.day, e.spot_day) if day is not None]
    if row_days and (snapshot is None or min(row_days) < snapshot):
        snapshot = min(row_days)  # the oldest price decides how stale the catalog is
    return Catalog(where, source or None, snapshot, tuple(entries), tuple(warnings))


def _dated(
    entry: Entry, raw: dict[str, Any], today: date, max_age_days: float, warnings: list[str]
) -> Entry:
    """The row's own source and date (schema 2), each checked; warnings name the row."""
    if "source" not in raw and "date" not in raw:
        return entry  # schema 1: the catalog-level source and date apply
    source = raw.get("source")
    if not isinstance(source, str) or not source.startswith(("https://", "http://")):
        warnings.append(f"{entry.name}: no `source` URL: where does this price come from?")
        source = None
    try:
        day = date.fromisoformat(str(raw.get("date")))
    except ValueError:
        warnings.append(f"{entry.name}: no valid `date` (YYYY-MM-DD): price of unknown age")
        day = None
    spot_day = _spot_day(entry, raw, warnings)
    # Without its own date the spot price is as old as the row: one warning covers both.
    dates = [("on-demand", day), ("spot", spot_day)] if spot_day else [("price", day)]
    for what, when in dates:
        if when is not None and when > today:
            dated = "dated" if what == "price" else f"{what} price dated"
            warnings.append(f"{entry.name}: {dated} {when}, in the future")
        elif when is not None and (what != "spot" or entry.spot_low is not None):
            stale = age_warning(entry, what, when, today, max_age_days)
            warnings.extend([stale] if stale else [])
    interruption = raw.get("interruption")
    return Entry(
        **{**entry.__dict__, "source": source, "day": day,
           "interruption": interruption if isinstance(interruption, str) else None,
           "spot_day": spot_day, "spot_source": _url(raw.get("spot_source"))},
    )  # fmt: skip


def _url(value: Any) -> str | None:
    return value if isinstance(value, str) and value.startswith(("https://", "http://")) else None


def _spot_day(entry: Entry, raw: dict[str, Any], warnings: list[str]) -> date | None:
    """The spot price's own `spot_date`, when the row has one."""
    if raw.get("spot_date") is None:
        return None
    try:
        return date.fromisoformat(str(raw["spot_date"]))
    except ValueError:
        warnings.append(
            f"{entry.name}: no valid `spot_date` (YYYY-MM-DD): spot price of unknown age"
        )
        return None


def age_warning(entry: Entry, what: str, day: date, today: date, max_age_days: float) -> str | None:
    """A warning, with what refreshes it, when the `what` ("on-demand", "spot", or both:
    "price") price is older than the limit; None when it is recent enough."""
    age = (today - day).days
    if age <= max_age_days:
        return None
    return (
        f"{entry.name}: {_label(what)}price from {day} ({age} days old, over {max_age_days:g}): "
        f"{refresh_hint(entry, what)}"
    )


def _label(what: str) -> str:
    return "" if what == "price" else f"{what} "


def refresh_hint(entry: Entry, what: str) -> str:
    """How to get a current `what` price for the row: `clusterkit cost prices update` reads
    AWS list prices and Azure's prices without keys; AWS spot and GCP it cannot refresh."""
    flags = {"spot": "--spot-price", "on-demand": "--on-demand-price"}
    flag = flags.get(what, "--on-demand-price and --spot-price")
    if entry.provider == "azure":
        command = "clusterkit cost prices update --provider azure"
    elif entry.provider == "aws" and what != "spot":
        command = f"clusterkit cost prices update --provider aws --region {quote(entry.region)}"
    else:
        return (
            f"`clusterkit cost prices update` cannot refresh it: give {flag} with a current price"
        )
    return f"refresh with `{command}`, or give {flag}"


def _snapshot(
    document: dict[str, Any], where: str, today: date, max_age_days: float, warnings: list[str]
) -> date | None:
    raw = document.get("date")
    if raw is None and document.get("schema") == SCHEMA:
        return None  # schema 2: every row is dated instead
    try:
        snapshot = date.fromisoformat(str(raw))
    except ValueError:
        warnings.append(f"{where}: no valid `date` (YYYY-MM-DD): prices of unknown age")
        return None
    age = (today - snapshot).days
    if age > max_age_days:
        warnings.append(
            f"prices in {where} are from {snapshot} ({age} days old, over {max_age_days:g}): "
            "check current prices or pass --on-demand-price/--spot-price"
        )
    return snapshot


def _entry(raw: Any, where: str, warnings: list[str]) -> Entry:
    if not isinstance(raw, dict) or not raw.get("instance"):
        raise ConfigError(f"{where}: expected an object with at least `instance`")
    instance, region = str(raw["instance"]), str(raw.get("region") or "any")
    name = f"{instance} ({region})"
    on_demand = _price(raw.get("on_demand"), f"{name}: on-demand", warnings)
    spot = raw.get("spot")
    low_raw, high_raw = (spot[0], spot[-1]) if isinstance(spot, list) and spot else (spot, spot)
    if "spot" in raw:
        low = _price(low_raw, f"{name}: spot", warnings)
        high = low if high_raw is low_raw else _price(high_raw, f"{name}: spot (high)", warnings)
    else:  # no usable spot price published (the row's note says why): --spot-price gives it
        low = high = None
    if low is not None and high is not None and high < low:
        low, high = high, low
    if low is not None and high is not None and on_demand is not None and high >= on_demand:
        warnings.append(
            f"{name}: spot ${high:g} is not below on-demand ${on_demand:g}: "
            "spot prices dropped (a catalog error or a zone to avoid)"
        )
        low = high = None
    if raw.get("includes_gpus") is False:
        warnings.append(
            f"{name}: price leaves out the GPUs (priced separately): prices dropped, "
            "pass --on-demand-price/--spot-price with the GPUs added"
        )
        on_demand = low = high = None
    gpus = raw.get("gpus")
    return Entry(
        provider=str(raw.get("provider") or ""),
        instance=instance,
        region=region,
        gpus=gpus if isinstance(gpus, int) and not isinstance(gpus, bool) and gpus > 0 else None,
        on_demand=on_demand,
        spot_low=low,
        spot_high=high,
        note=raw.get("note"),
    )


def _price(raw: Any, what: str, warnings: list[str]) -> float | None:
    """A usable price, or None with a warning saying why not."""
    if raw is None or raw == "":
        warnings.append(f"{what} price missing")
        return None
    try:
        value = float(raw)
    except (TypeError, ValueError):
        warnings.append(f"{what} price {raw!r} is not a number")
        return None
    if not math.isfinite(value) or value <= 0:
        warnings.append(f"{what} price {raw!r} is a placeholder (zero or negative)")
        return None
    if value >= SENTINEL_PRICE:
        warnings.append(f"{what} price {value:g} looks like a sentinel (>= {SENTINEL_PRICE:g})")
        return None
    return value
