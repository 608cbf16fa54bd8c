"""Collectives beyond all_reduce: nccl-tests' size/count conventions and bus factors, the
per-collective gate, and tables that parse back with their title."""

from __future__ import annotations

import pytest

from clusterkit.bench import gate, thresholds
from clusterkit.bench.attribution import collective_findings
from clusterkit.bench.nccltests import format_tables, parse_table
from clusterkit.checks.model import Status
from clusterkit.node.bench_common import bandwidths, bus_factor, parse_collectives, row_shape
from tests.support.bench_results import worker_result


def test_bus_factors_are_nccl_tests() -> None:
    assert bus_factor(8, "all_reduce") == pytest.approx(14 / 8)
    for name in ("all_gather", "reduce_scatter", "alltoall"):
        assert bus_factor(8, name) == pytest.approx(7 / 8)
        assert bus_factor(1, name) == 0.0


def test_recorded_rows_give_their_printed_bandwidths() -> None:
    """Rows of real nccl-tests output: all_gather 2 ranks (GB10), alltoall 16 ranks."""
    algbw, busbw = bandwidths(1073741824, 27211.0e-6, 2, "all_gather")
    assert (round(algbw, 2), round(busbw, 2)) == (39.46, 19.73)
    algbw, busbw = bandwidths(8589934592, 246641e-6, 16, "alltoall")
    assert (round(algbw, 2), round(busbw, 2)) == (34.83, 32.65)


def test_row_shape_splits_the_buffer_over_ranks() -> None:
    assert row_shape(1073741824, 4, 2, "all_gather") == (1073741824, 134217728)
    assert row_shape(8589934592, 4, 16, "alltoall") == (8589934592, 134217728)
    assert row_shape(1024, 4, 3, "reduce_scatter") == (1020, 85)  # whole elements per rank
    assert row_shape(1024, 4, 3, "all_reduce") == (1024, 256)


def test_unknown_collective_is_named() -> None:
    assert parse_collectives("all_gather, reduce_scatter,all_gather") == [
        "all_gather",
        "reduce_scatter",
    ]
    with pytest.raises(ValueError, match="'allgather'"):
        parse_collectives("allgather")


def _one(collective: str, scale: float, ranks: int = 3) -> dict:
    """A result at 1M and 16M, every rank taking 1 and 10 ms x `scale` per op."""
    times = [[1e-3 * scale, 1e-2 * scale] for _ in range(ranks)]
    return worker_result(times, sizes=(1024**2, 16 * 1024**2), collective=collective)


def test_each_collective_table_parses_back_with_its_title() -> None:
    result = _one("all_reduce", 1.0)
    result["more_collectives"] = [_one("all_gather", 1.0), _one("alltoall", 1.0)]
    text = format_tables(result)
    parts = text.split("# nccl-tests compatible output")[1:]
    parsed = [parse_table(part) for part in parts]
    assert [p["config"]["collective"] for p in parsed] == [
        "all_reduce_perf", "all_gather_perf", "alltoall_perf",
    ]  # fmt: skip
    gather = parsed[1]["results"][-1]
    assert gather["redop"] == "none" and gather["count"] == 16 * 1024**2 // 4 // 3
    assert gather["in_place"]["bus_bw"] == pytest.approx(
        gather["size"] / 1e-2 / 1e9 * 2 / 3, abs=0.005
    )
    assert parsed[2]["results"][-1]["in_place"] is None  # alltoall: out of place only


def test_each_collective_has_its_own_gate_and_finding() -> None:
    """A slow all_gather fails its own check while all_reduce passes; alltoall is gated at
    half the all_reduce threshold."""
    result = _one("all_reduce", 1.0)
    result["more_collectives"] = [
        _one("all_gather", 20.0),
        _one("alltoall", 1.0),  # busbw 1.12: passes 1.0, would fail 2.0
        {**_one("reduce_scatter", 1.0), "results": [], "unsupported": "no reduce_scatter"},
    ]
    threshold = thresholds.Threshold(2.0, "--min-busbw", "--min-busbw 2")
    found = {f.id: f for f in collective_findings(result, threshold, None, ["node1"])}
    assert found["bench.busbw"].status is Status.OK
    assert found["bench.busbw-all_gather"].status is Status.FAIL
    assert "all_gather busbw" in found["bench.busbw-all_gather"].message
    assert found["bench.busbw-alltoall"].expected == ">= 1.0"
    assert found["bench.busbw-alltoall"].status is Status.OK
    assert found["bench.busbw-reduce_scatter"].status is Status.SKIP
    assert result["more_collectives"][0]["gate"]["passed"] is False


def test_correctness_counts_every_collective() -> None:
    result = _one("all_reduce", 1.0)
    bad = _one("reduce_scatter", 1.0)
    bad["results"][0]["out_of_place"]["nwrong"] = 7
    result["more_collectives"] = [bad]
    finding = gate.correctness_finding(result, ["node1"])
    assert finding.status is Status.FAIL and finding.found == 7
    assert "reduce_scatter 1048572B" in finding.message
