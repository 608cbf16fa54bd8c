"""`clusterkit cost` at and beyond the edges: every input range-checked (one line, exit 2),
finite figures only (no nan/inf in text or JSON), bounded simulation work; and the output
fixes of the first-day review (reason line, `5%`, break-even vs infeasible, p10-p90 band)."""

from __future__ import annotations

import json
import random
import re
import time
import warnings
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from clusterkit.cost import analytic, plot, simulate
from clusterkit.cost.estimate import estimate
from clusterkit.cost.rates import bucket_rate, parse_rate
from clusterkit.cost.scenario import Hazard, Scenario
from tests.support.cli import CliRun, run_cli

PRICES = ["--on-demand-price", "55", "--spot-price", "21"]
JOB = ["--nodes", "4", "--hours", "72", "--preempt-rate", "0.02", *PRICES]
NOT_A_NUMBER = re.compile(r"\b(nan|inf|infinity)\b|\$inf|inf%|infx", re.IGNORECASE)


def run_cost(argv: list[str]) -> CliRun:
    return run_cli(["cost", *argv], timeout=60)


# Warnings the interpreter's default filters keep off stderr; any other would reach the user.
HIDDEN_WARNINGS = (DeprecationWarning, PendingDeprecationWarning, ImportWarning, ResourceWarning)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (["--preempt-rate", "1e308"], "--preempt-rate 1e308: must be at least 0 and at most 100"),
        (["--hardware-rate", "1e308"], "--hardware-rate 1e+308: must be at least 0"),
        (["--seed", "-1"], "--seed -1: must be at least 0 and at most 4,294,967,295"),
        (["--trials", "1000000000000"], "--trials 1000000000000: must be at least 0 and at most"),
        (["--trials", "10000000000"], "--trials 10000000000: must be at least 0 and at most"),
        (["--gpus-per-node", "0"], "--gpus-per-node 0: must be a whole number from 1 to 1,024"),
        (["--on-demand-price", "1e300"], "--on-demand-price 1e+300: must be above 0"),
        (["--spot-price", "inf"], "--spot-price inf: must be above 0"),
        (["--hours", "nan"], "--hours nan: must be above 0"),
        (["--checkpoint-min", "1e12"], "--checkpoint-min 1e+12"),
        (["--interval", "1e-300"], "--interval 1e-300: must be at least 1"),
        (["--correlation", "1e300"], "--correlation 1e+300"),
        (["--capacity-wait-mean", "1e300"], "--capacity-wait-mean 1e300"),
        (["--hazard", "weibull:1e-300"], "Weibull needs a shape from 0.1 to 10"),
        (["--preempt-rate", "100%"], "from 0% to below 100%"),
        (["--nodes", "1000000"], "--nodes 1000000: must be a whole number from 1 to 100,000"),
    ],
)
def test_out_of_range_inputs_are_one_line_exit_2(
    change: list[str], words: str, capfd: pytest.CaptureFixture[str]
) -> None:
    """One line and nothing else: no traceback, and nothing on the process's own streams
    either (a numpy overflow warning, say, which a shell would show under the line)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        status, out, err = run_cost([*JOB, *change])
    assert status == 2, err
    assert out == "" and err.count("\n") == 1
    assert err.startswith("clusterkit: error: ") and words in err
    assert [w for w in caught if not issubclass(w.category, HIDDEN_WARNINGS)] == []
    assert tuple(capfd.readouterr()) == ("", "")


def test_inventory_gpus_per_node_zero_is_refused_not_replaced(tmp_path: Path) -> None:
    inventory = tmp_path / "inv.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    a: {}\n    b: {}\n  vars:\n    clusterkit:\n      cost:\n"
        "        gpus_per_node: 0\n"
    )
    status, _, err = run_cost([str(inventory), "--hours", "5", "--preempt-rate", "0.1", *PRICES])
    assert status == 2 and err.count("\n") == 1
    assert "clusterkit.cost.gpus_per_node" in err and "got 0" in err


# Edges of every range, combined at random (seeded): the figures may be hopeless, but they
# are always finite words and numbers.
EDGES = {
    "--nodes": ["1", "100000"],
    "--hours": ["1e-6", "100000"],
    "--checkpoint-min": ["0", "10080"],
    "--restart-min": ["0", "10080"],
    "--preempt-rate": ["0", "1e-12", "100", ">20%", "99.9%"],
    "--hardware-rate": ["0", "100"],
    "--on-demand-price": ["1e-6", "1000000"],
    "--spot-price": ["1e-6", "1000000"],
    "--correlation": ["1", "100000"],
    "--capacity-wait-median": ["off", "1e-6", "10000"],
    "--interval": [None, "1", "6000000"],
    "--deadline": [None, "1e-6", "1000000"],
    "--hazard": ["exponential", "weibull:0.1", "weibull:10", "preemptible24h"],
}


def _no_non_numbers(text: str, document: bool) -> None:
    match = NOT_A_NUMBER.search(text)
    assert match is None, text[max(0, match.start() - 100) : match.end() + 40]
    if document:

        def refuse(token: str) -> None:
            raise AssertionError(f"JSON holds {token}")

        json.loads(text, parse_constant=refuse)


@pytest.mark.parametrize("seed", range(12))
def test_extreme_valid_inputs_give_finite_text_and_json(seed: int) -> None:
    pick = random.Random(seed)
    argv = ["--trials", "100"]
    for flag, choices in EDGES.items():
        value = pick.choice(choices)
        if value is not None:
            argv += [flag, value]
    for form in ("text", "json"):
        status, out, err = run_cost([*argv, "--format", form])
        assert status in (0, 2), err
        if status == 2:  # e.g. a capacity-wait mean below its median: a clear refusal
            assert err.count("\n") == 1
            continue
        _no_non_numbers(out + err, document=form == "json")


def test_huge_prices_give_numbers_not_nan() -> None:
    argv = ["--nodes", "100000", "--hours", "100000", "--preempt-rate", "100", "--trials",
            "100", "--on-demand-price", "1000000", "--spot-price", "1000000"]  # fmt: skip
    for form in ("text", "json"):
        status, out, _ = run_cost([*argv, "--format", form])
        assert status == 0
        _no_non_numbers(out, document=form == "json")
    assert "unbounded" in run_cost(argv).stdout


def _scenario(**changes) -> Scenario:
    base = Scenario(nodes=4, gpus_per_node=8, hours=72, checkpoint_h=5 / 60, restart_h=10 / 60,
                    preempt_rate=0.02, on_demand_price=55, spot_price=21)  # fmt: skip
    return replace(base, **changes)


def test_simulation_work_is_bounded_and_said(monkeypatch) -> None:
    """A million trials of a job that expects ~4000 interruptions per run would draw 4e9
    lifetimes: the simulation draws at most MAX_LIFETIMES and the output says how many."""
    scenario = _scenario(preempt_rate=1.5, restart_h=0.001, checkpoint_h=0.001, hours=2000)
    assert analytic.spot(scenario).interruptions > 1000
    monkeypatch.setattr(simulate, "MAX_LIFETIMES", 200_000)
    started = time.monotonic()
    result = estimate(scenario, trials=1_000_000, seed=3)
    assert time.monotonic() - started < 30
    assert result.monte_carlo is not None
    assert result.monte_carlo.trials < 200
    assert any("of 1,000,000 trials" in warning for warning in result.warnings)


def test_trials_run_in_chunks_of_bounded_size(monkeypatch) -> None:
    sizes: list[int] = []
    chunk = simulate._run_chunk

    def spy(rng, trials, *args, **kwargs):
        sizes.append(trials)
        return chunk(rng, trials, *args, **kwargs)

    monkeypatch.setattr(simulate, "CHUNK_TRIALS", 400)
    monkeypatch.setattr(simulate, "_run_chunk", spy)
    result = simulate.simulate(_scenario(), 1000, seed=1)
    assert not isinstance(result, str) and result.trials == 1000
    assert sizes == [400, 400, 200] * 2  # spot, then on-demand


# --- issue 18 item 10: the output ------------------------------------------------------------


def test_reason_line_is_whole_when_break_even_is_close() -> None:
    status, out, _ = run_cost([*JOB[:4], "--preempt-rate", "0.2", *PRICES, "--trials", "0"])
    assert status == 0
    line = next(row for row in out.splitlines() if "x the rate assumed" in row)
    assert re.fullmatch(
        r"  - spot stops being cheaper at [\d.]+ preemptions per node-hour "
        r"\([\d.]+x the rate assumed\)",
        line,
    ), line


def test_a_monthly_share_is_accepted_like_a_bucket() -> None:
    assert parse_rate("5%").rate == pytest.approx(bucket_rate(0.05))
    assert parse_rate("5%").rate == parse_rate("<5%").rate
    status, out, _ = run_cost(
        [*JOB[:4], "--preempt-rate", "5%", *PRICES, "--trials", "0", "--format", "json"]
    )
    assert status == 0
    inputs = json.loads(out)["inputs"]
    assert inputs["preempt_rate_origin"] == "monthly interruption share 5%"


def test_help_says_buckets_are_monthly_interruption_frequencies() -> None:
    done = run_cost(["--help"])
    assert done.status == 0, done.stderr
    text = " ".join(done.stdout.split())
    assert "AWS Spot Instance Advisor bucket" in text
    assert "monthly interruption frequency" in text
    assert "at most 1,000,000" in text  # the trials cap


def test_no_infeasible_shading_left_of_break_even() -> None:
    """Cheap spot still looks cheaper after checkpoint/restart stops making progress; the
    break-even then sits where infeasibility starts, never right of it."""
    result = estimate(_scenario(spot_price=3.0, preempt_rate=0.05), trials=0)
    data = plot.curves(result)
    infeasible_rates = data["rate"][data["infeasible"]]
    assert infeasible_rates.size and result.break_even_rate <= infeasible_rates.min()
    cheaper_but_infeasible = data["infeasible"] & (data["spot_cost"] < result.on_demand.cost)
    assert cheaper_but_infeasible.any()  # the case the old break-even got wrong
    assert any("checkpoint/restart stops making progress" in r for r in result.advice.reasons)


def test_plot_draws_the_monte_carlo_band(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from matplotlib import pyplot

    result = estimate(_scenario(), trials=2000, seed=1)
    spread = plot.band(result)
    assert spread is not None and spread["rate"].size >= 10
    assert np.all(spread["cost_p10"] <= spread["cost_p90"])
    assert np.any(spread["wall_p10"] < spread["wall_p90"])
    figure = plot.draw(result)
    try:
        labels = [c.get_label() for axis in figure.axes for c in axis.collections]
        assert any("p10-p90" in label for label in labels)
    finally:
        pyplot.close(figure)
    plot.write_png(result, str(tmp_path / "cost.png"))
    assert (tmp_path / "cost.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_a_run_that_can_never_finish_ends_the_simulation_with_a_reason() -> None:
    """preemptible24h stops every VM after 24 h: a 168 h checkpoint segment never completes.
    The simulation looped for ever here; now it gives up after a bounded number of rounds."""
    scenario = _scenario(preempt_rate=0.0, checkpoint_h=168.0, hours=1.0)
    scenario = replace(scenario, hazard=Hazard("preemptible24h"))
    started = time.monotonic()
    outcome = simulate.simulate(scenario, 100, seed=1)
    assert isinstance(outcome, str) and "unfinished after" in outcome
    assert time.monotonic() - started < 30
