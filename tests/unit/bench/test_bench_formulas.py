"""Worker arithmetic and flags: sizes as nccl-tests reads them, bandwidth formulas."""

from __future__ import annotations

import pytest

from clusterkit.node.bench_common import bandwidths, bus_factor, parse_size, size_sweep
from clusterkit.node.bench_rendezvous import _parse_barrier_failure
from clusterkit.node.bench_result import summarise


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8), ("1K", 1024), ("64M", 64 * 1024**2), ("1G", 1024**3), ("2g", 2 * 1024**3),
     ("512KB", 512 * 1024)],
)  # fmt: skip
def test_sizes_use_powers_of_1024(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "1.5M", "M", "-1K", "10X"])
def test_bad_sizes_are_rejected(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


def test_sweep_multiplies_by_the_factor_up_to_max() -> None:
    assert size_sweep(1024, 8192, 2, 4) == [1024, 2048, 4096, 8192]
    assert size_sweep(1024, 10000, 4, 4) == [1024, 4096]


def test_sweep_rounds_down_to_whole_elements() -> None:
    assert size_sweep(6, 6, 2, 4) == [4]
    assert size_sweep(1, 1, 2, 8) == [8]  # never zero elements


def test_sweep_rejects_inverted_bounds() -> None:
    with pytest.raises(ValueError):
        size_sweep(2048, 1024, 2, 4)


def test_allreduce_busbw_factor() -> None:
    assert bus_factor(2) == 1.0
    assert bus_factor(4) == 1.5
    assert bus_factor(8) == pytest.approx(1.75)
    assert bus_factor(1) == 0.0  # one rank: nccl-tests prints 0.00


def test_bandwidths_in_gigabytes_per_second() -> None:
    algbw, busbw = bandwidths(2_000_000_000, 1.0, 4)
    assert algbw == pytest.approx(2.0)
    assert busbw == pytest.approx(3.0)
    assert bandwidths(1000, 1e-6, 1) == (pytest.approx(1.0), 0.0)


def test_summary_uses_mean_time_for_the_row_and_names_the_slowest_rank() -> None:
    devices = [{"host": f"node{r + 1}", "rank": r} for r in range(3)]
    rows = summarise(
        [1_000_000], "float", 4, 3, [[0.001], [0.002], [0.003]], [[0], [0], [0]], devices
    )
    row = rows[0]
    assert row["in_place"]["time"] == pytest.approx(2000.0)  # us, mean of ranks
    assert row["in_place"]["alg_bw"] == pytest.approx(0.5)
    assert row["slowest"]["rank"] == 2 and row["slowest"]["host"] == "node3"
    assert row["slowest"]["bus_bw"] == pytest.approx(1_000_000 / 0.003 / 1e9 * 4 / 3)
    assert row["out_of_place"] is None  # not measured: not invented
    assert row["count"] == 250_000
    both = summarise([1_000_000], "float", 4, 2, [[0.001]] * 2, [[0]] * 2, devices[:2],
                     [[0.002]] * 2, [[0], [1]])  # fmt: skip
    assert both[0]["out_of_place"] == {"time": pytest.approx(2000.0), "alg_bw": 0.5,
                                       "bus_bw": 0.5, "nwrong": 1}  # fmt: skip


def test_wrong_elements_add_up_and_unchecked_is_minus_one() -> None:
    devices = [{"host": "a"}, {"host": "b"}]
    checked = summarise([8], "float", 4, 2, [[1.0], [1.0]], [[1], [2]], devices)
    unchecked = summarise([8], "float", 4, 2, [[1.0], [1.0]], [[-1], [-1]], devices)
    assert checked[0]["in_place"]["nwrong"] == 3
    assert unchecked[0]["in_place"]["nwrong"] == -1


def test_monitored_barrier_message_names_ranks() -> None:
    text = "Ranks 1, 2 failed to pass monitoredBarrier in 5000 ms"
    assert _parse_barrier_failure(text) == [1, 2]
    assert _parse_barrier_failure("Rank 3 failed to pass monitoredBarrier in 10 ms") == [3]
    assert _parse_barrier_failure("something else") == []
