"""The bench verdict, pure: which threshold applies (and why), whether the slowest rank's
busbw at the gate size meets it, and the warnings a bandwidth run can reveal.

No I/O except reading the packaged threshold table; unit-tested on recorded results. It
reads the worker's results as bench/results.py types them (checked where they arrive).
"""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from clusterkit.bench.results import (
    BenchResult,
    CollectiveResult,
    GateVerdict,
    Row,
    collectives,
    wrong_elements,
)
from clusterkit.checks.model import Finding, Status
from clusterkit.facts import FactsByHost, HostFacts, IbPort, collected

STAGE = "bench"
NCCL_TESTS_RULE = 0.9  # nccl-tests fails a run below 0.9 x NCCL_TESTS_MIN_BW
# Threshold rules a user sets; the fabric default is only a guess about a fabric.
ASKED_FOR = ("--min-busbw", "NCCL_TESTS_MIN_BW", "inventory")
SLOW_RANK_RATIO = 1.25  # a rank this much slower than the median is named
DEBUG_ONLY_NCCL_VARS = (
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_ALGO",
    "NCCL_PROTO",
)


@dataclass(frozen=True)
class Threshold:
    """A busbw gate in GB/s; value None means report only. `source` names the rule."""

    value: float | None
    source: str  # "--min-busbw", "NCCL_TESTS_MIN_BW", "inventory", "fabric default", "none"
    detail: str
    # RDMA ports per node (the poorest node's) when the run crosses nodes over RDMA, else 0:
    # all_reduce spreads over them, alltoall does not (collective_threshold)
    nics_per_node: int = 0


@dataclass(frozen=True)
class Fabric:
    """What the probe facts say about the path an all-reduce takes."""

    nodes: int
    gpu_model: str | None  # the most common GPU name, None without GPUs
    gpus_per_node: int  # the smallest count across nodes
    nvlink: bool | None
    rdma_link_layer: str | None  # "InfiniBand", "Ethernet" (RoCE) or None (plain TCP)
    rdma_port_rates: tuple[float, ...]  # Gb/s of every ACTIVE port on the poorest node

    def describe(self) -> str:
        gpus = f"{self.gpus_per_node}x {self.gpu_model}" if self.gpu_model else "no GPU"
        link = "NVLink" if self.nvlink else "no NVLink" if self.nvlink is False else "NVLink ?"
        if self.rdma_port_rates:
            kind = "RoCE" if self.rdma_link_layer == "Ethernet" else "InfiniBand"
            rates = "+".join(f"{rate:g}" for rate in self.rdma_port_rates)
            net = f"{kind} {rates} Gb/s per node"
        else:
            net = "TCP sockets"
        return f"{self.nodes} node(s), {gpus}, {link}, {net}"


@lru_cache(maxsize=1)
def threshold_table() -> dict[str, Any]:
    """The shipped reference table (clusterkit/data/busbw_thresholds.json)."""
    text = resources.files("clusterkit.data").joinpath("busbw_thresholds.json").read_text()
    table: dict[str, Any] = json.loads(text)  # packaged with clusterkit, not node data
    return table


# --- fabric and thresholds ----------------------------------------------------------------


def detect_fabric(facts: FactsByHost) -> Fabric:
    """Summarise probe facts of every node: the weakest node decides the default gate."""
    models: list[str] = []
    counts: list[int] = []
    nvlinks: list[bool | None] = []
    poorest: tuple[float, ...] | None = None
    link_layer: str | None = None
    for host_facts in facts.values():
        gpus = collected(host_facts.get("gpus"))
        counts.append(gpus.get("count") or 0)
        models += [name for d in gpus.get("devices", []) if (name := d.get("name"))]
        links = collected(host_facts.get("nvlink"))  # `nvidia-smi nvlink --status`
        if links.get("gpus"):
            nvlinks.append(links.get("present"))
        else:
            nvlinks.append(gpus.get("nvlink"))
        rates: list[float] = []
        for port in _active_ports(host_facts):
            if rate := port.get("rate_gbps"):
                rates.append(float(rate))
                link_layer = link_layer or port.get("link_layer")
        if poorest is None or sum(rates) < sum(poorest):
            poorest = tuple(sorted(rates, reverse=True))
    model = statistics.mode(models) if models else None
    nvlink = None if any(v is None for v in nvlinks) else all(nvlinks) if nvlinks else None
    return Fabric(
        nodes=len(facts),
        gpu_model=model,
        gpus_per_node=min(counts) if counts else 0,
        nvlink=nvlink,
        rdma_link_layer=link_layer if poorest else None,
        rdma_port_rates=poorest or (),
    )


def _model_matches(model: str, names: list[str]) -> bool:
    upper = model.upper()
    return any(re.search(rf"\b{re.escape(name)}\b", upper) for name in names)


def _per_nic(rate_gbps: float, table: dict[str, Any]) -> float:
    """Healthy busbw of one RDMA NIC: the nearest listed rate at or below it, scaled."""
    rates = sorted(float(key) for key in table["per_rdma_nic_gbps"] if key.isdigit())
    base = max((r for r in rates if r <= rate_gbps), default=rates[0])
    low = float(table["per_rdma_nic_gbps"][f"{base:g}"]["healthy"][0])
    return low * rate_gbps / base


