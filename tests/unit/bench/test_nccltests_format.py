"""The nccl-tests table: ours round-trips, and real all_reduce_perf output parses."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from clusterkit.bench.nccltests import TableError, format_table, parse_json, parse_table
from clusterkit.node.bench_result import _average_busbw, summarise

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nccl-tests"


def _devices(ranks: int) -> list[dict]:
    return [
        {"rank": r, "host": f"node{r + 1}", "pid": 100 + r, "device": 0, "bus_id": "cpu",
         "name": "CPU x86_64"}
        for r in range(ranks)
    ]  # fmt: skip


def _result(ranks: int = 3, scale: float = 1.0) -> dict:
    """A worker result: out-of-place slightly slower than in place, as measured."""
    sizes = [1024, 1024**2, 64 * 1024**2]
    devices = _devices(ranks)
    base = [[2e-5, 4e-4, 0.02], [2.1e-5, 4.2e-4, 0.021], [1.9e-5, 4.4e-4, 0.03]]
    times = [[t * scale for t in base[r % 3]] for r in range(ranks)]
    oop = [[t * 1.1 for t in rank] for rank in times]
    wrong = [[0, 0, 0]] * ranks
    results = summarise(sizes, "float", 4, ranks, times, wrong, devices, oop, wrong)
    return {
        "config": {"nThread": 1, "nGpus": 1, "minBytes": 1024, "maxBytes": 64 * 1024**2,
                   "stepFactor": 2, "warmupIters": 5, "iters": 20, "validation": 1},
        "devices": devices,
        "results": results,
        "average_bus_bandwidth": _average_busbw(results),
        "world_size": ranks,
        "backend": "gloo",
        "versions": {"torch": "2.13.0"},
    }  # fmt: skip


def test_round_trip_matches_the_json() -> None:
    result = _result()
    parsed = parse_table(format_table(result))
    assert [r["size"] for r in parsed["results"]] == [r["size"] for r in result["results"]]
    for ours, theirs in zip(result["results"], parsed["results"]):
        for place in ("out_of_place", "in_place"):
            assert theirs[place]["bus_bw"] == pytest.approx(ours[place]["bus_bw"], abs=0.005)
            assert theirs[place]["time"] == pytest.approx(ours[place]["time"], rel=1e-3)
            assert theirs[place]["nwrong"] == 0
        assert theirs["out_of_place"]["time"] > theirs["in_place"]["time"]
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


def test_average_is_over_both_blocks() -> None:
    result = _result()
    values = [r[p]["bus_bw"] for r in result["results"] for p in ("out_of_place", "in_place")]
    assert result["average_bus_bandwidth"] == pytest.approx(sum(values) / 6)
    in_place_only = sum(r["in_place"]["bus_bw"] for r in result["results"]) / 3
    assert result["average_bus_bandwidth"] < in_place_only  # out of place is slower here


def test_one_rank_prints_zero_bus_bandwidth_as_nccl_tests_does() -> None:
    result = _result(ranks=1)
    text = format_table(result)
    row = next(line for line in text.splitlines() if line.strip().startswith("1024 "))
    fields = row.split()
    assert fields[7] == "0.00" and fields[11] == "0.00"  # busbw, both blocks
    assert float(fields[6]) > 0  # algbw still measured
    parsed = parse_table(text)
    assert parsed["results"][0]["in_place"]["bus_bw"] == 0.0
    assert parsed["average_bus_bandwidth"] == 0.0
    assert "# Avg bus bandwidth    : 0 " in text


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


# -- what row-level consumers of nccl-tests output do --------------------------------------
# Scripts that read all_reduce_perf output rarely use a full parser. These are the three
# rules found in widely used ones; real nccl-tests output of every recorded version meets
# them, so ours must too.


# (1) split on white space: 13 fields, the numbers by position (out-of-place busbw is
#     field 7, in-place busbw field 11); every field after the fifth is a number.
def consumer_split(text: str) -> list[tuple[int, float, float]]:
    rows = []
    for line in text.splitlines():
        fields = line.split()
        if line.startswith("#") or len(fields) != 13 or not fields[0].isdigit():
            continue
        [float(value) for value in fields[5:]]  # raises on N/A: such a consumer crashes
        rows.append((int(fields[0]), float(fields[7]), float(fields[11])))
    return rows


# (2) one regular expression that needs numbers in both blocks.
CONSUMER_ROW = re.compile(
    r"^\s*(\d+)\s+(\d+)\s+(\w+)\s+(\w+)\s+(-?\d+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)"
    r"\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s*$"
)


def consumer_regex(text: str) -> list[tuple[int, float, float]]:
    return [
        (int(m[1]), float(m[8]), float(m[12]))
        for m in map(CONSUMER_ROW.match, text.splitlines())
        if m
    ]


# (3) fixed columns: every value ends where its right-aligned header label ends.
def consumer_columns(text: str) -> list[tuple[int, float, float]]:
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("#") and "busbw" in line
                  and "size" in line)  # fmt: skip
    ends = [m.end() for m in re.finditer(r"[^\s#]\S*", header)]
    assert len(ends) == 13, header
    rows = []
    for line in lines:
        if line.startswith("#") or not line.strip()[:1].isdigit():
            continue
        tokens = list(re.finditer(r"\S+", line))
        assert [t.end() for t in tokens] == ends, f"column drift:\n{header}\n{line}"
        rows.append((int(tokens[0][0]), float(tokens[7][0]), float(tokens[11][0])))
    return rows


CONSUMERS = [consumer_split, consumer_regex, consumer_columns]


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize("fixture", ["a3mega-2x8-h100.txt", "olivia-2x4-gh200-int8.txt"])
def test_consumer_rules_read_every_row_of_real_nccl_tests_output(consumer, fixture) -> None:
    text = (FIXTURES / fixture).read_text()
    rows = consumer(text)
    assert rows and len(rows) == len(parse_table(text)["results"])


@pytest.mark.parametrize("consumer", CONSUMERS)
@pytest.mark.parametrize(
    ("ranks", "scale"),
    [
        (3, 1.0),
        (1, 1.0),  # one rank: busbw 0.00, not N/A
        (8, 40.0),  # times of 10,000+ us (%7.0f) and of 100+ us (%7.1f)
        (2, 1e-2),  # microsecond times (%7.2f) and bandwidths of 100+ GB/s
    ],
)
def test_consumer_rules_read_every_row_of_ours(consumer, ranks: int, scale: float) -> None:
    _read_every_row(consumer, _result(ranks, scale))


@pytest.mark.parametrize("consumer", [consumer_split, consumer_regex])
def test_bandwidths_of_1000_and_more_stay_separate_fields(consumer) -> None:
    """%6.2f widens past its column for 1000+ GB/s (NVLS) in nccl-tests too; the fields
    are still separated by two spaces."""
    result = _result(2, 1e-3)
    assert max(r["in_place"]["bus_bw"] for r in result["results"]) > 1000
    _read_every_row(consumer, result)


def _read_every_row(consumer, result: dict) -> None:
    rows = consumer(format_table(result))
    assert [size for size, _, _ in rows] == [r["size"] for r in result["results"]]
    for (_, out_of_place, in_place), ours in zip(rows, result["results"]):
        assert out_of_place == pytest.approx(ours["out_of_place"]["bus_bw"], abs=0.006)
        assert in_place == pytest.approx(ours["in_place"]["bus_bw"], abs=0.006)


def test_numbers_are_formatted_as_nccl_tests_prints_them() -> None:
    """BenchTime: %7.0f from 10000 us, %7.1f from 100 us, %7.2f below; bandwidths %6.2f."""
    result = _result(8, 40.0)
    rows = [line.split() for line in format_table(result).splitlines()
            if line.strip()[:1].isdigit()]  # fmt: skip
    times = [row[9] for row in rows]  # in-place time of 1 KiB, 1 MiB, 64 MiB
    assert re.fullmatch(r"\d+\.\d\d", times[0]) or re.fullmatch(r"\d{3,4}\.\d", times[0])
    assert re.fullmatch(r"\d{5,}", times[2])  # 800,000+ us: no decimals
    assert all(re.fullmatch(r"\d+\.\d\d", row[7]) for row in rows)
