"""Time `clusterkit cost`'s two engines against their targets and print the ratios.

Analytic answer (both options, break-even by bisection, advice): target under 10 ms.
Monte Carlo of 100,000 trials of both options: target under 1 s.
Run: python benchmarks/bench_cost.py
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

from clusterkit.cost import analytic, simulate
from clusterkit.cost.advice import advise
from clusterkit.cost.scenario import CapacityWait, Scenario

ANALYTIC_TARGET_S = 0.010
MONTE_CARLO_TARGET_S = 1.0
TRIALS = 100_000

# 4 nodes of p5.48xlarge for 72 h, preemptions every 50 node-hours in events of 2 nodes.
SCENARIO = Scenario(
    nodes=4,
    gpus_per_node=8,
    hours=72.0,
    checkpoint_h=5 / 60,
    restart_h=15 / 60,
    preempt_rate=0.02,
    on_demand_price=55.04,
    spot_price=21.69,
    correlation=2.0,
    capacity_wait=CapacityWait(0.4, 1.5),
    deadline_h=90.0,
)


def analytic_answer() -> None:
    spot, demand = analytic.spot(SCENARIO), analytic.on_demand(SCENARIO)
    advise(SCENARIO, spot, demand, analytic.break_even_rate(SCENARIO), None)


def monte_carlo() -> None:
    simulate.simulate(SCENARIO, TRIALS, seed=1)


def best_of(function: Callable[[], None], repeats: int) -> tuple[float, float]:
    """(best, median) seconds over `repeats` runs after one warm-up."""
    function()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times), statistics.median(times)


def main() -> None:
    for name, function, target, repeats in (
        ("analytic answer", analytic_answer, ANALYTIC_TARGET_S, 50),
        (f"Monte Carlo, {TRIALS:,} trials", monte_carlo, MONTE_CARLO_TARGET_S, 5),
    ):
        best, median = best_of(function, repeats)
        print(
            f"{name:32s} best {best * 1e3:8.2f} ms  median {median * 1e3:8.2f} ms  "
            f"target {target * 1e3:6.0f} ms  ratio to target {median / target:.3f}"
        )


if __name__ == "__main__":
    main()
