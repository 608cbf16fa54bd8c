"""Turn the figures into a one-line recommendation and the reasons behind it.

The reason that matters most is the driving assumption: of the inputs people guess (the
preemption rate, the correlation, the restart time, the spot price), the one whose
plausible alternative moves the answer most, or flips it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from clusterkit.cost import analytic, simulate
from clusterkit.cost.analytic import Option
from clusterkit.cost.scenario import Scenario
from clusterkit.cost.simulate import MonteCarlo
from clusterkit.words import counted

# Spot is not recommended when it misses the deadline in more runs than this.
DEADLINE_RISK = 0.10
# Public 4-node traces counted 2-4x fewer events than N x lambda.
TYPICAL_CORRELATION = 3.0


@dataclass(frozen=True)
class Advice:
    choice: str  # "spot" | "on-demand"
    headline: str  # the one line
    reasons: tuple[str, ...]
    driver: str  # the assumption that drives the answer


def advise(
    scenario: Scenario,
    spot: Option,
    on_demand: Option,
    break_even: float,
    monte_carlo: MonteCarlo | None,
    *,
    spot_high: float | None = None,
) -> Advice:
    choice, headline, by_deadline = _verdict(scenario, spot, on_demand, monte_carlo)
    if by_deadline:
        driver, driver_line = _deadline_driver(scenario, monte_carlo)
    else:
        driver, driver_line = _driver(scenario, spot, on_demand, spot_high)
    reasons = [_rates_line(scenario, spot, on_demand), _margin_line(scenario, break_even)]
    reasons.append(f"driving assumption: {driver_line}")
    if monte_carlo is not None:
        reasons.append(
            f"risk: spot costs more than on-demand in {monte_carlo.p_spot_costs_more:.1%} of "
            f"{monte_carlo.trials:,} simulated runs; p90 cost ${monte_carlo.spot.p90_cost:,.0f} "
            f"spot vs ${monte_carlo.on_demand.p90_cost:,.0f} on-demand"
        )
    if spot.wait_h > 0 and math.isfinite(spot.wait_h):
        reasons.append(f"capacity waits add {spot.wait_h:.3g} h to spot's wall time (not billed)")
    return Advice(choice, headline, tuple(reasons), driver)


def _verdict(
    scenario: Scenario, spot: Option, on_demand: Option, monte_carlo: MonteCarlo | None
) -> tuple[str, str, bool]:
    """(choice, headline, whether the deadline decided it)."""
    if not math.isfinite(on_demand.cost):
        return (
            "on-demand",
            (
                "neither option is expected to finish: hardware failures come faster than "
                "checkpoint/restart makes progress; shorten checkpoints and restarts"
            ),
            False,
        )
    if not spot.infeasible and not math.isfinite(spot.cost):
        spot = replace(spot, infeasible="its expected time is unbounded at this preemption rate")
    if spot.infeasible:
        return (
            "on-demand",
            (
                f"on-demand: spot is infeasible ({spot.infeasible}); checkpoint/restart cannot "
                "make progress: use on-demand or elastic training"
            ),
            False,
        )
    deadline = scenario.deadline_h
    if deadline is not None:
        if monte_carlo is not None:
            miss, miss_demand = (
                monte_carlo.spot.p_miss_deadline or 0.0,
                monte_carlo.on_demand.p_miss_deadline or 0.0,
            )
        else:
            miss = float(spot.wall_h > deadline)
            miss_demand = float(on_demand.wall_h > deadline)
        if miss > DEADLINE_RISK and miss > miss_demand:
            return (
                "on-demand",
                (
                    f"on-demand: spot misses the {deadline:g} h deadline in {miss:.0%} of runs "
                    f"(on-demand {miss_demand:.0%})"
                ),
                True,
            )
    slower = spot.wall_h / on_demand.wall_h - 1.0
    if spot.cost < on_demand.cost:
        saving = on_demand.cost - spot.cost
        return (
            "spot",
            (
                f"spot: saves {saving / on_demand.cost:.0%} (${saving:,.0f}) expected, "
                f"{_slower(slower)} ({_hours(spot.wall_h)} vs {_hours(on_demand.wall_h)})"
            ),
            False,
        )
    extra = spot.cost / on_demand.cost - 1.0
    return (
        "on-demand",
        (
            f"on-demand: spot would cost {extra:.0%} more (${spot.cost:,.0f} vs "
            f"${on_demand.cost:,.0f}) and be {_slower(slower)}"
        ),
        False,
    )


def _slower(share: float) -> str:
    if not math.isfinite(share):
        return "unboundedly slower"
    return f"{share:.0%} slower" if share >= 0.005 else "as fast"


def _rates_line(scenario: Scenario, spot: Option, on_demand: Option) -> str:
    correlation = (
        f" / correlation {scenario.effective_correlation:g}"
        if scenario.effective_correlation > 1
        else ""
    )
    return (
        f"the job stops every {_hours(spot.mtbi_h)} on spot ({counted(scenario.nodes, 'node')} x "
        f"{scenario.preempt_rate:.3g}/node-h{correlation}, plus hardware) and every "
        f"{_hours(on_demand.mtbi_h)} on-demand (hardware only); checkpoints every "
        f"{_hours(spot.interval_h)} and {_hours(on_demand.interval_h)}"
    )


def _margin_line(scenario: Scenario, break_even: float) -> str:
    if break_even <= 0:
        return "spot is never cheaper: its price is not below on-demand"
    if math.isinf(break_even):
        return "spot stays cheaper at any preemption rate"
    beyond = analytic.spot(scenario, break_even * (1 + 1e-6))
    if beyond.infeasible and beyond.cost < analytic.on_demand(scenario).cost:
        where = (
            f"spot stops paying at {break_even:.3g} preemptions per node-hour, where "
            "checkpoint/restart stops making progress (it would still look cheaper)"
        )
    else:
        where = f"spot stops being cheaper at {break_even:.3g} preemptions per node-hour"
    if scenario.preempt_rate <= 0:
        return f"{where} (the rate assumed is 0)"
    times = break_even / scenario.preempt_rate
    return (
        f"{where} ({times:,.0f}x the rate assumed)"
        if times >= 100
        else (f"{where} ({times:.3g}x the rate assumed)")
    )


def _driver(
    scenario: Scenario,
    spot: Option,
    on_demand: Option,
    spot_high: float | None,
) -> tuple[str, str]:
    """The alternative assumption that flips the answer, else moves spot's cost most."""
    base = spot.cost / on_demand.cost
    alternatives: list[tuple[str, str, Scenario]] = [
        (
            "preemption rate",
            f"at twice the preemption rate ({2 * scenario.preempt_rate:.3g}/node-h)",
            replace(scenario, preempt_rate=2 * scenario.preempt_rate),
        ),
        (
            "restart time",
            f"with restarts twice as long ({2 * scenario.restart_h * 60:.3g} min)",
            replace(scenario, restart_h=2 * scenario.restart_h),
        ),
    ]
    if scenario.nodes > 1 and scenario.effective_correlation > 1:
        alternatives.append(
            (
                "correlation",
                "if preemptions hit nodes independently (correlation 1)",
                replace(scenario, correlation=1.0),
            )
        )
    elif scenario.nodes > 1:
        typical = min(TYPICAL_CORRELATION, scenario.nodes)
        alternatives.append(
            (
                "correlation",
                f"if preemptions came in events of {typical:g} nodes (public traces: 2-4)",
                replace(scenario, correlation=typical),
            )
        )
    if spot_high is not None and spot_high > scenario.spot_price:
        alternatives.append(
            (
                "spot price",
                f"at the top of the zone range (${spot_high:g}/node-h)",
                replace(scenario, spot_price=spot_high),
            )
        )
    best: tuple[float, str, str] | None = None
    for name, words, alternative in alternatives:
        alt_spot = analytic.spot(alternative)
        ratio = alt_spot.cost / on_demand.cost
        flips = _cheaper(alt_spot, ratio) != _cheaper(spot, base)
        line = (
            f"the {name}: {words} spot would cost {_ratio(ratio)} of on-demand"
            + (" and the cost answer flips" if flips else "")
            + (f" ({alt_spot.infeasible})" if alt_spot.infeasible and not spot.infeasible else "")
        )
        comparable = 0 < ratio < math.inf and 0 < base < math.inf
        score = math.inf if flips else abs(math.log(ratio / base)) if comparable else 0.0
        if best is None or score > best[0]:
            best = (score, name, line)
    assert best is not None
    return best[1], best[2]


