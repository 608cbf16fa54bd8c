"""Spot preemption rate per node-hour from a number, an AWS advisor bucket, or a trace."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from itertools import pairwise
from pathlib import Path

from clusterkit.errors import UsageError
from clusterkit.words import counted

HOURS_PER_MONTH = 730.0
# AWS Spot Instance Advisor: share of instances reclaimed over the trailing month. The upper
# edge stands for each bucket; ">20%" has none, so 20% is a floor there.
ADVISOR_BUCKETS = {"<5%": 0.05, "5-10%": 0.10, "10-15%": 0.15, "15-20%": 0.20, ">20%": 0.20}
# Interruptions of different nodes this close together count as one event.
TRACE_EVENT_WINDOW_H = 5.0 / 60.0
# A trace carries an estimate with at least this many events, an interval no wider than this
# factor (upper / lower bound: 10 events give 3.8, 3 give 14, 1 gives 220) and an exposure
# no smaller than the job's divided by this.
MEANINGFUL_EVENTS = 5
MEANINGFUL_SPREAD = 10.0
MAX_EXTRAPOLATION = 10.0


@dataclass(frozen=True)
class RateSource:
    """A preemption rate and where it came from (the output names it)."""

    rate: float  # per node-hour
    origin: str  # "flag", "advisor bucket <5%", "trace FILE", "inventory"
    correlation: float | None = None  # measured from a trace with node names
    note: str | None = None
    restart_min: float | None = None  # measured restart time (`# restart-min:`, launch's)
    nodes: float | None = None  # a trace's `# nodes:`: the node count it watched
    events: int | None = None  # a trace's interruptions ...
    node_hours: float | None = None  # ... over this exposure (nodes x hours observed)
    interval: tuple[float, float] | None = None  # 95% interval of a trace's rate

    def trace_warnings(self, job_node_hours: float) -> list[str]:
        """What a trace's rate is worth: its interval always, and loudly when so few
        events over so little exposure cannot carry an estimate for this job."""
        if self.events is None or self.node_hours is None or self.interval is None:
            return []
        low, high = self.interval
        said = [
            f"{self.origin}: {self.rate:.3g} preemptions per node-hour, 95% interval "
            f"{low:.3g} to {high:.3g} (exact Poisson, {counted(self.events, 'event')} in "
            f"{self.node_hours:.3g} node-hours)"
        ]
        short = self.events < MEANINGFUL_EVENTS or high > MEANINGFUL_SPREAD * max(low, 1e-300)
        if short or job_node_hours > MAX_EXTRAPOLATION * self.node_hours:
            said.append(
                f"the trace is too short to mean anything for this job: {self.node_hours:.3g} "
                f"node-hours observed, the job runs {job_node_hours:.4g}; this estimate "
                "extrapolates it and may be off by the whole interval: record a longer trace, "
                "or give --preempt-rate from a longer record (e.g. an advisor bucket)"
            )
        return said


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
        f"trace {path} ({counted(len(events), 'interruption')}, {counted(nodes, 'node')}, "
        f"{span:.4g} h)",
        correlation=_correlation(events),
        restart_min=headers.get("restart-min"),
        nodes=headers.get("nodes"),
        events=len(events),
        node_hours=nodes * span,
        interval=poisson_interval(len(events), nodes * span),
    )


def poisson_interval(events: int, exposure: float, confidence: float = 0.95) -> tuple[float, float]:
    """The exact (Garwood) interval of a Poisson rate seen as `events` over `exposure`: the
    rates under which that many events or more, or that many or fewer, would be as rare as
    (1 - confidence) / 2. Few events give a wide interval, as they should."""
    tail = (1.0 - confidence) / 2.0
    low = 0.0 if events == 0 else _solve(lambda m: 1.0 - _poisson_cdf(events - 1, m) - tail)
    high = _solve(lambda m: tail - _poisson_cdf(events, m))
    return low / exposure, high / exposure


def _poisson_cdf(k: int, mean: float) -> float:
    """P(X <= k) for X ~ Poisson(mean), summed in logs (no overflow for large k)."""
    return sum(math.exp(i * math.log(mean) - mean - math.lgamma(i + 1)) for i in range(k + 1))


def _solve(rising: Callable[[float], float]) -> float:
    """The root of an increasing function on (0, inf), by bisection."""
    low, high = 1e-12, 1.0
    while rising(high) < 0:
        high *= 2.0
    for _ in range(200):
        middle = 0.5 * (low + high)
        low, high = (middle, high) if rising(middle) < 0 else (low, middle)
    return 0.5 * (low + high)


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
