"""The bench verdict, pure: whether the slowest rank's busbw at the gate size meets the
threshold that applies (bench/thresholds.py), and the findings a bandwidth run gives.

Unit-tested on recorded results. It reads the worker's results as bench/results.py types
them (checked where they arrive).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace

from clusterkit.bench.results import (
    BenchResult,
    CollectiveResult,
    GateVerdict,
    Row,
    collectives,
    wrong_elements,
)
from clusterkit.bench.thresholds import ASKED_FOR, Threshold
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.registry import CheckId

SLOW_RANK_RATIO = 1.25  # a rank this much slower than the median is named


@dataclass(frozen=True)
class Verdict:
    """The gate applied to one result. passed None: report only or not applicable."""

    passed: bool | None
    size: int
    busbw: float | None  # the slowest rank's view at the gate size
    mean_busbw: float | None
    slowest_rank: int
    slowest_host: str
    threshold: Threshold
    reason: str = ""

    def to_dict(self) -> GateVerdict:
        return {
            "passed": self.passed,
            "size": self.size,
            "bus_bw": self.busbw,
            "mean_bus_bw": self.mean_busbw,
            "slowest_rank": self.slowest_rank,
            "slowest_host": self.slowest_host,
            "threshold": self.threshold.value,
            "threshold_source": self.threshold.source,
            "threshold_detail": self.threshold.detail,
            "reason": self.reason,
        }


def gate_row(result: CollectiveResult, gate_size: int | None = None) -> Row:
    """The result row the gate reads: the requested size, else the largest one measured."""
    rows = result["results"]
    if gate_size is None:
        return max(rows, key=lambda row: row["size"])
    fitting = [row for row in rows if row["size"] <= gate_size]
    return max(fitting or rows, key=lambda row: row["size"])


def evaluate(
    result: CollectiveResult, threshold: Threshold, gate_size: int | None = None
) -> Verdict:
    row = gate_row(result, gate_size)
    slowest = row["slowest"]
    place = row["in_place"] or row["out_of_place"]
    measured = Verdict(
        None,
        size=row["size"],
        busbw=slowest["bus_bw"],
        mean_busbw=place["bus_bw"] if place else None,
        slowest_rank=slowest["rank"],
        slowest_host=slowest["host"],
        threshold=threshold,
    )
    if result["world_size"] == 1:  # nccl-tests prints 0.00 for one rank
        unmeasured = replace(measured, busbw=None, mean_busbw=None)
        if threshold.value is not None and threshold.source in ASKED_FOR:
            # Fail closed: a threshold the user set cannot be shown to be met.
            reason = (
                f"one rank: bus bandwidth cannot be measured, so {threshold.detail} "
                "cannot be met; run on two or more GPUs or nodes"
            )
            return replace(unmeasured, passed=False, reason=reason)
        return replace(unmeasured, reason="one rank: bus bandwidth does not apply")
    if threshold.value is None:
        return replace(measured, reason="no threshold: reported only")
    return replace(measured, passed=slowest["bus_bw"] >= threshold.value)


# `bench.busbw` for all_reduce (as always), `bench.busbw-<collective>` for the others.
BUSBW_IDS: dict[str, CheckId] = {
    "all_reduce": "bench.busbw",
    "all_gather": "bench.busbw-all_gather",
    "reduce_scatter": "bench.busbw-reduce_scatter",
    "alltoall": "bench.busbw-alltoall",
}


def finding_id(collective: str) -> CheckId:
    """The check id of one collective's bandwidth verdict."""
    return BUSBW_IDS[collective]


def result_collective(result: CollectiveResult) -> str:
    """The collective of one result, from nccl-tests' name (`all_gather_perf`)."""
    return result["config"]["collective"].removesuffix("_perf")


def unsupported_finding(result: CollectiveResult, hosts: list[str]) -> Finding:
    collective = result_collective(result)
    return Finding(
        finding_id(collective),
        Status.SKIP,
        f"not measured: {result.get('unsupported')}",
        hosts=hosts,
        remedy="run it with the nccl backend on GPUs, or a torch whose gloo has it",
    )


