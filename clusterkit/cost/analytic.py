"""Expected time and cost of each option, feasibility, and the break-even preemption rate."""

from __future__ import annotations

import math
from dataclasses import dataclass

from clusterkit.cost import daly
from clusterkit.cost.scenario import Scenario

# Checkpoint/restart stops paying once a restart, or a checkpoint interval, takes this share
# of the mean time between interruptions (Daly's M = 15 min case: R/M = 0.67, tau*/M = 0.61,
# wall time 5x the compute).
INFEASIBLE_SHARE = 0.5
# No job checkpoints more often than once a minute; Daly's optimum goes to 0 with free
# checkpoints or near-continuous interruptions, and the segment count to infinity.
MIN_INTERVAL_H = 1.0 / 60.0


@dataclass(frozen=True)
class Option:
    """Expected figures for one purchase option (spot or on-demand)."""

    name: str
    price: float  # USD per node-hour
    interruption_rate: float  # job-level, per hour (preemptions + hardware)
    preemption_rate: float  # job-level preemption events per hour (0 on-demand)
    interval_h: float  # checkpoint interval used
    young_interval_h: float
    busy_h: float  # billed: compute, checkpoints, lost work, restarts
    wait_h: float  # unbilled capacity waits
    cost: float
    infeasible: str | None  # why checkpoint/restart cannot make progress, else None

    @property
    def mtbi_h(self) -> float:
        return 1.0 / self.interruption_rate if self.interruption_rate > 0 else math.inf

    @property
    def wall_h(self) -> float:
        return self.busy_h + self.wait_h

    @property
    def interruptions(self) -> float:
        return self.busy_h * self.interruption_rate

    @property
    def preemptions(self) -> float:
        return self.busy_h * self.preemption_rate


def evaluate(scenario: Scenario, name: str, price: float, preemption_rate: float) -> Option:
    """Daly's model for one option; `preemption_rate` is job-level (0 for on-demand)."""
    rate = preemption_rate + scenario.hardware_job_rate
    mtbi = 1.0 / rate if rate > 0 else math.inf
    optimum = daly.daly_interval(scenario.checkpoint_h, mtbi)
    interval = min(scenario.interval_h or max(optimum, MIN_INTERVAL_H), scenario.hours)
    busy = daly.wall_time(scenario.hours, interval, scenario.checkpoint_h, scenario.restart_h, mtbi)
    wait_each = scenario.capacity_wait.mean_h if scenario.capacity_wait else 0.0
    wait = busy * preemption_rate * wait_each if math.isfinite(busy) else math.inf
    return Option(
        name=name,
        price=price,
        interruption_rate=rate,
        preemption_rate=preemption_rate,
        interval_h=interval,
        young_interval_h=daly.young_interval(scenario.checkpoint_h, mtbi),
        busy_h=busy,
        wait_h=wait,
        cost=busy * price * scenario.nodes,
        infeasible=_infeasible(scenario, interval, mtbi),
    )


def _infeasible(scenario: Scenario, interval_h: float, mtbi_h: float) -> str | None:
    if math.isinf(mtbi_h):
        return None
    restart_min, mtbi_min = scenario.restart_h * 60, mtbi_h * 60
    if scenario.restart_h >= INFEASIBLE_SHARE * mtbi_h:
        return (
            f"a restart ({restart_min:.3g} min) takes {scenario.restart_h / mtbi_h:.0%} of the "
            f"{mtbi_min:.3g} min between interruptions"
        )
    if interval_h >= INFEASIBLE_SHARE * mtbi_h and interval_h < scenario.hours:
        return (
            f"the checkpoint interval ({interval_h * 60:.3g} min) is {interval_h / mtbi_h:.0%} "
            f"of the {mtbi_min:.3g} min between interruptions"
        )
    return None


def spot(scenario: Scenario, preempt_rate: float | None = None) -> Option:
    """Spot: preemption events plus hardware failures; `preempt_rate` per node-hour."""
    job_rate = scenario.preemption_job_rate(preempt_rate)
    return evaluate(scenario, "spot", scenario.spot_price, job_rate)


def on_demand(scenario: Scenario) -> Option:
    """On-demand: hardware failures only, no capacity waits."""
    return evaluate(scenario, "on-demand", scenario.on_demand_price, 0.0)


def spot_wins(scenario: Scenario, preempt_rate: float, target: float | None = None) -> bool:
    """Spot is the better buy at this rate: cheaper than on-demand and still feasible (an
    infeasible spot run is no option at any price)."""
    target = on_demand(scenario).cost if target is None else target
    option = spot(scenario, preempt_rate)
    return option.infeasible is None and option.cost < target


def break_even_rate(scenario: Scenario, *, rel_tol: float = 1e-9) -> float:
    """Preemption rate per node-hour beyond which spot stops paying: where its expected cost
    reaches on-demand's, or earlier where checkpoint/restart stops making progress; found by
    bisection on a log scale. 0 when spot never wins, inf when it always does."""
    target = on_demand(scenario).cost
    if not spot_wins(scenario, 0.0, target):
        return 0.0
    low, high = 0.0, max(scenario.preempt_rate, 1e-6)
    while spot_wins(scenario, high, target):
        low, high = high, high * 4.0
        if high > 1e6:
            return math.inf
    while high - low > rel_tol * high:
        middle = math.sqrt(low * high) if low > 0 else high / 1e3
        if spot_wins(scenario, middle, target):
            low = middle
        else:
            high = middle
        if low == 0 and high < 1e-12:
            return high
    return 0.5 * (low + high)
