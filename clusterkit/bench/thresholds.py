"""Which bus-bandwidth threshold applies to a bench run, and why: the user's (`--min-busbw`,
NCCL_TESTS_MIN_BW, the inventory) or the fabric's default from the packaged table, sized by
what the probe facts say about the path (NVLink, RDMA ports and their rate, nodes). Pure,
but for reading that table."""

from __future__ import annotations

import json
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources
from typing import Any

from clusterkit.facts import FactsByHost, HostFacts, IbPort, collected

NCCL_TESTS_RULE = 0.9  # nccl-tests fails a run below 0.9 x NCCL_TESTS_MIN_BW
# Threshold rules a user sets; the fabric default is only a guess about a fabric.
ASKED_FOR = ("--min-busbw", "NCCL_TESTS_MIN_BW", "inventory")


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
        for port in active_ports(host_facts):
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


def active_ports(host_facts: HostFacts) -> list[IbPort]:
    """The node's InfiniBand/RoCE ports that are up."""
    return [
        port
        for device in collected(host_facts.get("infiniband")).get("devices", [])
        for port in device.get("ports", [])
        if port.get("state", "").upper() == "ACTIVE"
    ]


def has_active_rdma(host_facts: HostFacts) -> bool:
    return bool(active_ports(host_facts))
