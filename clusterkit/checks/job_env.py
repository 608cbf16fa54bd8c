"""The job's own environment on each node against the settings clusterkit validated.

A MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK left in a node's profile is read by jobs that
initialise with `env://` (and by scripts that pass them on to torchrun): the job then waits for
a rendezvous nobody hosts, or forms a world of the wrong size, although every check of the
validated settings passed. Pure: facts and the inventory in, findings out.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from clusterkit.checks.model import Finding, Status, over_hosts
from clusterkit.checks.parity import Facts, section, torch_cuda
from clusterkit.inventory.model import Inventory
from clusterkit.net.ifname import DEFAULT_EXCLUDED

VIRTUAL = (*DEFAULT_EXCLUDED, "veth", "virbr", "br-", "cni", "flannel", "cali", "tun", "tap")


def job_env_findings(facts: Facts, inventory: Inventory) -> list[Finding]:
    """env.job-vars: job variables already set on a node that contradict what was checked;
    env.socket-ifname: several candidate interfaces and nothing naming the one to use."""
    if not facts:
        skipped = "not checked: no host reported facts"
        return [
            Finding("env.job-vars", Status.SKIP, skipped),
            Finding("env.socket-ifname", Status.SKIP, skipped),
        ]
    return [_job_vars(facts, inventory), _socket_ifname(facts, inventory)]


def expected_world_size(facts: Facts, inventory: Inventory) -> int:
    """Nodes x ranks per node, as the bench and the job would start them."""
    settings = inventory.settings
    if any(torch_cuda(f) in (None, "cpu") for f in facts.values()):
        per_node = settings.expect.gpus_per_node or 1
    else:
        counts = [int(section(f, "gpus").get("count") or 0) for f in facts.values()]
        per_node = settings.expect.gpus_per_node or (min(counts) if counts else 0) or 1
    return len(inventory.hosts) * per_node


def _master_names(inventory: Inventory) -> set[str]:
    """What MASTER_ADDR may say: the master's inventory name or its address."""
    master = inventory.settings.master or inventory.hosts[0].name
    names = {master}
    for host in inventory.hosts:
        if master in (host.name, host.address):
            names |= {host.name, host.address}
    return names


def _job_vars(facts: Facts, inventory: Inventory) -> Finding:
    settings = inventory.settings
    masters = _master_names(inventory)
    world = expected_world_size(facts, inventory)
    wrong: dict[str, str] = {}
    for host, f in facts.items():
        env = section(f, "env")
        problems = []
        if env.get("MASTER_ADDR") and env["MASTER_ADDR"] not in masters:
            problems.append(f"MASTER_ADDR={env['MASTER_ADDR']} (checked: {sorted(masters)[0]})")
        if env.get("MASTER_PORT") and env["MASTER_PORT"] != str(settings.master_port):
            problems.append(f"MASTER_PORT={env['MASTER_PORT']} (checked: {settings.master_port})")
        if env.get("WORLD_SIZE") and env["WORLD_SIZE"] != str(world):
            problems.append(f"WORLD_SIZE={env['WORLD_SIZE']} (checked: {world})")
        for name in ("RANK", "LOCAL_RANK", "NODE_RANK"):
            if env.get(name):
                problems.append(f"{name}={env[name]} (a fixed rank on every process of the node)")
        ifname = env.get("NCCL_SOCKET_IFNAME")
        if ifname and settings.interface and ifname.lstrip("=") != settings.interface:
            problems.append(f"NCCL_SOCKET_IFNAME={ifname} (checked: {settings.interface})")
        if problems:
            wrong[host] = ", ".join(problems)
    return over_hosts(
        "env.job-vars",
        wrong,
        list(facts),
        ok="no job variable on any node contradicts the checked settings",
        failed="the nodes' environment sets job variables other than those checked: "
        + "; ".join(f"{h}: {why}" for h, why in wrong.items()),
        remedy="unset these variables in the nodes' profiles (/etc/environment, ~/.bashrc, "
        "the job script's exports), or set clusterkit.master / master_port to match them",
    )


def candidate_interfaces(f: dict[str, Any]) -> list[str]:
    """Interfaces NCCL or gloo could pick: up, with an IPv4 address, not loopback or virtual."""
    names = []
    for name, iface in sorted((section(f, "network").get("interfaces") or {}).items()):
        if name.startswith(VIRTUAL) or "LOOPBACK" in (iface.get("flags") or []):
            continue
        if iface.get("state") not in ("up", "unknown") or "UP" not in (iface.get("flags") or []):
            continue
        if any("." in address for address in iface.get("addresses") or []):
            names.append(name)
    return names


def _holding(f: dict[str, Any], address: str) -> str | None:
    """The interface whose subnet holds `address` (the one clusterkit reached the node by)."""
    try:
        target = ipaddress.ip_address(address)
    except ValueError:
        return None
    for name, iface in (section(f, "network").get("interfaces") or {}).items():
        for entry in iface.get("addresses") or []:
            try:
                if target in ipaddress.ip_interface(entry).network:
                    return str(name)
            except ValueError:
                continue
    return None


def _socket_ifname(facts: Facts, inventory: Inventory) -> Finding:
    if inventory.settings.interface:
        return Finding(
            "env.socket-ifname",
            Status.SKIP,
            f"not checked: clusterkit.interface names {inventory.settings.interface}",
        )
    addresses = {host.name: host.address for host in inventory.hosts}
    ambiguous: dict[str, str] = {}
    for host, f in facts.items():
        env = section(f, "env")
        if env.get("NCCL_SOCKET_IFNAME") or env.get("GLOO_SOCKET_IFNAME"):
            continue
        candidates = candidate_interfaces(dict(f))
        if len(candidates) > 1:
            chosen = _holding(dict(f), addresses.get(host, "")) or candidates[0]
            ambiguous[host] = (
                f"{', '.join(candidates)} could carry the collectives; set "
                f"NCCL_SOCKET_IFNAME={chosen} GLOO_SOCKET_IFNAME={chosen}"
            )
    return over_hosts(
        "env.socket-ifname",
        ambiguous,
        list(facts),
        status=Status.WARN,
        ok="one candidate interface per node, or the socket interface is named",
        failed="several interfaces and no *_SOCKET_IFNAME: NCCL and gloo may pick different "
        "ones (or one peers cannot reach): "
        + "; ".join(f"{h}: {why}" for h, why in ambiguous.items()),
        remedy="set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in the job environment, or "
        "clusterkit.interface, to the interface named above",
    )
