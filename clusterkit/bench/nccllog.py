"""What an NCCL_DEBUG=INFO log says about the transport a run really used, and the warnings
it gives: a run over sockets where RDMA is up, debug-only NCCL variables left set. Pure."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from clusterkit.bench.thresholds import has_active_rdma
from clusterkit.checks.model import Finding, Status
from clusterkit.facts import FactsByHost

DEBUG_ONLY_NCCL_VARS = (
    "NCCL_P2P_DISABLE",
    "NCCL_SHM_DISABLE",
    "NCCL_IB_DISABLE",
    "NCCL_ALGO",
    "NCCL_PROTO",
)


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
    )
