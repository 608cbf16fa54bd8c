"""Spot preemption rate per node-hour from a number, an AWS advisor bucket, or a trace."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from clusterkit.errors import UsageError

HOURS_PER_MONTH = 730.0
# AWS Spot Instance Advisor: share of instances reclaimed over the trailing month. The upper
# edge stands for each bucket; ">20%" has none, so 20% is a floor there.
ADVISOR_BUCKETS = {"<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20, ">20%": 0.20}
# Interruptions of different nodes this close together count as one event.
TRACE_EVENT_WINDOW_H = 5.0 / 60.0


@dataclass(frozen=True)
class RateSource:
    """A preemption rate and where it came from (the output names it)."""

    rate: float  # per node-hour
    origin: str  # "flag", "advisor bucket <5%", "trace FILE", "inventory"
    correlation: float | None = None  # measured from a trace with node names
    note: str | None = None
    restart_min: float | None = None  # measured restart time (`# restart-min:`, launch's)


def bucket_rate(monthly_share: float) -> float:
    """lambda = -ln(1 - p) / 730 per hour."""
    return -math.log1p(-monthly_share) / HOURS_PER_MONTH


def parse_rate(text: str, origin: str = "flag") -> RateSource:
    """A number (per node-hour) or an advisor bucket such as '<5%' or '5-10%'."""
    cleaned = str(text).replace(" ", "")
    if cleaned in ADVISOR_BUCKETS:
        return RateSource(
            bucket_rate(ADVISOR_BUCKETS[cleaned]),
            f"advisor bucket {cleaned}",
            note=(
                "advisor buckets understate GPU spot interruptions (0.01-0.74 per "
                "instance-hour measured in public traces): treat the answer as optimistic"
            ),
        )
    if re.fullmatch(r"(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?%", cleaned):
        return _monthly_share(text, cleaned[:-1])
    rate = hourly_rate(cleaned)
    if rate is None:
        raise UsageError(
            f"--preempt-rate {text}: not a rate per node-hour, a monthly share such as 5%, "
            f"nor an advisor bucket (buckets: {', '.join(ADVISOR_BUCKETS)})"
        )
    return RateSource(rate, origin)


def hourly_rate(text: str) -> float | None:
    """`0.02` or `0.02/h`: a rate per node-hour; None unless a finite number, 0 or more."""
    try:
        rate = float(text.removesuffix("/h"))
    except ValueError:
        return None
    return rate if math.isfinite(rate) and rate >= 0 else None


def _monthly_share(text: str, number: str) -> RateSource:
    """`5%`: the share of instances reclaimed in a month, as AWS's advisor states it."""
    try:
        share = float(number) / 100.0
    except ValueError:
        share = math.nan
    if not 0 <= share < 1:
        raise UsageError(
            f"--preempt-rate {text}: a monthly interruption share must lie from 0% to below 100%"
        )
    return RateSource(bucket_rate(share), f"monthly interruption share {number}%")


_HEADER = re.compile(r"#\s*(nodes|hours|restart-min)\s*:\s*(\S+)\s*$", re.IGNORECASE)


def read_trace(path: str) -> RateSource:
    """Rate (and correlation, when lines name nodes) from observed interruptions.

    Format: one interruption per line, `TIME [NODE]`, TIME in hours since the observation
    began or ISO 8601; `# nodes: N` (instances watched, default 1), `# hours: H`
    (observation window; default: first to last interruption) and `# restart-min: M` (the
    restart time `clusterkit launch --trace` measured) headers; other # lines and
    blank lines are ignored.
    """
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise UsageError(f"--trace {path}: cannot read: {error}") from None
    headers: dict[str, float] = {}
    events: list[tuple[float, str | None]] = []
    origin: datetime | None = None
    for number, raw in enumerate(lines, start=1):
        line = raw.strip()
        where = f"--trace {path}:{number}"
        if not line or line.startswith("#"):
            match = _HEADER.match(line)
            if match:
                headers[match[1].lower()] = _positive(match[2], where, match[1])
            continue
        fields = line.replace(",", " ").split()
        if len(fields) > 2:
            raise UsageError(f"{where}: expected `TIME [NODE]`, got {line!r}")
        hours, origin = _time(fields[0], where, origin)
        events.append((hours, fields[1] if len(fields) == 2 else None))
    if not events:
        raise UsageError(f"--trace {path}: no interruptions listed (format: `TIME [NODE]`)")
    times = sorted(hours for hours, _ in events)
    span = headers.get("hours", times[-1] - times[0])
    if span <= 0:
        raise UsageError(f"--trace {path}: cannot tell the observation window (add `# hours: H`)")
    nodes = headers.get("nodes", 1.0)
    rate = len(events) / (nodes * span)
    return RateSource(
        rate,
        f"trace {path} ({len(events)} interruptions, {nodes:g} nodes, {span:.4g} h)",
        correlation=_correlation(events),
        restart_min=headers.get("restart-min"),
    )


def _positive(text: str, where: str, name: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise UsageError(f"{where}: `# {name}:` needs a positive number, got {text!r}")
    return value


def _time(text: str, where: str, origin: datetime | None) -> tuple[float, datetime | None]:
    try:
        return float(text), origin
    except ValueError:
        pass
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(f"{where}: {text!r} is neither hours nor an ISO 8601 time") from None
    if origin is None:
        origin = moment
    try:
        return (moment - origin).total_seconds() / 3600.0, origin
    except TypeError:
        raise UsageError(f"{where}: mixes times with and without a time zone") from None


def _correlation(events: list[tuple[float, str | None]]) -> float | None:
    """Interruptions per event, when nodes are named: nodes lost within a few minutes of
    each other went in one capacity reclaim."""
    if any(node is None for _, node in events):
        return None
    ordered = sorted(hours for hours, _ in events)
    distinct = 1 + sum(
        1 for before, after in pairwise(ordered) if after - before > TRACE_EVENT_WINDOW_H
    )
    return len(events) / distinct
