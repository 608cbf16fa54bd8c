"""The nccl-tests `<collective>_perf` table, printed by rank 0 and by the control side."""

from __future__ import annotations

try:  # installed (`torchrun -m clusterkit.bench`, and the control side formatting tables)
    from clusterkit import __version__ as VERSION
except ImportError:  # this file alone on a node: its own table is not the one users read
    VERSION = "(worker)"


# --- nccl-tests table (kept here so the worker stays one file; nccltests.py re-exports) ---

_GROUP_HEADER = "#" + " " * 62 + "out-of-place" + " " * 23 + "in-place          "
_COLUMNS = (
    "#       size         count      type   redop    root     time   algbw   busbw  #wrong"
    "     time   algbw   busbw  #wrong "
)
_UNITS = (
    "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)        "
    "     (us)  (GB/s)  (GB/s)         "
)


def _fmt_time(microseconds: float | None) -> str:
    """nccl-tests' BenchTime: %7.0f from 10000 us, %7.1f from 100 us, else %7.2f."""
    if microseconds is None:
        return f"{'N/A':>7}"
    if microseconds >= 10000:
        return f"{microseconds:7.0f}"
    return f"{microseconds:7.1f}" if microseconds >= 100 else f"{microseconds:7.2f}"


def _fmt_bw(value: float | None) -> str:
    return f"{'N/A':>6}" if value is None else f"{value:6.2f}"


def _fmt_place(place: dict | None) -> str:
    if place is None:
        return f"  {'N/A':>7}  {'N/A':>6}  {'N/A':>6}  {'N/A':>6}"
    wrong = "N/A" if place["nwrong"] is None or place["nwrong"] < 0 else str(place["nwrong"])
    time_ = _fmt_time(place["time"])
    algbw, busbw = _fmt_bw(place["alg_bw"]), _fmt_bw(place["bus_bw"])
    return f"  {time_}  {algbw}  {busbw}  {wrong:>6}"


def collective_results(result: dict) -> list:
    """Every collective's result of a run: the first is the top-level one."""
    return [result, *result.get("more_collectives", [])]


def format_tables(result: dict) -> str:
    """One nccl-tests report per collective measured, one after the other, as a script
    running all_reduce_perf then all_gather_perf prints them."""
    return "".join(format_table(one) for one in collective_results(result))


def format_table(result: dict) -> str:
    """The nccl-tests `<collective>_perf` report of one collective's result (worker JSON)."""
    config = result["config"]
    title = config.get("collective") or "all_reduce_perf"
    versions = result.get("versions", {})
    lines = [
        f"# nccl-tests compatible output: clusterkit bench {VERSION}, "
        f"torch {versions.get('torch')}, backend {result.get('backend')}, "
        f"nccl {versions.get('nccl') or 'n/a'}",
        f"# Collective test starting: {title}",
        f"# nThread {config['nThread']} nGpus {config['nGpus']} minBytes {config['minBytes']} "
        f"maxBytes {config['maxBytes']} step: {config['stepFactor']}(factor) "
        f"warmup iters: {config['warmupIters']} iters: {config['iters']} agg iters: 1 "
        f"validation: {config['validation']} graph: 0",
        "#",
        "# Using devices",
    ]
    for device in result["devices"]:
        lines.append(
            f"#  Rank {device['rank']:2d} Group  0 Pid {device.get('pid', 0):6d} on "
            f"{device['host']:>10} device {device['device']:2d} [{device['bus_id']}] "
            f"{device['name']}"
        )
    if result.get("unsupported"):
        lines += [f"# {result['unsupported']}", "#", f"# Collective test concluded: {title}", "#"]
        return "\n".join(lines) + "\n"
    lines += ["#", _GROUP_HEADER, _COLUMNS, _UNITS]
    wrong_total = 0
    for row in result["results"]:
        lines.append(
            f"{row['size']:12d}  {row['count']:12d}  {row['type']:>8}  "
            f"{row.get('redop', 'sum'):>6}  {row.get('root', -1):6d}"
            + _fmt_place(row.get("out_of_place"))
            + _fmt_place(row.get("in_place"))
        )
        for place in (row.get("out_of_place"), row.get("in_place")):
            nwrong = (place or {}).get("nwrong")
            wrong_total += nwrong if nwrong and nwrong > 0 else 0
    average = result.get("average_bus_bandwidth")
    lines += [
        f"# Out of bounds values : {wrong_total} {'OK' if wrong_total == 0 else 'FAILED'}",
        f"# Avg bus bandwidth    : {'N/A' if average is None else format(average, 'g')} ",
        "#",
        f"# Collective test concluded: {title}",
        "#",
    ]
    return "\n".join(lines) + "\n"
