"""The nccl-tests table: ours round-trips, and real all_reduce_perf output parses."""

from __future__ import annotations

from pathlib import Path

import pytest

from clusterkit.bench.nccltests import TableError, format_table, parse_json, parse_table
from clusterkit.bench.worker import summarise

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nccl-tests"


def _result() -> dict:
    sizes = [1024, 1024**2, 64 * 1024**2]
    devices = [
        {"rank": r, "host": f"node{r + 1}", "pid": 100 + r, "device": 0, "bus_id": "cpu",
         "name": "CPU x86_64"}
        for r in range(3)
    ]  # fmt: skip
    times = [[2e-5, 4e-4, 0.02], [2.1e-5, 4.2e-4, 0.021], [1.9e-5, 4.4e-4, 0.03]]
    wrong = [[0, 0, 0]] * 3
    results = summarise(sizes, "float", 4, 3, times, wrong, devices)
    values = [r["in_place"]["bus_bw"] for r in results]
    return {
        "config": {"nThread": 1, "nGpus": 1, "minBytes": 1024, "maxBytes": 64 * 1024**2,
                   "stepFactor": 2, "warmupIters": 5, "iters": 20, "validation": 1},
        "devices": devices,
        "results": results,
        "average_bus_bandwidth": sum(values) / len(values),
        "backend": "gloo",
        "versions": {"torch": "2.13.0"},
    }  # fmt: skip


def test_round_trip_matches_the_json() -> None:
    result = _result()
    parsed = parse_table(format_table(result))
    assert [r["size"] for r in parsed["results"]] == [r["size"] for r in result["results"]]
    for ours, theirs in zip(result["results"], parsed["results"]):
        assert theirs["out_of_place"] is None  # torch all_reduce is in place: N/A
        assert theirs["in_place"]["bus_bw"] == pytest.approx(ours["in_place"]["bus_bw"], abs=0.005)
        assert theirs["in_place"]["time"] == pytest.approx(ours["in_place"]["time"], abs=0.5)
        assert theirs["in_place"]["nwrong"] == 0
        assert theirs["count"] == ours["count"] and theirs["type"] == "float"
    assert [d["host"] for d in parsed["devices"]] == ["node1", "node2", "node3"]
    assert parsed["average_bus_bandwidth"] == pytest.approx(
        result["average_bus_bandwidth"], rel=1e-5
    )
    assert parsed["out_of_bounds"] == {"count": 0, "status": "OK"}
    assert parsed["config"]["iters"] == 20


def test_table_layout_matches_nccl_tests_columns() -> None:
    text = format_table(_result())
    lines = text.splitlines()
    assert "# Collective test starting: all_reduce_perf" in lines
    assert any(line.startswith("#  Rank  0 Group  0 Pid    100 on      node1 device  0 [cpu]")
               for line in lines)  # fmt: skip
    real = (FIXTURES / "olivia-2x4-gh200-int8.txt").read_text().splitlines()
    ours_header = [line.rstrip() for line in lines if line.startswith("#       size")]
    theirs_header = [line.rstrip() for line in real if line.startswith("#       size")]
    assert ours_header == theirs_header
    row = next(line for line in lines if line.strip().startswith("1048576"))
    real_row = next(line for line in real if line.strip().startswith("1048576"))
    for ours_end, theirs_end in (
        (row.index("float") + 5, real_row.index("int8") + 4),
        (row.index(" sum") + 4, real_row.index(" sum") + 4),
    ):
        assert ours_end == theirs_end  # right-aligned columns end where nccl-tests' do
    assert lines[-4].startswith("# Avg bus bandwidth    : ")


def test_wrong_values_fail_the_footer() -> None:
    result = _result()
    result["results"][1]["in_place"]["nwrong"] = 7
    parsed = parse_table(format_table(result))
    assert parsed["out_of_bounds"] == {"count": 7, "status": "FAILED"}
    assert parsed["results"][1]["in_place"]["nwrong"] == 7


def test_one_rank_prints_na_bus_bandwidth() -> None:
    devices = [{"rank": 0, "host": "a", "pid": 1, "device": 0, "bus_id": "cpu", "name": "CPU"}]
    results = summarise([1024], "float", 4, 1, [[1e-5]], [[0]], devices)
    result = {**_result(), "devices": devices, "results": results, "average_bus_bandwidth": None}
    parsed = parse_table(format_table(result))
    assert parsed["results"][0]["in_place"]["bus_bw"] is None
    assert parsed["average_bus_bandwidth"] is None


def test_real_nccl_tests_output_two_nodes_h100() -> None:
    parsed = parse_table((FIXTURES / "a3mega-2x8-h100.txt").read_text())
    assert len(parsed["results"]) == 31 and len(parsed["devices"]) == 16
    assert parsed["devices"][8]["host"] == "ztan-mig-gq73"
    assert parsed["devices"][8]["name"] == "NVIDIA H100 80GB HBM3"
    last = parsed["results"][-1]
    assert last["size"] == 8589934592
    assert last["out_of_place"]["bus_bw"] == 338.82
    assert last["in_place"] == {"time": 47743.0, "alg_bw": 179.92, "bus_bw": 337.35, "nwrong": 0}
    assert parsed["average_bus_bandwidth"] == 70.742
    # nccl-tests' "Avg bus bandwidth" is the mean over both columns of every row
    values = [r[p]["bus_bw"] for r in parsed["results"] for p in ("out_of_place", "in_place")]
    assert sum(values) / len(values) == pytest.approx(70.742, abs=0.001)
    assert parsed["config"]["warmup_iters"] == 5 and parsed["config"]["iters"] == 20


def test_real_nccl_tests_218_output_with_version_line() -> None:
    parsed = parse_table((FIXTURES / "olivia-2x4-gh200-int8.txt").read_text())
    assert len(parsed["results"]) == 28
    assert parsed["results"][0]["type"] == "int8"
    assert parsed["results"][-1]["in_place"]["bus_bw"] == 107.63
    assert parsed["devices"][4]["bus_id"] == "0009:01:00"
    assert parsed["average_bus_bandwidth"] == 17.8617


def test_mpirun_tag_output_prefixes_and_nccl_info_lines_are_ignored() -> None:
    text = (FIXTURES / "a3mega-2x8-h100.txt").read_text()
    tagged = "\n".join(
        f"[1,0]<stdout>:{line}" if i % 2 else line for i, line in enumerate(text.splitlines())
    )
    noisy = "host:1:1 [0] NCCL INFO Using network Socket\n" + tagged
    parsed = parse_table(noisy)
    assert len(parsed["results"]) == 31 and len(parsed["devices"]) == 16


def test_no_rows_is_an_error() -> None:
    with pytest.raises(TableError):
        parse_table("# nThread 1 nGpus 1 minBytes 8 maxBytes 8\n# Avg bus bandwidth : 0\n")


def test_json_needs_results() -> None:
    assert parse_json('{"results": []}') == {"results": []}
    with pytest.raises(TableError):
        parse_json("[1, 2]")
    with pytest.raises(TableError):
        parse_json("{")