def fabric_default(fabric: Fabric, table: dict[str, Any] | None = None) -> Threshold:
    """Default gate from the reference table: gate_fraction x the healthy low bound of the
    bottleneck (intra-node NVLink/PCIe on one node; the RDMA NICs or TCP across nodes)."""
    table = table or threshold_table()
    fraction = float(table["gate_fraction"])
    if not fabric.gpu_model or fabric.gpus_per_node < 1:
        return Threshold(None, "none", "CPU/gloo: no default threshold, figures reported only")
    intra: tuple[float, str] | None = None
    if fabric.gpus_per_node > 1:
        if fabric.nvlink is True:
            for row in table["single_node_nvlink"]:
                if _model_matches(fabric.gpu_model, row["models"]):
                    scale = min(1.0, fabric.gpus_per_node / row["gpus"])
                    intra = (row["healthy"][0] * scale, f"NVLink {fabric.gpu_model}")
                    break
        elif fabric.nvlink is False:
            intra = (table["single_node_pcie"]["healthy"][0], "PCIe only")
    inter: tuple[float, str] | None = None
    if fabric.nodes > 1:
        if fabric.rdma_port_rates:
            kind = "RoCE" if fabric.rdma_link_layer == "Ethernet" else "InfiniBand"
            total = sum(_per_nic(rate, table) for rate in fabric.rdma_port_rates)
            inter = (total, f"{len(fabric.rdma_port_rates)} {kind} port(s)")
        else:
            inter = (table["tcp_socket"]["healthy"][0], "TCP sockets")
    candidates = [c for c in (intra, inter) if c is not None]
    if not candidates:
        return Threshold(None, "none", f"{fabric.describe()}: no reference figure")
    healthy, why = min(candidates)
    return Threshold(
        round(healthy * fraction, 2),
        "fabric default",
        f"{fraction:g} x {healthy:g} GB/s healthy for {why} ({fabric.describe()})",
    )


def resolve_threshold(
    *,
    flag: float | None,
    environ: Mapping[str, str],
    inventory_min_busbw: float | None,
    fabric: Fabric | None,
    backend: str,
) -> Threshold:
    """Precedence: --min-busbw, NCCL_TESTS_MIN_BW (x 0.9), clusterkit.bench.min_busbw,
    fabric default (NCCL only; gloo on CPU has none). A run across nodes over RDMA carries
    the node's port count, which the alltoall gate divides by."""
    threshold = _all_reduce_threshold(flag, environ, inventory_min_busbw, fabric, backend)
    if fabric is not None and fabric.nodes > 1 and fabric.rdma_port_rates:
        return replace(threshold, nics_per_node=len(fabric.rdma_port_rates))
    return threshold


def _all_reduce_threshold(
    flag: float | None,
    environ: Mapping[str, str],
    inventory_min_busbw: float | None,
    fabric: Fabric | None,
    backend: str,
) -> Threshold:
    if flag is not None:
        return Threshold(float(flag), "--min-busbw", f"--min-busbw {flag:g}")
    env_value = environ.get("NCCL_TESTS_MIN_BW", "").strip()
    if env_value:
        try:
            value = float(env_value)
        except ValueError:
            value = -1.0
        if value > 0:
            return Threshold(
                round(value * NCCL_TESTS_RULE, 4),
                "NCCL_TESTS_MIN_BW",
                f"NCCL_TESTS_MIN_BW={env_value}: {NCCL_TESTS_RULE:g} x {value:g} "
                "(the nccl-tests rule)",
            )
    if inventory_min_busbw is not None:
        return Threshold(
            inventory_min_busbw, "inventory", f"clusterkit.bench.min_busbw {inventory_min_busbw:g}"
        )
    if backend != "nccl" or fabric is None:
        return Threshold(None, "none", f"{backend}: no default threshold, figures reported only")
    return fabric_default(fabric)


def collective_threshold(
    threshold: Threshold, collective: str, table: dict[str, Any] | None = None
) -> Threshold:
    """The gate of one collective, derived from the all_reduce one: nccl-tests' busbw is
    defined so that the same bottleneck link gives the same figure for all_reduce,
    all_gather and reduce_scatter (factor 1). alltoall takes the table's factor (0.5, under
    the 0.77-1.0 x that NVIDIA's figures give within a node) and, across nodes over RDMA, is
    divided by the node's port count: "alltoall cannot aggregate the bandwidth of multiple
    NICs" (NCCL maintainers, nccl-tests issue #267; sources in the table)."""
    if collective == "all_reduce" or threshold.value is None:
        return threshold
    factors = (table or threshold_table()).get("collective_factors") or {}
    entry = factors.get(collective) or {}
    factor = float(entry.get("factor", 1.0))
    nics = threshold.nics_per_node if entry.get("per_nic") else 0
    if factor == 1.0 and nics <= 1:
        return threshold
    spread = f" / {nics} RDMA ports (one NIC's worth per GPU)" if nics > 1 else ""
    return Threshold(
        round(threshold.value * factor / max(nics, 1), 4),
        threshold.source,
        f"{factor:g} x ({threshold.detail}){spread} for {collective}",
        threshold.nics_per_node,
    )


