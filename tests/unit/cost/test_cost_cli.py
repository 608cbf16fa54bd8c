"""`clusterkit cost` end to end: flags, inventory, JSON schema, plot, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clusterkit.__main__ import main
from tests.support.cli import run_cli

FLAGS = ["--nodes", "4", "--hours", "72", "--preempt-rate", "0.02", "--trials", "2000"]
PRICES = ["--on-demand-price", "55.04", "--spot-price", "21.69"]


def run_main(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["cost", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_text_report_has_table_recommendation_and_reasons(capsys) -> None:
    status, out, _ = run_main([*FLAGS, *PRICES], capsys)
    assert status == 0
    assert "expected cost" in out and "on-demand" in out
    assert "Recommendation: spot: saves" in out
    assert "driving assumption:" in out
    assert "not billed" in out
    assert "\x1b[" not in out  # plain text when not a terminal


def test_json_has_every_input_and_output(capsys) -> None:
    status, out, _ = run_main(
        [*FLAGS, "--instance", "p5.48xlarge", "--deadline", "100", "--format", "json"], capsys
    )
    assert status == 0
    document = json.loads(out)
    assert document["schema"] == "clusterkit.cost/1"
    assert set(document) == {
        "schema",
        "inputs",
        "catalog",
        "analytic",
        "monte_carlo",
        "simulation_note",
        "recommendation",
        "assumptions",
        "warnings",
    }
    inputs = document["inputs"]
    assert inputs["nodes"] == 4 and inputs["gpus_per_node"] == 8  # from the catalog
    assert inputs["on_demand_price"] == 55.04
    assert inputs["spot_price_range"] == [17.63, 25.75]
    assert inputs["capacity_wait"] == {"median_hours": 0.4, "mean_hours": 1.5}
    assert inputs["deadline_hours"] == 100
    option_keys = {
        "price_per_node_hour",
        "job_interruption_rate_per_hour",
        "job_preemption_rate_per_hour",
        "mtbi_hours",
        "checkpoint_interval_hours",
        "young_interval_hours",
        "billed_hours",
        "capacity_wait_hours",
        "wall_hours",
        "expected_interruptions",
        "cost",
        "infeasible",
    }
    analytic = document["analytic"]
    assert set(analytic["spot"]) == option_keys == set(analytic["on_demand"])
    assert analytic["cost_ratio"] == pytest.approx(
        analytic["spot"]["cost"] / analytic["on_demand"]["cost"]
    )
    assert analytic["break_even_preempt_rate_per_node_hour"] > 0.02
    summary_keys = {
        "mean_wall_h",
        "p10_wall_h",
        "p50_wall_h",
        "p90_wall_h",
        "mean_cost",
        "p10_cost",
        "p50_cost",
        "p90_cost",
        "mean_interruptions",
        "p_miss_deadline",
    }
    monte_carlo = document["monte_carlo"]
    assert monte_carlo["trials"] == 2000 and monte_carlo["seed"] == 1
    assert set(monte_carlo["spot"]) == summary_keys == set(monte_carlo["on_demand"])
    assert 0 <= monte_carlo["p_spot_costs_more"] <= 1
    assert document["recommendation"]["choice"] in ("spot", "on-demand")
    assert document["catalog"]["date"] == "2025-01-01"  # the oldest price used: spot's
    assert document["inputs"]["on_demand_price_date"] == "2026-11-09"


def test_json_is_reproducible_with_a_seed(capsys) -> None:
    argv = [*FLAGS, *PRICES, "--format", "json", "--seed", "9"]
    first = run_main(argv, capsys)[1]
    assert run_main(argv, capsys)[1] == first


def test_infeasible_spot_points_to_on_demand(capsys) -> None:
    status, out, _ = run_main(
        ["--nodes", "32", "--hours", "24", "--preempt-rate", "0.1", *PRICES, "--format", "json"],
        capsys,
    )
    document = json.loads(out)
    assert status == 0
    assert document["analytic"]["spot"]["infeasible"]
    assert document["recommendation"]["choice"] == "on-demand"
    assert "elastic" in document["recommendation"]["summary"]


def test_inventory_gives_nodes_and_prices_flags_override(tmp_path: Path, capsys) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n"
        + "".join(f"    node{i}:\n      ansible_host: 10.0.0.{i}\n" for i in range(1, 7))
        + "  vars:\n    clusterkit:\n      cost:\n        instance: p4d.24xlarge\n"
        "        preempt_rate: '5-10%'\n        hours: 48\n        correlation: 2\n"
    )
    status, out, _ = run_main([str(inventory), "--format", "json", "--trials", "0"], capsys)
    assert status == 0
    inputs = json.loads(out)["inputs"]
    assert inputs["nodes"] == 6 and inputs["hours"] == 48 and inputs["correlation"] == 2
    assert inputs["on_demand_price"] == 21.957642
    assert inputs["preempt_rate_origin"] == "advisor bucket 5-10%"
    _, out, _ = run_main(
        [str(inventory), "--nodes", "2", "--spot-price", "5", "--format", "json", "--trials", "0"],
        capsys,
    )
    inputs = json.loads(out)["inputs"]
    assert inputs["nodes"] == 2 and inputs["spot_price"] == 5


def test_unknown_inventory_key_is_named(tmp_path: Path, capsys) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    a:\n  vars:\n    clusterkit:\n      cost:\n        hourz: 4\n"
    )
    status, _, err = run_main([str(inventory)], capsys)
    assert status == 2 and "clusterkit.cost.hourz" in err


def test_trace_sets_rate_and_correlation(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("# nodes: 4\n# hours: 200\n1.00 a\n1.01 b\n50 c\n120 d\n")
    argv = ["--nodes", "4", "--hours", "72", "--trace", str(trace), *PRICES, "--format", "json"]
    status, out, _ = run_main([*argv, "--trials", "0"], capsys)
    inputs = json.loads(out)["inputs"]
    assert status == 0
    assert inputs["preempt_rate_per_node_hour"] == pytest.approx(4 / 800)
    assert inputs["correlation"] == pytest.approx(4 / 3)


# What `launch --trace` wrote after a 1.6-minute run with one node fault (issue 37).
SHORT_LAUNCH_TRACE = """# clusterkit launch: node faults seen during the run
# nodes: 3
# hours: 0.0267
# restart-min: 0.42
# evidence of the fault below: node2: NVRM: Xid (PCI:0000:3b:00): 79
0.0133 node2
"""


def test_a_short_trace_gives_its_interval_and_says_it_is_too_short(tmp_path: Path, capsys) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text(SHORT_LAUNCH_TRACE)
    argv = ["--hours", "72", "--trace", str(trace), *PRICES, "--format", "json", "--trials", "0"]
    status, out, err = run_main(argv, capsys)  # no --nodes: the trace's `# nodes: 3`
    assert status == 0, err
    document = json.loads(out)
    assert document["inputs"]["nodes"] == 3
    warnings = " ".join(document["warnings"])
    # 1 event in 0.08 node-hours: the exact 95% interval runs from 0.316 to 69.6 per node-hour
    assert "95% interval 0.316 to 69.6" in warnings and "1 event in" in warnings
    assert "too short to mean anything" in warnings


def test_a_long_trace_gives_its_interval_without_the_too_short_warning(
    tmp_path: Path, capsys
) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text(
        "# nodes: 4\n# hours: 2000\n" + "".join(f"{t} a\n" for t in range(5, 2000, 50))
    )
    argv = ["--hours", "72", "--trace", str(trace), *PRICES, "--format", "json", "--trials", "0"]
    status, out, _ = run_main(argv, capsys)
    warnings = " ".join(json.loads(out)["warnings"])
    assert status == 0 and "95% interval" in warnings and "too short" not in warnings


def test_plot_writes_a_png(tmp_path: Path, capsys) -> None:
    picture = tmp_path / "cost.png"
    status, _, _ = run_main([*FLAGS, *PRICES, "--deadline", "90", "--plot", str(picture)], capsys)
    assert status == 0
    data = picture.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 800 and height > 600


def test_output_file(tmp_path: Path, capsys) -> None:
    report = tmp_path / "report.txt"
    status, out, _ = run_main([*FLAGS, *PRICES, "--output", str(report)], capsys)
    assert status == 0 and out == ""
    assert "Recommendation:" in report.read_text()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--nodes", "4", "--hours", "10", "--preempt-rate", "0.1"], "no prices"),
        (["--nodes", "4", "--hours", "10", *PRICES], "no preemption rate"),
        ([*FLAGS, *PRICES, "--correlation", "0.5"], "correlation"),
        ([*FLAGS, *PRICES, "--capacity-wait-median", "2", "--capacity-wait-mean", "1"], "median"),
        ([*FLAGS, "--instance", "p5.48xlarge", "--region", "mars-1"], "known: us-east-1"),
        ([*FLAGS, *PRICES, "--hazard", "gamma"], "unknown hazard"),
        ([*FLAGS, *PRICES, "--trials", "-1"], "--trials"),
        (["--nodes", "0", "--hours", "5", "--preempt-rate", "0.1", *PRICES], "--nodes 0"),
    ],
)
def test_bad_input_in_process(argv: list[str], words: str, capsys) -> None:
    status, out, err = run_main(argv, capsys)
    assert status == 2
    assert words in err and err.count("\n") == 1 and out == ""


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--nodes", "4", "--hours", "-3", "--preempt-rate", "0.1", *PRICES], "--hours -3"),
        ([*FLAGS, "--instance", "p9.huge"], "known: ND96isr_H100_v5"),
        ([*FLAGS[:4], "--preempt-rate", "7-9%", *PRICES], "buckets: <5%"),
        (["--nodes", "4", "--hours", "5", "--trace", "TRACE", *PRICES], "neither hours"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv: list[str], words: str, tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("1.5\nnot-a-time\n")
    argv = [str(trace) if arg == "TRACE" else arg for arg in argv]
    done = run_cli(["cost", *argv])
    assert done.status == 2, done.stderr
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("clusterkit: error:") and words in lines[0]


def test_no_prices_names_each_known_instance_once_in_catalog_order(capsys) -> None:
    """The packaged catalog has an entry per region: the "known:" list used to repeat an
    instance type once for each of its regions."""
    from clusterkit.cost import catalog

    status, _, err = run_main(["--nodes", "4", "--hours", "10", "--preempt-rate", "0.1"], capsys)
    assert status == 2
    known = err.split("known: ", 1)[1].rstrip().rstrip(")").split(", ")
    instances = [entry.instance for entry in catalog.load().entries]
    assert len(instances) > len(set(instances))  # the catalog does repeat names
    assert known == list(dict.fromkeys(instances))


def test_the_inventory_takes_a_monthly_share_as_the_flag_does(tmp_path: Path, capsys) -> None:
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n    node1:\n  vars:\n    clusterkit:\n      cost:\n"
        "        instance: p4d.24xlarge\n        preempt_rate: 5%\n        hours: 48\n"
    )
    status, out, err = run_main([str(inventory), "--format", "json", "--trials", "0"], capsys)
    assert status == 0, err
    _, flag_out, _ = run_main(
        [str(inventory), "--preempt-rate", "5%", "--format", "json", "--trials", "0"], capsys
    )
    inputs, flagged = json.loads(out)["inputs"], json.loads(flag_out)["inputs"]
    assert inputs["preempt_rate_origin"] == "monthly interruption share 5%"
    assert inputs["preempt_rate_per_node_hour"] == flagged["preempt_rate_per_node_hour"] > 0
