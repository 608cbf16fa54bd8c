"""The resolved inputs of one estimate and the job-level interruption rates they imply."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from clusterkit.errors import UsageError

# 419 unexpected interruptions in 54 days on 16k GPUs: ~1.6e-4 per 8-GPU node-hour.
HARDWARE_RATE_PER_GPU_HOUR = 1.6e-4 / 8
PREEMPTIBLE_LIFETIME_H = 24.0
HAZARDS = ("exponential", "weibull:K", "preemptible24h")
# Weibull shapes people fit to interruption data lie well inside this; outside it the
# scale's gamma function overflows.
MIN_WEIBULL_SHAPE, MAX_WEIBULL_SHAPE = 0.1, 10.0


@dataclass(frozen=True)
class Hazard:
    """Shape of the spot preemption clock; every kind keeps the mean rate the user gave."""

    kind: str = "exponential"  # exponential | weibull | preemptible24h
    shape: float = 1.0  # Weibull k (k < 1: early failures dominate, k > 1: wear-out)

    @classmethod
    def parse(cls, text: str) -> Hazard:
        name, _, arg = text.strip().lower().partition(":")
        if name == "exponential" and not arg:
            return cls()
        if name == "preemptible24h" and not arg:
            return cls("preemptible24h")
        if name == "weibull":
            try:
                shape = float(arg)
            except ValueError:
                shape = math.nan
            if not MIN_WEIBULL_SHAPE <= shape <= MAX_WEIBULL_SHAPE:
                raise UsageError(
                    f"--hazard {text}: Weibull needs a shape from {MIN_WEIBULL_SHAPE:g} to "
                    f"{MAX_WEIBULL_SHAPE:g}, e.g. weibull:0.7"
                )
            return cls("weibull", shape)
        raise UsageError(f"--hazard {text}: unknown hazard (known: {', '.join(HAZARDS)})")

    def __str__(self) -> str:
        return f"weibull:{self.shape:g}" if self.kind == "weibull" else self.kind

    def mean_rate(self, rate: float) -> float:
        """Interruptions per hour this hazard gives for a nominal exponential `rate`: the 24 h
        cap adds a stop to every lifetime that the preemption clock does not end first."""
        if self.kind != "preemptible24h" or rate <= 0:
            return rate if self.kind != "preemptible24h" else 1.0 / PREEMPTIBLE_LIFETIME_H
        return rate / -math.expm1(-rate * PREEMPTIBLE_LIFETIME_H)


@dataclass(frozen=True)
class CapacityWait:
    """Time to get all N nodes back after a preemption: lognormal from its median and mean."""

    median_h: float
    mean_h: float

    def __post_init__(self) -> None:
        if not (self.median_h > 0 and self.mean_h >= self.median_h):
            raise UsageError(
                f"capacity wait: need 0 < median <= mean (got median {self.median_h:g} h, "
                f"mean {self.mean_h:g} h)"
            )

    @property
    def mu(self) -> float:
        return math.log(self.median_h)

    @property
    def sigma(self) -> float:
        return math.sqrt(2.0 * math.log(self.mean_h / self.median_h))


@dataclass(frozen=True)
class Scenario:
    """Every input of an estimate, in hours and USD per node-hour."""

    nodes: int
    gpus_per_node: int
    hours: float  # failure-free compute time T_s
    checkpoint_h: float  # delta, the blocking part of a checkpoint
    restart_h: float  # R: provision, boot, process-group init, checkpoint load (billed)
    preempt_rate: float  # spot preemptions per node-hour
    on_demand_price: float
    spot_price: float
    correlation: float = 1.0  # mean nodes hit per preemption event (1 = independent)
    hardware_rate: float | None = None  # per node-hour; None: the published GPU rate
    capacity_wait: CapacityWait | None = None  # None: capacity comes back at once
    deadline_h: float | None = None
    interval_h: float | None = None  # fixed checkpoint interval; None: Daly's optimum
    hazard: Hazard = field(default_factory=Hazard)

    def __post_init__(self) -> None:
        checks = {
            "nodes": self.nodes >= 1,
            "gpus-per-node": self.gpus_per_node >= 1,
            "hours": self.hours > 0,
            "checkpoint-min": self.checkpoint_h >= 0,
            "restart-min": self.restart_h >= 0,
            "preempt-rate": self.preempt_rate >= 0,
            "on-demand-price": self.on_demand_price > 0,
            "spot-price": self.spot_price > 0,
            "correlation": self.correlation >= 1,
            "hardware-rate": self.hardware_rate is None or self.hardware_rate >= 0,
            "deadline": self.deadline_h is None or self.deadline_h > 0,
            "interval": self.interval_h is None or self.interval_h > 0,
        }
        for name, ok in checks.items():
            if not ok:
                value = getattr(self, _FIELD_OF.get(name, name.replace("-", "_")))
                raise UsageError(f"--{name} {value:g}: {_RULE_OF[name]}")
        for name in ("hours", "checkpoint_h", "restart_h", "preempt_rate", "correlation"):
            if not math.isfinite(getattr(self, name)):
                raise UsageError(f"{name}: must be a finite number")

    @property
    def node_hardware_rate(self) -> float:
        if self.hardware_rate is not None:
            return self.hardware_rate
        return HARDWARE_RATE_PER_GPU_HOUR * self.gpus_per_node

    @property
    def effective_correlation(self) -> float:
        """An event cannot take more nodes than the job has: c is capped at N."""
        return min(self.correlation, float(self.nodes))

    def preemption_job_rate(self, preempt_rate: float | None = None) -> float:
        """Preemption events per hour that stop the job: N lambda / min(c, N)."""
        rate = self.preempt_rate if preempt_rate is None else preempt_rate
        return self.hazard.mean_rate(self.nodes * rate / self.effective_correlation)

    @property
    def hardware_job_rate(self) -> float:
        """Hardware failures hit nodes independently: N times the node rate."""
        return self.nodes * self.node_hardware_rate


_FIELD_OF = {
    "checkpoint-min": "checkpoint_h",
    "restart-min": "restart_h",
    "deadline": "deadline_h",
    "interval": "interval_h",
}
_RULE_OF = {
    "nodes": "must be at least 1",
    "gpus-per-node": "must be at least 1",
    "hours": "must be positive",
    "checkpoint-min": "must not be negative",
    "restart-min": "must not be negative",
    "preempt-rate": "must not be negative",
    "on-demand-price": "must be positive",
    "spot-price": "must be positive",
    "correlation": "must be at least 1 (1 = independent; c = mean nodes hit per event)",
    "hardware-rate": "must not be negative",
    "deadline": "must be positive",
    "interval": "must be positive",
}
