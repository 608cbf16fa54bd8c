"""The Monte Carlo agrees with the analytic model and is reproducible."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from clusterkit.cost import analytic, simulate
from clusterkit.cost.scenario import CapacityWait, Hazard, Scenario

# Daly's cases; the M = 15 min one needs ~10,000 interruptions per run, so fewer trials.
CASES = [(24.0, 2000), (6.0, 2000), (0.25, 150)]


def daly_case(mtbi_h: float) -> Scenario:
    return Scenario(
        nodes=1,
        gpus_per_node=8,
        hours=500.0,
        checkpoint_h=5 / 60,
        restart_h=10 / 60,
        preempt_rate=1 / mtbi_h,
        on_demand_price=3.0,
        spot_price=1.0,
        hardware_rate=0.0,
    )


@pytest.mark.parametrize(("mtbi", "trials"), CASES)
def test_monte_carlo_mean_matches_daly(mtbi: float, trials: int) -> None:
    scenario = daly_case(mtbi)
    result = simulate.simulate(scenario, trials, seed=7)
    assert isinstance(result, simulate.MonteCarlo)
    expected = analytic.spot(scenario)
    assert result.spot.mean_wall_h == pytest.approx(expected.wall_h, rel=0.02)
    assert result.spot.mean_cost == pytest.approx(expected.cost, rel=0.02)


def test_monte_carlo_matches_with_nodes_hardware_and_waits() -> None:
    scenario = replace(
        daly_case(24.0),
        nodes=4,
        hours=72.0,
        preempt_rate=0.03,
        correlation=2.0,
        hardware_rate=None,
        capacity_wait=CapacityWait(0.4, 1.5),
    )
    result = simulate.simulate(scenario, 20_000, seed=3)
    assert isinstance(result, simulate.MonteCarlo)
    spot, demand = analytic.spot(scenario), analytic.on_demand(scenario)
    assert result.spot.mean_wall_h == pytest.approx(spot.wall_h, rel=0.02)
    assert result.spot.mean_interruptions == pytest.approx(spot.interruptions, rel=0.03)
    assert result.on_demand.mean_cost == pytest.approx(demand.cost, rel=0.02)


def test_same_seed_same_answer_other_seed_other_answer() -> None:
    scenario = replace(daly_case(6.0), hours=48.0)
    first = simulate.simulate(scenario, 500, seed=11)
    again = simulate.simulate(scenario, 500, seed=11)
    other = simulate.simulate(scenario, 500, seed=12)
    assert first == again
    assert first != other


def test_percentiles_are_ordered_and_deadline_probability() -> None:
    scenario = replace(daly_case(6.0), hours=48.0, deadline_h=55.0)
    result = simulate.simulate(scenario, 4000, seed=1)
    assert isinstance(result, simulate.MonteCarlo)
    assert result.spot.p50_wall_h <= result.spot.p90_wall_h
    assert 0.0 < result.spot.p_miss_deadline < 1.0
    assert result.on_demand.p_miss_deadline == 0.0  # no hardware failures, no preemptions
    assert result.p_spot_costs_more == 0.0  # a third of the price, at most 2x the time here


def test_weibull_keeps_the_mean_rate() -> None:
    rng = np.random.default_rng(0)
    draws = simulate.lifetimes(rng, 200_000, 0.5, Hazard("weibull", 0.7))
    assert draws.mean() == pytest.approx(2.0, rel=0.02)


def test_preemptible_vms_stop_at_24_hours() -> None:
    rng = np.random.default_rng(0)
    draws = simulate.lifetimes(rng, 10_000, 0.001, Hazard("preemptible24h"))
    assert draws.max() == 24.0
    never = simulate.lifetimes(rng, 5, 0.0, Hazard("preemptible24h"))
    assert (never == 24.0).all()


def test_preemptible24h_simulation_matches_its_mean_rate() -> None:
    """Over a long job the 24 h cap makes at least one stop a day."""
    scenario = replace(
        daly_case(24.0), hours=120.0, preempt_rate=0.001, hazard=Hazard("preemptible24h")
    )
    result = simulate.simulate(scenario, 2000, seed=5)
    assert isinstance(result, simulate.MonteCarlo)
    assert result.spot.mean_interruptions >= 4


def test_hopeless_jobs_are_not_simulated() -> None:
    scenario = replace(daly_case(0.25), hours=50_000.0)
    outcome = simulate.simulate(scenario, 10, seed=1)
    assert isinstance(outcome, str) and "interruptions" in outcome
    assert math.isfinite(analytic.spot(scenario).busy_h)
