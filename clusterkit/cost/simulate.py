"""Monte Carlo of the process the analytic model describes, vectorised over trials.

Each trial walks through the job one node-group lifetime at a time: a lifetime ends with a
preemption (the chosen hazard) or a hardware failure (exponential), whichever comes first.
Every lifetime but the first starts with a restart; whole checkpoint segments finished in it
are kept, the rest is lost. A preemption adds a capacity wait (unbilled) before the next one.
All trials advance together, so the loop runs once per interruption, not once per trial.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from clusterkit.cost import analytic, daly
from clusterkit.cost.scenario import PREEMPTIBLE_LIFETIME_H, CapacityWait, Hazard, Scenario

# Beyond this many expected interruptions per trial the job is hopeless and the loop slow.
MAX_EXPECTED_INTERRUPTIONS = 20_000
# --trials accepts at most this many; more would not move a percentile anyone reads.
MAX_TRIALS = 1_000_000
# Trials run in chunks of this many, so the working arrays stay a few MB whatever --trials is.
CHUNK_TRIALS = 100_000
# Work bound: trials x (expected interruptions + 1) lifetimes drawn, about 10 s on one core.
MAX_LIFETIMES = 20_000_000


class Unfinished(Exception):
    """Some simulated run was still going after the round limit: with a 24 h lifetime cap or
    a very heavy-tailed hazard, a run can need far more interruptions than the mean rate says,
    or never finish at all."""


def round_limit(expected_interruptions: float) -> int:
    """Interruptions a run may take before the simulation gives up on it."""
    return int(10 * (expected_interruptions + 1)) + 200


class Runs(NamedTuple):
    """Per-trial outcomes for one option."""

    busy_h: np.ndarray  # billed hours
    wall_h: np.ndarray  # billed + capacity waits
    cost: np.ndarray
    interruptions: np.ndarray


@dataclass(frozen=True)
class Summary:
    mean_wall_h: float
    p10_wall_h: float
    p50_wall_h: float
    p90_wall_h: float
    mean_cost: float
    p10_cost: float
    p50_cost: float
    p90_cost: float
    mean_interruptions: float
    p_miss_deadline: float | None


def lifetimes(rng: np.random.Generator, count: int, job_rate: float, hazard: Hazard) -> np.ndarray:
    """Time to the next preemption event of fresh nodes; the mean rate is `job_rate`
    (before the 24 h cap of preemptible VMs, which only shortens lifetimes)."""
    if job_rate <= 0:
        if hazard.kind == "preemptible24h":
            return np.full(count, PREEMPTIBLE_LIFETIME_H)
        return np.full(count, np.inf)
    mean = 1.0 / job_rate
    if hazard.kind == "weibull":
        scale = mean / math.gamma(1.0 + 1.0 / hazard.shape)
        return scale * rng.weibull(hazard.shape, count)
    draws = rng.exponential(mean, count)
    if hazard.kind == "preemptible24h":
        np.minimum(draws, PREEMPTIBLE_LIFETIME_H, out=draws)
    return draws


@dataclass(frozen=True)
class TrialInputs:
    """What every trial of one option shares: the process the Monte Carlo walks through."""

    scenario: Scenario
    price: float  # USD per node-hour
    preemption_job_rate: float  # nominal job-level rate before the 24 h cap; 0 on-demand
    interval_h: float  # checkpoint interval
    hazard: Hazard
    capacity_wait: CapacityWait | None  # unbilled wait after a preemption; None: no wait
    max_rounds: int  # interruptions a run may take before Unfinished

    @classmethod
    def spot(cls, scenario: Scenario, option: analytic.Option, preempt_rate: float) -> TrialInputs:
        """Spot at a per-node preemption rate, with the analytic option's interval."""
        return cls(
            scenario,
            price=scenario.spot_price,
            preemption_job_rate=scenario.nodes * preempt_rate / scenario.effective_correlation,
            interval_h=option.interval_h,
            hazard=scenario.hazard,
            capacity_wait=scenario.capacity_wait,
            max_rounds=round_limit(option.interruptions),
        )

    @classmethod
    def on_demand(cls, scenario: Scenario, option: analytic.Option) -> TrialInputs:
        """On-demand: hardware failures only, no capacity wait."""
        return cls(
            scenario,
            price=scenario.on_demand_price,
            preemption_job_rate=0.0,
            interval_h=option.interval_h,
            hazard=Hazard(),
            capacity_wait=None,
            max_rounds=round_limit(option.interruptions),
        )


def run(rng: np.random.Generator, trials: int, option: TrialInputs) -> Runs:
    """`trials` runs of one option, CHUNK_TRIALS at a time (bounded working memory); raises
    Unfinished when some run is still going after `option.max_rounds` interruptions."""
    chunks = [
        _run_chunk(rng, min(CHUNK_TRIALS, trials - start), option)
        for start in range(0, trials, CHUNK_TRIALS)
    ]
    if len(chunks) == 1:
        return chunks[0]
    return Runs(*(np.concatenate([getattr(c, name) for c in chunks]) for name in Runs._fields))


