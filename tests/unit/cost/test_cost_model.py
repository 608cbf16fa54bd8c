"""Daly's published values, job-level rates, feasibility and break-even."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from clusterkit.cost import analytic, daly
from clusterkit.cost.scenario import CapacityWait, Hazard, Scenario
from clusterkit.errors import UsageError

DELTA, RESTART, SOLVE = 5 / 60, 10 / 60, 500.0
# Daly (2006): (M hours, tau* minutes, E[T_w] / T_s)
PUBLISHED = [(24.0, 116.7, 1.096), (6.0, 56.7, 1.220), (0.25, 9.1, 5.008)]


def daly_case(mtbi_h: float, **changes: object) -> Scenario:
    base = Scenario(
        nodes=1,
        gpus_per_node=8,
        hours=SOLVE,
        checkpoint_h=DELTA,
        restart_h=RESTART,
        preempt_rate=1 / mtbi_h,
        on_demand_price=3.0,
        spot_price=1.0,
        hardware_rate=0.0,
    )
    return replace(base, **changes)


@pytest.mark.parametrize(("mtbi", "tau_min", "ratio"), PUBLISHED)
def test_daly_published_interval_and_wall_time(mtbi: float, tau_min: float, ratio: float) -> None:
    tau = daly.daly_interval(DELTA, mtbi)
    assert tau * 60 == pytest.approx(tau_min, rel=0.01)
    assert daly.daly_wall_time(SOLVE, tau, DELTA, RESTART, mtbi) / SOLVE == pytest.approx(
        ratio, rel=0.01
    )


@pytest.mark.parametrize(("mtbi", "tau_min", "ratio"), PUBLISHED)
def test_estimator_reproduces_daly(mtbi: float, tau_min: float, ratio: float) -> None:
    spot = analytic.spot(daly_case(mtbi))
    assert spot.interval_h * 60 == pytest.approx(tau_min, rel=0.01)
    assert spot.busy_h / SOLVE == pytest.approx(ratio, rel=0.01)


def test_young_is_first_order_daly() -> None:
    assert daly.young_interval(DELTA, 24) == pytest.approx(math.sqrt(2 * DELTA * 24))
    assert daly.daly_interval(DELTA, 1e6) == pytest.approx(daly.young_interval(DELTA, 1e6), 1e-3)


def test_checkpoint_beyond_twice_mtbi_uses_mtbi() -> None:
    assert daly.daly_interval(3.0, 1.0) == 1.0


def test_no_interruptions_costs_compute_plus_one_checkpoint() -> None:
    scenario = daly_case(1.0, preempt_rate=0.0)
    spot = analytic.spot(scenario)
    assert spot.mtbi_h == math.inf
    assert spot.busy_h == pytest.approx(SOLVE + DELTA)
    assert spot.cost == pytest.approx((SOLVE + DELTA) * 1.0)


def test_job_rate_scales_with_nodes_and_divides_by_correlation() -> None:
    scenario = daly_case(10.0, nodes=8, preempt_rate=0.01)
    assert scenario.preemption_job_rate() == pytest.approx(0.08)
    assert replace(scenario, correlation=4).preemption_job_rate() == pytest.approx(0.02)


def test_single_node_ignores_correlation() -> None:
    one = daly_case(10.0, nodes=1, preempt_rate=0.05)
    assert replace(one, correlation=3).preemption_job_rate() == one.preemption_job_rate()
    assert analytic.spot(replace(one, correlation=3)).cost == analytic.spot(one).cost


def test_correlation_is_capped_at_node_count() -> None:
    scenario = daly_case(10.0, nodes=4, preempt_rate=0.05, correlation=50)
    assert scenario.effective_correlation == 4
    assert scenario.preemption_job_rate() == pytest.approx(0.05)


def test_correlation_below_one_is_rejected() -> None:
    with pytest.raises(UsageError, match="correlation"):
        daly_case(10.0, correlation=0.5)


def test_on_demand_sees_hardware_failures_only() -> None:
    scenario = daly_case(1.0, nodes=16, hardware_rate=None, gpus_per_node=8)
    demand = analytic.on_demand(scenario)
    assert demand.interruption_rate == pytest.approx(16 * 1.6e-4)
    assert demand.preemption_rate == 0
    assert demand.wait_h == 0
    spot = analytic.spot(scenario)
    assert spot.interruption_rate == pytest.approx(16 + 16 * 1.6e-4)


def test_capacity_waits_add_time_not_cost() -> None:
    scenario = daly_case(6.0, capacity_wait=CapacityWait(0.4, 1.5))
    without = analytic.spot(daly_case(6.0))
    waited = analytic.spot(scenario)
    assert waited.cost == without.cost
    assert waited.wait_h == pytest.approx(waited.preemptions * 1.5)
    assert waited.wall_h > without.wall_h


def test_infeasible_when_restart_approaches_mtbi() -> None:
    assert analytic.spot(daly_case(0.25)).infeasible  # Daly's M = 15 min case
    assert analytic.spot(daly_case(6.0)).infeasible is None
    spot = analytic.spot(daly_case(10.0, restart_h=6.0))
    assert spot.infeasible and "restart" in spot.infeasible


def test_break_even_costs_are_equal() -> None:
    scenario = daly_case(
        24.0, nodes=4, preempt_rate=0.01, correlation=2, hardware_rate=None, spot_price=2.0
    )
    rate = analytic.break_even_rate(scenario)
    assert 0.01 < rate < math.inf
    spot, demand = analytic.spot(scenario, rate), analytic.on_demand(scenario)
    assert spot.cost == pytest.approx(demand.cost, rel=1e-6)
    assert (
        analytic.spot(scenario, rate * 0.9).cost
        < demand.cost
        < analytic.spot(scenario, rate * 1.1).cost
    )


def test_break_even_stops_where_spot_becomes_infeasible_even_if_cheaper() -> None:
    """Very cheap spot still looks cheaper where checkpoint/restart no longer makes progress:
    break-even is then the start of the infeasible range, never to the right of it."""
    scenario = daly_case(24.0, nodes=4, preempt_rate=0.01, spot_price=0.3)
    rate = analytic.break_even_rate(scenario)
    assert analytic.spot(scenario, rate * 0.99).infeasible is None
    beyond = analytic.spot(scenario, rate * 1.01)
    assert beyond.infeasible and beyond.cost < analytic.on_demand(scenario).cost


def test_break_even_zero_when_spot_not_cheaper() -> None:
    assert analytic.break_even_rate(daly_case(24.0, spot_price=3.0)) == 0.0


def test_hazard_parsing() -> None:
    assert Hazard.parse("weibull:0.7") == Hazard("weibull", 0.7)
    assert str(Hazard.parse("preemptible24h")) == "preemptible24h"
    for bad in ("weibull", "weibull:-1", "gamma"):
        with pytest.raises(UsageError, match="hazard"):
            Hazard.parse(bad)


def test_preemptible24h_adds_daily_stops() -> None:
    hazard = Hazard("preemptible24h")
    assert hazard.mean_rate(0.0) == pytest.approx(1 / 24)
    assert hazard.mean_rate(1.0) == pytest.approx(1.0, rel=1e-9)
    assert hazard.mean_rate(0.01) > 0.01 + 0.5 / 24


def test_capacity_wait_needs_mean_at_least_median() -> None:
    with pytest.raises(UsageError, match="median"):
        CapacityWait(2.0, 1.0)
    wait = CapacityWait(0.4, 1.5)
    assert math.exp(wait.mu + wait.sigma**2 / 2) == pytest.approx(1.5)
