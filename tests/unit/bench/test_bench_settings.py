"""`check`'s bench stage and `clusterkit bench` start from one BenchSettings; flags win."""

from __future__ import annotations

import pytest

from clusterkit import cli
from clusterkit.bench.flags import bench_options, bench_timeout
from clusterkit.bench.launcher import BenchOptions
from clusterkit.cli import bench
from clusterkit.errors import UsageError
from clusterkit.inventory.model import BenchSettings

SETTINGS = BenchSettings(
    minbytes="2M",
    maxbytes="8M",
    stepfactor=4,
    iters=7,
    warmup_iters=1,
    datatype="half",
    gate_size="4M",
    min_busbw=12.5,
    timeout=30.0,
    join_timeout=90.0,
)


def _sweep(options: BenchOptions) -> tuple:
    return (
        options.minbytes,
        options.maxbytes,
        options.stepfactor,
        options.iters,
        options.warmup_iters,
        options.datatype,
        options.gate_size,
        options.min_busbw,
        options.join_timeout,
    )


def test_without_flags_bench_runs_what_the_check_stage_runs() -> None:
    args = bench.request(cli.parse(["bench"])).flags
    from_bench = bench_options(args, SETTINGS, {})
    from_check = BenchOptions.from_settings(SETTINGS)
    assert _sweep(from_bench) == _sweep(from_check)
    # ranks never wait for each other past the run's deadline
    assert _sweep(from_check) == ("2M", "8M", 4, 7, 1, "half", 4 * 2**20, None, 30.0)
    assert bench_timeout(args, SETTINGS) == 30.0


def test_the_inventory_threshold_reaches_the_gate_not_the_flag() -> None:
    """min_busbw in BenchOptions is the flag; the inventory's value is resolved by the gate
    with its own source name, so it is not copied into the options."""
    assert BenchOptions.from_settings(SETTINGS).min_busbw is None


def test_defaults_are_the_documented_ones() -> None:
    args = bench.request(cli.parse(["bench"])).flags
    options = bench_options(args, BenchSettings(), {})
    assert _sweep(options) == ("1M", "16M", 2, 20, 5, "float", None, None, 60.0)
    assert bench_timeout(args, BenchSettings()) == 300.0
    assert _sweep(BenchOptions()) == _sweep(options)


def test_flags_win_over_the_inventory() -> None:
    argv = ["bench", "-b", "1K", "-e", "64K", "-n", "3", "-d", "float", "--timeout", "20",
            "--join-timeout", "5", "--gate-size", "32K", "--min-busbw", "2"]  # fmt: skip
    args = bench.request(cli.parse(argv)).flags
    options = bench_options(args, SETTINGS, {})
    assert _sweep(options) == ("1K", "64K", 4, 3, 1, "float", 32 * 1024, 2.0, 5.0)
    assert bench_timeout(args, SETTINGS) == 20.0


def test_a_flag_against_the_inventory_sweep_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"smallest size 64M .* larger than the largest 8M"):
        bench_options(bench.request(cli.parse(["bench", "-b", "64M"])).flags, SETTINGS, {})