# --- verdict ------------------------------------------------------------------------------


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


def finding_id(collective: str) -> str:
    """`bench.busbw` for all_reduce (as always), `bench.busbw-<collective>` for the others."""
    return "bench.busbw" if collective == "all_reduce" else f"bench.busbw-{collective}"


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
        stage=STAGE,
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
            stage=STAGE,
        )
    if verdict.busbw is None or verdict.passed is None:
        measured = "" if verdict.busbw is None else f"{verdict.busbw:.3g} GB/s busbw at {size}; "
        return Finding(
            check,
            Status.SKIP if verdict.busbw is None else Status.OK,
            f"{measured}{verdict.reason}",
            hosts=hosts,
            found=verdict.busbw,
            stage=STAGE,
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
            stage=STAGE,
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
        stage=STAGE,
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
        return Finding("bench.correctness", status, text, hosts=hosts, stage=STAGE)
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
        stage=STAGE,
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
        stage=STAGE,
    )


# --- NCCL log -----------------------------------------------------------------------------


@dataclass
class NcclLog:
    """What an NCCL_DEBUG=INFO log says about the transport actually used."""

    version: str | None = None
    networks: set[str] = field(default_factory=set)  # "IB", "Socket", plugin names
    socket_interfaces: list[str] = field(default_factory=list)
    ib_devices: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


_NET_USING = re.compile(r"NCCL INFO NET/(\w+)\s*:\s*Using\s*(.*)")
_USING_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_VERSION = re.compile(r"NCCL version (\S+)")
_WARN = re.compile(r"NCCL WARN (.*)")


def parse_nccl_log(text: str) -> NcclLog:
    log = NcclLog()
    for line in text.splitlines():
        if match := _VERSION.search(line):
            log.version = log.version or match[1]
        if match := _USING_NETWORK.search(line):
            log.networks.add(match[1])
        if match := _NET_USING.search(line):
            kind, rest = match[1], match[2]
            entries = re.findall(r"\[\d+\](\S+)", rest)
            if kind == "Socket":
                log.networks.add("Socket")
                log.socket_interfaces += [e.split(":")[0] for e in entries]
            elif kind == "IB":
                log.networks.add("IB")
                log.ib_devices += [e.split("/")[0] for e in entries]
        if match := _WARN.search(line):
            log.warnings.append(match[1].strip())
    return log


def _active_ports(host_facts: HostFacts) -> list[IbPort]:
    """The node's InfiniBand/RoCE ports that are up."""
    return [
        port
        for device in collected(host_facts.get("infiniband")).get("devices", [])
        for port in device.get("ports", [])
        if port.get("state", "").upper() == "ACTIVE"
    ]


def has_active_rdma(host_facts: HostFacts) -> bool:
    return bool(_active_ports(host_facts))


def socket_transport_finding(logs: Mapping[str, NcclLog], facts: FactsByHost) -> Finding | None:
    """NCCL fell back to TCP sockets on a node that has active InfiniBand/RoCE ports."""
    hosts = sorted(
        host
        for host, log in logs.items()
        if "Socket" in log.networks
        and "IB" not in log.networks
        and host in facts
        and has_active_rdma(facts[host])
    )
    if not hosts:
        return None
    return Finding(
        "bench.nccl-socket-transport",
        Status.WARN,
        "NCCL used NET/Socket although InfiniBand/RoCE ports are active: the all-reduce "
        "crossed nodes over TCP",
        hosts=hosts,
        expected="NET/IB",
        found="NET/Socket",
        remedy="check NCCL_IB_DISABLE/NCCL_IB_HCA, that libibverbs and the RDMA devices are "
        "visible (inside the container: --device /dev/infiniband), and the NCCL net plugin",
        stage=STAGE,
    )


def debug_vars_finding(environments: Mapping[str, Mapping[str, str]]) -> Finding | None:
    """Debug-only NCCL variables left set slow jobs down or make them hang."""
    found: dict[str, list[str]] = {}
    for host, env in environments.items():
        for name in DEBUG_ONLY_NCCL_VARS:
            if env.get(name) not in (None, ""):
                found.setdefault(f"{name}={env[name]}", []).append(host)
    if not found:
        return None
    hosts = sorted({host for names in found.values() for host in names})
    return Finding(
        "bench.nccl-debug-vars",
        Status.WARN,
        f"debug-only NCCL variables set: {', '.join(sorted(found))}",
        hosts=hosts,
        expected="unset",
        found=sorted(found),
        remedy="unset them in the job environment (they are for diagnosis, not production)",
        stage=STAGE,
    )


def _human_size(size: int) -> str:
    for unit, scale in (("G", 1024**3), ("M", 1024**2), ("K", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale}{unit}"
    return f"{size}B"
