"""One estimate: the analytic answer, the simulation, the advice, and every input, as data
that the text table, the JSON document and the plot all read."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

from clusterkit.cost import analytic, simulate
from clusterkit.cost.advice import Advice, advise
from clusterkit.cost.analytic import Option
from clusterkit.cost.scenario import Scenario
from clusterkit.cost.simulate import MonteCarlo

SCHEMA = "clusterkit.cost/1"


@dataclass(frozen=True)
class Provenance:
    """Where the guessed inputs came from (the output names them)."""

    rate_origin: str = "flag"
    price_origin: str = "flags"
    instance: str | None = None
    region: str | None = None
    spot_range: tuple[float, float] | None = None
    catalog_path: str | None = None
    catalog_source: str | None = None
    catalog_date: str | None = None  # the oldest catalog price used
    # Each price's own date (YYYY-MM-DD); None: given by flag (or undated).
    on_demand_date: str | None = None
    spot_date: str | None = None
    flag_prices: tuple[str, ...] = ()  # "on-demand", "spot": given by flag, not the catalog
    correlation_origin: str = "default"
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Estimate:
    scenario: Scenario
    provenance: Provenance
    spot: Option
    on_demand: Option
    break_even_rate: float
    monte_carlo: MonteCarlo | None
    simulation_note: str | None
    advice: Advice
    assumptions: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())


def estimate(
    scenario: Scenario,
    provenance: Provenance | None = None,
    *,
    trials: int = 10_000,
    seed: int = 1,
    warnings: tuple[str, ...] = (),
) -> Estimate:
    """Everything for one scenario; trials=0 skips the simulation."""
    provenance = provenance or Provenance()
    spot, on_demand = analytic.spot(scenario), analytic.on_demand(scenario)
    break_even = analytic.break_even_rate(scenario)
    monte_carlo: MonteCarlo | None = None
    note: str | None = "not simulated: --trials 0" if trials == 0 else None
    if trials:
        outcome = simulate.simulate(scenario, trials, seed)
        monte_carlo, note = (None, outcome) if isinstance(outcome, str) else (outcome, None)
    if monte_carlo is not None and monte_carlo.trials < trials:
        warnings += (
            f"simulated {monte_carlo.trials:,} of {trials:,} trials: each run expects many "
            f"interruptions, and the simulation draws at most "
            f"{simulate.MAX_LIFETIMES:,} lifetimes",
        )
    spot_high = provenance.spot_range[1] if provenance.spot_range else None
    advice = advise(scenario, spot, on_demand, break_even, monte_carlo, spot_high=spot_high)
    return Estimate(
        scenario=scenario,
        provenance=provenance,
        spot=spot,
        on_demand=on_demand,
        break_even_rate=break_even,
        monte_carlo=monte_carlo,
        simulation_note=note,
        advice=advice,
        assumptions=assumptions(scenario, provenance),
        warnings=tuple(warnings) + provenance.notes,
    )


def assumptions(scenario: Scenario, provenance: Provenance) -> tuple[str, ...]:
    """What the answer takes for granted, in the words the output prints."""
    lines = [
        "synchronous training: losing any node stops the job; a restart brings the whole "
        "group back, resumes from the last checkpoint, and is billed",
        "on-demand sees hardware failures only "
        f"({scenario.node_hardware_rate:.2g}/node-h"
        + (", the published GPU rate" if scenario.hardware_rate is None else "")
        + "); spot sees those plus preemptions",
        f"correlation {scenario.correlation:g} ({provenance.correlation_origin}): a "
        "preemption event takes that many nodes on average, so the job stops "
        "N x rate / min(correlation, N) times an hour",
    ]
    wait = scenario.capacity_wait
    lines.append(
        "capacity waits off: lost nodes come back at once"
        if wait is None
        else f"after each preemption the job waits for N nodes (lognormal, median "
        f"{wait.median_h:g} h, mean {wait.mean_h:g} h); waits are not billed because the "
        "nodes are released while waiting"
    )
    lines.append(
        f"checkpoint every {scenario.interval_h * 60:.3g} min (fixed)"
        if scenario.interval_h
        else "checkpoint interval: Daly's optimum for each option"
    )
    if scenario.hazard.kind != "exponential":
        lines.append(
            f"the simulation draws preemptions from {scenario.hazard}; the analytic figures "
            "use exponential interruptions at the same mean rate"
        )
    if provenance.spot_range:
        low, high = provenance.spot_range
        lines.append(f"spot price: middle of the zone range ${low:g}-${high:g} per node-hour")
    return tuple(lines)


def _number(value: float | None) -> float | None:
    """JSON has no infinity: an unbounded figure is null."""
    return value if value is None or math.isfinite(value) else None


def _option(option: Option) -> dict[str, Any]:
    return {
        "price_per_node_hour": option.price,
        "job_interruption_rate_per_hour": option.interruption_rate,
        "job_preemption_rate_per_hour": option.preemption_rate,
        "mtbi_hours": _number(option.mtbi_h),
        "checkpoint_interval_hours": _number(option.interval_h),
        "young_interval_hours": _number(option.young_interval_h),
        "billed_hours": _number(option.busy_h),
        "capacity_wait_hours": _number(option.wait_h),
        "wall_hours": _number(option.wall_h),
        "expected_interruptions": _number(option.interruptions),
        "cost": _number(option.cost),
        "infeasible": option.infeasible,
    }


def to_dict(result: Estimate) -> dict[str, Any]:
    """The JSON document (schema in docs/cost.md)."""
    prov, monte_carlo = result.provenance, result.monte_carlo
    return {
        "schema": SCHEMA,
        "inputs": _inputs(result),
        "catalog": None
        if prov.catalog_path is None
        else {"path": prov.catalog_path, "source": prov.catalog_source, "date": prov.catalog_date},
        "analytic": _analytic(result),
        "monte_carlo": None
        if monte_carlo is None
        else {
            "trials": monte_carlo.trials,
            "seed": monte_carlo.seed,
            "spot": asdict(monte_carlo.spot),
            "on_demand": asdict(monte_carlo.on_demand),
            "p_spot_costs_more": monte_carlo.p_spot_costs_more,
        },
        "simulation_note": result.simulation_note,
        "recommendation": {
            "choice": result.advice.choice,
            "summary": result.advice.headline,
            "driver": result.advice.driver,
            "reasons": list(result.advice.reasons),
        },
        "assumptions": list(result.assumptions),
        "warnings": list(result.warnings),
    }


def _inputs(result: Estimate) -> dict[str, Any]:
    """The job and prices the estimate was made for, and where each came from."""
    scenario, prov = result.scenario, result.provenance
    wait = scenario.capacity_wait
    return {
        "nodes": scenario.nodes,
        "gpus_per_node": scenario.gpus_per_node,
        "hours": scenario.hours,
        "checkpoint_minutes": scenario.checkpoint_h * 60,
        "restart_minutes": scenario.restart_h * 60,
        "preempt_rate_per_node_hour": scenario.preempt_rate,
        "preempt_rate_origin": prov.rate_origin,
        "correlation": scenario.correlation,
        "effective_correlation": scenario.effective_correlation,
        "hardware_rate_per_node_hour": scenario.node_hardware_rate,
        "capacity_wait": None
        if wait is None
        else {"median_hours": wait.median_h, "mean_hours": wait.mean_h},
        "on_demand_price": scenario.on_demand_price,
        "spot_price": scenario.spot_price,
        "on_demand_price_date": prov.on_demand_date,
        "spot_price_date": prov.spot_date,
        "price_origin": prov.price_origin,
        "instance": prov.instance,
        "region": prov.region,
        "spot_price_range": list(prov.spot_range) if prov.spot_range else None,
        "deadline_hours": scenario.deadline_h,
        "interval_minutes": None if scenario.interval_h is None else scenario.interval_h * 60,
        "hazard": str(scenario.hazard),
    }


def _analytic(result: Estimate) -> dict[str, Any]:
    """The model's figures for both options, and how they compare."""
    spot, demand, break_even = result.spot, result.on_demand, result.break_even_rate
    preempt_rate = result.scenario.preempt_rate
    return {
        "spot": _option(spot),
        "on_demand": _option(demand),
        "cost_ratio": _number(spot.cost / demand.cost),
        "time_ratio": _number(spot.wall_h / demand.wall_h),
        "saving": _number(demand.cost - spot.cost),
        "break_even_preempt_rate_per_node_hour": _number(break_even),
        "break_even_over_assumed": _number(break_even / preempt_rate) if preempt_rate > 0 else None,
    }
