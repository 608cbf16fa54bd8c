"""The bundled snapshot and each catalog data trap."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest

from clusterkit.__main__ import main
from clusterkit.cost import catalog
from clusterkit.errors import ConfigError, UsageError


def write(tmp_path: Path, instances: list[dict], **top: object) -> str:
    document = {"source": "test", "date": "2026-01-01", "instances": instances, **top}
    path = tmp_path / "prices.json"
    path.write_text(json.dumps(document))
    return str(path)


def row(**fields: object) -> dict:
    return {"instance": "x1", "region": "r1", "gpus": 8, "on_demand": 10.0, "spot": 4.0, **fields}


def load(path: str) -> catalog.Catalog:
    return catalog.load(path, today=date(2026, 2, 1), max_age_days=90)


def test_bundled_snapshot_dates_and_sources_every_row() -> None:
    bundled = catalog.load(today=date(2026, 11, 23), max_age_days=700)
    assert bundled.snapshot == date(2025, 1, 1)  # the oldest row decides
    assert bundled.warnings == ()
    p5 = bundled.lookup("p5.48xlarge", "us-east-1")
    assert (p5.on_demand, p5.spot_low, p5.spot_high, p5.gpus) == (55.04, 17.63, 25.75, 8)
    assert p5.spot == pytest.approx((17.63 + 25.75) / 2)
    assert p5.day == date(2026, 11, 9) and p5.source.endswith("/hyperscalers.json")
    h100 = bundled.lookup("ND96isr_H100_v5", "eastus")
    assert (h100.on_demand, h100.spot, h100.day) == (98.32, 18.169536, date(2026, 9, 16))
    assert h100.source.startswith("https://prices.azure.com/api/retail/prices?")
    assert len(bundled.entries) == 15
    raw = json.loads(Path(catalog.packaged_path()).read_text())
    assert raw["schema"] == catalog.SCHEMA and "list price" in raw["fields"]["on_demand"]
    for entry in raw["instances"]:  # every row: its own source URL and dates
        assert entry["source"].startswith("https://") and date.fromisoformat(entry["date"])
        if "spot" in entry:
            assert entry["spot_source"].startswith("https://")
            assert date.fromisoformat(entry["spot_date"])
        else:  # a row without spot says why
            assert "no spot price is listed" in entry["note"] or "none is listed" in entry["note"]


def test_bundled_snapshot_covers_current_gpu_instances_in_several_regions() -> None:
    bundled = catalog.load(today=date(2026, 11, 23))
    p5en = {e.region: e for e in bundled.entries if e.instance == "p5en.48xlarge"}
    assert set(p5en) == {"us-east-1", "us-east-2", "us-west-2", "eu-north-1", "us-west-1"}
    assert (p5en["eu-north-1"].on_demand, p5en["eu-north-1"].spot) == (67.7267, 39.8158)
    assert p5en["us-east-1"].source == "https://github.com/dstackai/dstack/pull/4110"
    assert p5en["us-west-1"].spot is None  # its listed spot price equalled on-demand
    uk = bundled.lookup("ND96isr_H100_v5", "uksouth")
    assert (uk.on_demand, uk.spot, uk.day) == (122.9, 22.7119, date(2026, 8, 13))
    h200 = bundled.lookup("ND96isr_H200_v5", None)
    assert (h200.region, h200.on_demand, h200.spot) == ("polandcentral", 130.592, None)


def test_a_row_without_spot_needs_the_flag(tmp_path: Path, capsys) -> None:
    """No `spot` key: nothing to warn about at load, an error naming the flag when needed."""
    unpriced = {key: value for key, value in row(instance="none").items() if key != "spot"}
    path = write(tmp_path, [row(instance="bare", spot=None), unpriced])
    loaded = load(path)
    assert loaded.warnings == ("bare (r1): spot price missing",)  # an empty value is a trap
    assert loaded.lookup("none", None).spot is None
    job = ["cost", "--nodes", "2", "--hours", "10", "--preempt-rate", "5%", "--trials", "0"]
    status = main([*job, "--catalog", path, "--instance", "none"])
    assert status == 2 and "give --spot-price" in capsys.readouterr().err
    assert main([*job, "--catalog", path, "--instance", "none", "--spot-price", "4"]) == 0


def test_rows_without_source_or_date_or_too_old_are_warned(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        [
            row(instance="ok", source="https://example.com/p", date="2026-01-20"),
            row(instance="nosource", date="2026-01-20"),
            row(instance="nodate", source="https://example.com/p"),
            row(instance="old", source="https://example.com/p", date="2025-01-01"),
            row(instance="future", source="https://example.com/p", date="2027-01-01"),
            row(instance="notaurl", source="somewhere", date="2026-01-20"),
        ],
        schema=catalog.SCHEMA,
        source=None,
        date=None,
    )
    loaded = load(path)
    text = "\n".join(loaded.warnings)
    assert not any(w.startswith("ok (") for w in loaded.warnings)
    assert "nosource (r1): no `source` URL" in text and "notaurl (r1): no `source` URL" in text
    assert "nodate (r1): no valid `date`" in text
    assert "old (r1): price from 2025-01-01 (396 days old, over 90)" in text
    assert "future (r1): dated 2027-01-01, in the future" in text
    assert loaded.snapshot == date(2025, 1, 1)
    assert loaded.lookup("ok", None).day == date(2026, 1, 20)
    # Validation of the prices themselves still applies to dated rows.
    bad = write(tmp_path, [row(source="https://e.com", date="2026-01-20", spot=12.0)])
    assert any("is not below on-demand" in w for w in load(bad).warnings)


def test_clean_catalog_has_no_warnings(tmp_path: Path) -> None:
    assert load(write(tmp_path, [row()])).warnings == ()


@pytest.mark.parametrize(
    ("fields", "words"),
    [
        ({"spot": 10.0}, "not below on-demand"),
        ({"spot": [3.0, 12.0]}, "not below on-demand"),
        ({"spot": ""}, "missing"),
        ({"spot": None}, "missing"),
        ({"on_demand": 0}, "placeholder"),
        ({"spot": 0.0}, "placeholder"),
        ({"on_demand": 99999}, "sentinel"),
        ({"on_demand": "n/a"}, "not a number"),
        ({"includes_gpus": False}, "leaves out the GPUs"),
    ],
)
def test_each_trap_warns_and_drops_the_price(tmp_path: Path, fields: dict, words: str) -> None:
    loaded = load(write(tmp_path, [row(**fields)]))
    assert any(words in warning for warning in loaded.warnings), loaded.warnings
    entry = loaded.lookup("x1", "r1")
    assert entry.on_demand is None or entry.spot is None


def test_stale_prices_warn(tmp_path: Path) -> None:
    loaded = catalog.load(write(tmp_path, [row()]), today=date(2026, 6, 1), max_age_days=90)
    assert any("151 days old" in warning for warning in loaded.warnings)
    fresh = catalog.load(write(tmp_path, [row()]), today=date(2026, 6, 1), max_age_days=365)
    assert fresh.warnings == ()


def test_undated_and_unsourced_catalog_warns(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, [row()], date="soon", source=""))
    assert any("unknown age" in w for w in loaded.warnings)
    assert any("no `source`" in w for w in loaded.warnings)


def test_duplicate_rows_warn(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, [row(), row(on_demand=11.0)]))
    assert any("listed twice" in w for w in loaded.warnings)
    assert loaded.lookup("x1", "r1").on_demand == 10.0


def test_unknown_instance_and_region_list_what_is_known(tmp_path: Path) -> None:
    loaded = load(write(tmp_path, [row(), row(region="r2")]))
    with pytest.raises(UsageError, match=r"known: x1\)"):
        loaded.lookup("y9", None)
    with pytest.raises(UsageError, match=r"known: r1, r2"):
        loaded.lookup("x1", "r3")
    with pytest.raises(UsageError, match="give --region"):
        loaded.lookup("x1", None)


def test_malformed_catalog_is_a_config_error(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text("{not json")
    with pytest.raises(ConfigError, match="not valid JSON"):
        catalog.load(str(path))
    path.write_text(json.dumps({"instances": {}}))
    with pytest.raises(ConfigError, match="instances"):
        catalog.load(str(path))


def test_an_old_spot_date_warns_with_what_refreshes_it(tmp_path: Path) -> None:
    """A fresh row date hid a spot price dated 694 days earlier: its own date now counts."""
    fields = {"provider": "aws", "source": "https://e.com/od", "date": "2026-11-09"}
    spot = {"spot_date": "2025-01-01", "spot_source": "https://e.com/spot"}
    path = write(tmp_path, [row(**fields, **spot)], schema=catalog.SCHEMA, date=None)
    loaded = catalog.load(path, today=date(2026, 11, 25))
    entry = loaded.lookup("x1", None)
    assert (entry.day, entry.spot_day, entry.spot_dated) == (
        date(2026, 11, 9),
        date(2025, 1, 1),
        date(2025, 1, 1),
    )
    assert entry.spot_source == "https://e.com/spot"
    assert loaded.snapshot == date(2025, 1, 1)  # the oldest price, spot included
    assert loaded.warnings == (
        "x1 (r1): spot price from 2025-01-01 (693 days old, over 180): `clusterkit cost "
        "prices update` cannot refresh it: give --spot-price with a current price",
    )


@pytest.mark.parametrize(
    ("provider", "command"),
    [
        ("aws", "refresh with `clusterkit cost prices update --provider aws --region r1`"),
        ("azure", "refresh with `clusterkit cost prices update --provider azure`"),
        ("gcp", "cannot refresh it: give --on-demand-price and --spot-price"),
    ],
)
def test_an_old_row_names_the_refresh_for_its_provider(
    tmp_path: Path, provider: str, command: str
) -> None:
    fields = {"provider": provider, "source": "https://e.com", "date": "2026-05-01"}
    path = write(tmp_path, [row(**fields)], schema=catalog.SCHEMA, date=None)
    (warning,) = catalog.load(path, today=date(2026, 11, 1)).warnings
    assert warning.startswith("x1 (r1): price from 2026-05-01 (184 days old, over 180): ")
    assert command in warning
    assert catalog.load(path, today=date(2026, 10, 28)).warnings == ()  # 180 days: fine