def _run_chunk(rng: np.random.Generator, trials: int, option: TrialInputs) -> Runs:
    """Simulate `trials` runs of one option."""
    scenario, interval_h, hazard = option.scenario, option.interval_h, option.hazard
    full, remainder = daly.segments(scenario.hours, interval_h)
    segment = interval_h + scenario.checkpoint_h
    last = remainder + scenario.checkpoint_h if remainder else 0.0
    hardware = scenario.hardware_job_rate
    busy = np.zeros(trials)
    waits = np.zeros(trials)
    interruptions = np.zeros(trials, dtype=np.int64)
    done_segments = np.zeros(trials, dtype=np.int64)
    active = np.arange(trials)
    restart = 0.0  # the first lifetime starts the job, later ones restart it
    rounds = 0
    while active.size:
        rounds += 1
        if rounds > option.max_rounds:
            raise Unfinished(option.max_rounds)
        count = active.size
        preempt_at = lifetimes(rng, count, option.preemption_job_rate, hazard)
        fail_at = rng.exponential(1.0 / hardware, count) if hardware > 0 else np.inf
        life = np.minimum(preempt_at, fail_at)
        left = (full - done_segments[active]) * segment + last
        usable = life - restart
        finished = usable >= left
        winners = active[finished]
        busy[winners] += restart + left[finished]
        lost = ~finished
        active, usable, life = active[lost], usable[lost], life[lost]
        busy[active] += life
        interruptions[active] += 1
        done_segments[active] += np.floor(np.maximum(usable, 0.0) / segment).astype(np.int64)
        wait = option.capacity_wait
        if wait is not None:
            preempted = active[np.broadcast_to(preempt_at <= fail_at, lost.shape)[lost]]
            waits[preempted] += rng.lognormal(wait.mu, wait.sigma, preempted.size)
        restart = scenario.restart_h
    return Runs(busy, busy + waits, busy * option.price * scenario.nodes, interruptions)


def summarize(runs: Runs, deadline_h: float | None) -> Summary:
    wall10, wall50, wall90 = np.percentile(runs.wall_h, [10, 50, 90])
    cost10, cost50, cost90 = np.percentile(runs.cost, [10, 50, 90])
    return Summary(
        mean_wall_h=float(runs.wall_h.mean()),
        p10_wall_h=float(wall10),
        p50_wall_h=float(wall50),
        p90_wall_h=float(wall90),
        mean_cost=float(runs.cost.mean()),
        p10_cost=float(cost10),
        p50_cost=float(cost50),
        p90_cost=float(cost90),
        mean_interruptions=float(runs.interruptions.mean()),
        p_miss_deadline=None if deadline_h is None else float((runs.wall_h > deadline_h).mean()),
    )


@dataclass(frozen=True)
class MonteCarlo:
    trials: int
    seed: int
    spot: Summary
    on_demand: Summary
    p_spot_costs_more: float
    skipped: str | None = None  # why no simulation ran (the summaries are then empty)


def simulate(scenario: Scenario, trials: int, seed: int) -> MonteCarlo | str:
    """Both options, paired trial by trial for P(spot costs more); a reason string instead
    when the job would need too many interruptions to simulate."""
    spot_option = analytic.spot(scenario)
    demand_option = analytic.on_demand(scenario)
    for option in (spot_option, demand_option):
        if not option.interruptions <= MAX_EXPECTED_INTERRUPTIONS:
            return (
                f"not simulated: {option.name} expects {_many(option.interruptions)} "
                f"interruptions per run"
            )
    per_trial = 2.0 + spot_option.interruptions + demand_option.interruptions
    trials = max(1, min(trials, MAX_TRIALS, int(MAX_LIFETIMES / per_trial)))
    spot_rng, demand_rng = (
        np.random.default_rng(child) for child in np.random.SeedSequence(seed).spawn(2)
    )
    try:
        spot = TrialInputs.spot(scenario, spot_option, scenario.preempt_rate)
        spot_runs = run(spot_rng, trials, spot)
        demand_runs = run(demand_rng, trials, TrialInputs.on_demand(scenario, demand_option))
    except Unfinished as limit:
        return (
            f"not simulated: some runs were unfinished after {limit.args[0]:,} interruptions "
            f"(hazard {scenario.hazard}: a checkpoint segment may outlast every lifetime)"
        )
    return MonteCarlo(
        trials=trials,
        seed=seed,
        spot=summarize(spot_runs, scenario.deadline_h),
        on_demand=summarize(demand_runs, scenario.deadline_h),
        p_spot_costs_more=float((spot_runs.cost > demand_runs.cost).mean()),
    )


def spot_band(
    scenario: Scenario, preempt_rate: float, trials: int, seed: int
) -> tuple[float, float, float, float] | None:
    """(p10 cost, p90 cost, p10 wall, p90 wall) of spot at another preemption rate, for the
    plot's band; None where spot is infeasible or one point would draw too many lifetimes."""
    option = analytic.spot(scenario, preempt_rate)
    if option.infeasible or not option.interruptions * trials <= MAX_LIFETIMES / 10:
        return None
    try:
        inputs = TrialInputs.spot(scenario, option, preempt_rate)
        runs = run(np.random.default_rng(seed), trials, inputs)
    except Unfinished:
        return None
    cost10, cost90 = np.percentile(runs.cost, [10, 90])
    wall10, wall90 = np.percentile(runs.wall_h, [10, 90])
    return float(cost10), float(cost90), float(wall10), float(wall90)


def _many(count: float) -> str:
    return f"{count:.3g}" if math.isfinite(count) else "unboundedly many"
