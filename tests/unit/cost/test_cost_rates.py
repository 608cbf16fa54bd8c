"""Preemption rates from numbers, advisor buckets and traces."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.cost import rates
from clusterkit.errors import UsageError


def test_advisor_buckets_match_the_reference() -> None:
    assert rates.parse_rate("<5%").rate == pytest.approx(7.0e-5, rel=0.01)
    assert rates.parse_rate("15-20%").rate == pytest.approx(3.1e-4, rel=0.02)  # 3.06e-4, rounded
    assert rates.parse_rate("> 20%").rate == rates.parse_rate("15-20%").rate
    assert "optimistic" in (rates.parse_rate("5-10%").note or "")


def test_plain_rate() -> None:
    assert rates.parse_rate("0.05").rate == 0.05
    assert rates.parse_rate("0.05/h").origin == "flag"


@pytest.mark.parametrize("text", ["7-9%", "fast", "-0.1", "nan", "<5"])
def test_bad_rate_or_bucket(text: str) -> None:
    with pytest.raises(UsageError, match="buckets: <5%"):
        rates.parse_rate(text)


def test_trace_rate_and_correlation(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text(
        "# nodes: 4\n# hours: 100\n"
        "2025-03-01T10:00:00Z a\n2025-03-01T10:01:00Z b\n"  # one reclaim, two nodes
        "2025-03-02T08:00:00Z c\n"
        "2025-03-03T12:00:00Z a\n2025-03-03T12:02:00Z d\n2025-03-03T12:03:00Z b\n"
    )
    source = rates.read_trace(str(trace))
    assert source.rate == pytest.approx(6 / 400)
    assert source.correlation == pytest.approx(2.0)
    assert "6 interruptions" in source.origin


def test_trace_in_hours_without_window_uses_the_span(tmp_path: Path) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text("0\n10\n20.5\n")
    source = rates.read_trace(str(trace))
    assert source.rate == pytest.approx(3 / 20.5)
    assert source.correlation is None


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("1.0\nyesterday\n", ":2: 'yesterday' is neither hours"),
        ("1 a extra\n", ":1: expected `TIME [NODE]`"),
        ("# nodes: zero\n1\n2\n", "`# nodes:` needs a positive number"),
        ("# just a comment\n", "no interruptions"),
        ("5\n", "observation window"),
    ],
)
def test_malformed_trace(tmp_path: Path, text: str, words: str) -> None:
    trace = tmp_path / "trace.txt"
    trace.write_text(text)
    with pytest.raises(UsageError, match=words.replace("[", r"\[").replace("]", r"\]")):
        rates.read_trace(str(trace))


def test_missing_trace_file(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot read"):
        rates.read_trace(str(tmp_path / "absent.txt"))