def busbw_finding(verdict: Verdict, hosts: list[str], collective: str = "all_reduce") -> Finding:
    check = finding_id(collective)
    size = _human_size(verdict.size)
    source = f"threshold {verdict.threshold.value} GB/s from {verdict.threshold.detail}"
    if verdict.busbw is None and verdict.passed is False:
        return Finding(
            check,
            Status.FAIL,
            verdict.reason or "bus bandwidth could not be measured",
            hosts=hosts,
            expected=f">= {verdict.threshold.value}",
            found=None,
            remedy="bus bandwidth needs two or more ranks: bench across nodes or GPUs, or "
            "drop the threshold for a one-rank smoke test",
        )
    if verdict.busbw is None or verdict.passed is None:
        measured = "" if verdict.busbw is None else f"{verdict.busbw:.3g} GB/s busbw at {size}; "
        return Finding(
            check,
            Status.SKIP if verdict.busbw is None else Status.OK,
            f"{measured}{verdict.reason}",
            hosts=hosts,
            found=verdict.busbw,
        )
    where = f"slowest rank {verdict.slowest_rank} on {verdict.slowest_host}"
    if verdict.passed:
        message = f"{collective} busbw {verdict.busbw:.3g} GB/s at {size} ({where}); {source}"
        return Finding(
            check,
            Status.OK,
            message,
            hosts=hosts,
            expected=f">= {verdict.threshold.value}",
            found=round(verdict.busbw, 4),
        )
    return Finding(
        check,
        Status.FAIL,
        f"{collective} busbw {verdict.busbw:.3g} GB/s at {size} is below the {source} ({where})",
        hosts=[verdict.slowest_host] if verdict.slowest_host in hosts else hosts,
        expected=f">= {verdict.threshold.value}",
        found=round(verdict.busbw, 4),
        remedy="check NCCL_SOCKET_IFNAME/NCCL_IB_HCA, link rates (ibstat) and the NCCL log "
        "for the transport used; rerun with a larger -e if the size is too small to plateau",
    )


def correctness_finding(result: BenchResult, hosts: list[str]) -> Finding:
    """Wrong elements of every collective measured (one finding for the run)."""
    measured = [one for one in collectives(result) if one["results"]]
    names = " and ".join(result_collective(one) for one in measured) or "all_reduce"
    wrong = [(one, r) for one in measured for r in one["results"] if wrong_elements(r) > 0]
    if not wrong:
        checked = result["config"]["validation"]
        status = Status.OK if checked else Status.SKIP
        text = f"every {names} result was correct" if checked else "not checked (-c 0)"
        return Finding("bench.correctness", status, text, hosts=hosts)
    total = sum(wrong_elements(r) for _, r in wrong)
    sizes = ", ".join(f"{result_collective(one)} {_human_size(r['size'])}" for one, r in wrong)
    return Finding(
        "bench.correctness",
        Status.FAIL,
        f"{total} wrong elements at {sizes}: data corruption in transit",
        hosts=hosts,
        expected=0,
        found=total,
        remedy="rerun with NCCL_DEBUG=INFO; check GPU health (dmesg Xid), NIC firmware, "
        "and NCCL version parity",
    )


def slow_rank_finding(result: CollectiveResult, gate_size: int | None = None) -> Finding | None:
    """Warn when one rank spends much longer per op than the median rank at the gate size."""
    row = gate_row(result, gate_size)
    times = row["rank_times_us"]
    if len(times) < 3:
        return None
    median = statistics.median(times)
    slowest = max(range(len(times)), key=lambda rank: times[rank])
    if median <= 0 or times[slowest] < SLOW_RANK_RATIO * median:
        return None
    host = result["devices"][slowest]["host"]
    return Finding(
        "bench.slow-rank",
        Status.WARN,
        f"rank {slowest} on {host} took {times[slowest]:.0f} us per op at "
        f"{_human_size(row['size'])}, {times[slowest] / median:.2f}x the median {median:.0f} us",
        hosts=[host],
        expected=f"< {SLOW_RANK_RATIO} x median",
        found=round(times[slowest] / median, 3),
        remedy=f"look at {host}: CPU load, GPU clocks (nvidia-smi -q -d CLOCK), NIC errors",
    )


def _human_size(size: int) -> str:
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"
