"""Every price `cost` uses carries its own date in the report; an old one is a warning."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

from clusterkit.cli import build_parser
from clusterkit.cli.cost import cost_command
from clusterkit.commands import cost
from clusterkit.cost.report import render_json, render_text

TODAY = date(2026, 11, 26)
JOB = ["cost", "--nodes", "4", "--hours", "72", "--preempt-rate", "0.01", "--trials", "0"]


def catalog_file(tmp_path: Path) -> str:
    row = {
        "provider": "aws", "instance": "p5.48xlarge", "region": "us-east-1", "gpus": 8,
        "on_demand": 55.04, "spot": [17.63, 25.75], "date": "2026-11-09",
        "source": "https://e.com/od", "spot_date": "2025-01-01", "spot_source": "https://e.com/s",
    }  # fmt: skip
    path = tmp_path / "prices.json"
    path.write_text(json.dumps({"schema": "clusterkit.prices/2", "instances": [row]}))
    return str(path)


def estimate(tmp_path: Path, *flags: str):
    args = build_parser().parse_args(
        [*JOB, "--catalog", catalog_file(tmp_path), "--instance", "p5.48xlarge", *flags]
    )
    return cost.build(cost_command(args), today=TODAY)


def test_the_old_spot_price_is_dated_and_warned_in_text_and_json(tmp_path: Path) -> None:
    result = estimate(tmp_path)
    document = json.loads(render_json(result))
    assert document["inputs"]["on_demand_price_date"] == "2026-11-09"
    assert document["inputs"]["spot_price_date"] == "2025-01-01"
    assert document["catalog"]["date"] == "2025-01-01"  # the oldest price used, not the newest
    (warning,) = document["warnings"]
    assert "spot price from 2025-01-01 (694 days old, over 180)" in warning
    assert "give --spot-price" in warning
    text = render_text(result)
    assert "price dated" in text and "2025-01-01" in text and "2026-11-09" in text
    assert "694 days old" in text


def test_a_price_given_by_flag_drops_the_catalog_date_and_its_warning(tmp_path: Path) -> None:
    result = estimate(tmp_path, "--spot-price", "20")
    document = json.loads(render_json(result))
    assert document["inputs"]["spot_price_date"] is None
    assert document["inputs"]["on_demand_price_date"] == "2026-11-09"
    assert document["warnings"] == []
    dated = next(line for line in render_text(result).splitlines() if "price dated" in line)
    assert "given" in dated and "2026-11-09" in dated


def test_the_age_limit_is_a_flag(tmp_path: Path) -> None:
    assert estimate(tmp_path, "--max-price-age-days", "700").warnings == ()