def _deadline_driver(scenario: Scenario, monte_carlo: MonteCarlo | None) -> tuple[str, str]:
    """The alternative that brings spot within the deadline risk, else helps it most."""
    alternatives: list[tuple[str, str, Scenario]] = []
    if scenario.capacity_wait is not None:
        alternatives.append(
            ("capacity waits", "without capacity waits", replace(scenario, capacity_wait=None))
        )
    alternatives += [
        (
            "preemption rate",
            f"at half the preemption rate ({scenario.preempt_rate / 2:.3g}/node-h)",
            replace(scenario, preempt_rate=scenario.preempt_rate / 2),
        ),
        (
            "restart time",
            f"with restarts half as long ({scenario.restart_h * 30:.3g} min)",
            replace(scenario, restart_h=scenario.restart_h / 2),
        ),
    ]
    best: tuple[float, str, str] | None = None
    for name, words, alternative in alternatives:
        miss = _miss_probability(alternative, monte_carlo)
        flips = miss <= DEADLINE_RISK
        line = f"the {name}: {words} spot would miss the deadline in {miss:.0%} of runs" + (
            " and the answer flips" if flips else ""
        )
        score = 2.0 - miss if flips else -miss
        if best is None or score > best[0]:
            best = (score, name, line)
    assert best is not None
    return best[1], best[2]


def _miss_probability(scenario: Scenario, monte_carlo: MonteCarlo | None) -> float:
    """From a smaller simulation with the same seed, or the expectation without one."""
    deadline = scenario.deadline_h or math.inf
    if monte_carlo is None:
        return float(analytic.spot(scenario).wall_h > deadline)
    outcome = simulate.simulate(scenario, min(monte_carlo.trials, 4000), monte_carlo.seed)
    if isinstance(outcome, str):
        return 1.0
    return outcome.spot.p_miss_deadline or 0.0


def _cheaper(spot: Option, ratio: float) -> bool:
    """Whether spot wins on cost alone (the deadline aside)."""
    return spot.infeasible is None and ratio < 1


def _ratio(ratio: float) -> str:
    return "an unbounded multiple" if not math.isfinite(ratio) else f"{ratio:.0%}"


def _hours(hours: float) -> str:
    if math.isinf(hours):
        return "never"
    if hours < 1:
        return f"{hours * 60:.3g} min"
    return f"{hours:,.0f} h" if hours >= 100 else f"{hours:.3g} h"
