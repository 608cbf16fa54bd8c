"""The collective interface compared across nodes: present, up and addressed, sharing a
subnet, one MTU, and the interface variables agreeing (pure).

Check ids: net.interface, net.subnet, net.mtu, net.ifname-mismatch. Apart from the connect
results: these read only each node's facts, before any path is tested.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping
from typing import Literal

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import sole_majority
from clusterkit.net.finding import finding
from clusterkit.net.ifname import InterfaceChoice
from clusterkit.net.messages import (
    FactsReport,
)
from clusterkit.net.plan import NetworkOptions

IFNAME_VARIABLES: tuple[Literal["NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"], ...] = (
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
)


def interface_findings(
    choices: Mapping[str, InterfaceChoice], facts_by_host: Mapping[str, FactsReport]
) -> list[Finding]:
    findings: list[Finding] = []
    broken: dict[str, str] = {}
    for host, choice in choices.items():
        names = ", ".join(item["name"] for item in facts_by_host[host]["interfaces"])
        if choice.name is None:
            wanted = f"{choice.source}={choice.spec}" if choice.spec else "a usable interface"
            broken[host] = f"no interface matches {wanted} (has: {names or 'none'})"
        elif not choice.up:
            broken[host] = f"{choice.name} is down"
        elif not choice.address:
            broken[host] = f"{choice.name} has no address"
    if broken:
        findings.append(
            finding(
                "net.interface",
                Status.FAIL,
                "; ".join(f"{host}: {reason}" for host, reason in sorted(broken.items())),
                hosts=sorted(broken),
                expected="an interface that exists, is up and has an address on every node",
                found=broken,
                remedy="fix NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME or clusterkit.interface "
                "to name the fabric interface present on every node",
            )
        )
    else:
        used = {host: f"{choice.name} {choice.address}" for host, choice in choices.items()}
        findings.append(
            finding(
                "net.interface",
                Status.OK,
                "collective interface present, up and addressed on every node: "
                + ", ".join(f"{host} {value}" for host, value in sorted(used.items())),
                hosts=sorted(used),
                found=used,
            )
        )
    usable = {host: choice for host, choice in choices.items() if host not in broken}
    findings += _subnet_findings(usable)
    findings += _mtu_findings(usable)
    return findings


def _subnet_findings(choices: Mapping[str, InterfaceChoice]) -> list[Finding]:
    if len(choices) < 2:
        return []
    alone = []
    for host, choice in choices.items():
        network = choice.network
        peers = [other for name, other in choices.items() if name != host]
        shared = network is not None and any(
            other.address
            and ipaddress.ip_address(other.address).version == network.version
            and ipaddress.ip_address(other.address) in network
            for other in peers
        )
        if not shared:
            alone.append(host)
    found = {host: str(choice.network) for host, choice in choices.items()}
    if alone:
        return [
            finding(
                "net.subnet",
                Status.WARN,
                f"{', '.join(sorted(alone))}: collective address in no subnet shared with "
                "a peer; traffic is routed (the mesh test shows whether the route works)",
                hosts=sorted(alone),
                found=found,
            )
        ]
    return [finding("net.subnet", Status.OK, "every node shares a subnet with a peer", found=found)]


def _mtu_findings(choices: Mapping[str, InterfaceChoice]) -> list[Finding]:
    mtus = {host: choice.mtu for host, choice in choices.items() if choice.mtu}
    if not mtus:
        return []
    agreed, expected = sole_majority(mtus)
    if not agreed:  # 1 against 1: no node is the odd one
        return [
            finding(
                "net.mtu",
                Status.FAIL,
                "MTU differs and no value has a majority: "
                + ", ".join(f"{host} {choices[host].name} mtu {mtus[host]}" for host in mtus)
                + "; large messages hang rather than fail",
                found=dict(mtus),
                remedy="set the same MTU on every node (ip link set dev IFACE mtu N)",
            )
        ]
    odd = sorted(host for host, mtu in mtus.items() if mtu != expected)
    if odd:
        return [
            finding(
                "net.mtu",
                Status.FAIL,
                "MTU differs: "
                + ", ".join(f"{host} {choices[host].name} mtu {mtus[host]}" for host in odd)
                + f" (others {expected}); large messages hang rather than fail",
                hosts=odd,
                expected=expected,
                found={host: mtus[host] for host in odd},
                remedy=f"set the same MTU on every node, e.g. ip link set dev IFACE mtu {expected}",
            )
        ]
    return [finding("net.mtu", Status.OK, f"MTU {expected} on every node", expected=expected)]


def ifname_findings(
    facts_by_host: Mapping[str, FactsReport], options: NetworkOptions
) -> list[Finding]:
    """NCCL and gloo must agree with each other, across nodes and with the inventory."""
    envs = {host: facts["env"] for host, facts in facts_by_host.items()}
    problems: dict[str, str] = {}
    ties: list[str] = []  # a variable two halves set differently: no node is the odd one
    for host, env in envs.items():
        nccl, gloo = env.get("NCCL_SOCKET_IFNAME"), env.get("GLOO_SOCKET_IFNAME")
        if nccl and gloo and nccl.lstrip("=") != gloo:
            problems[host] = f"NCCL_SOCKET_IFNAME={nccl} but GLOO_SOCKET_IFNAME={gloo}"
        elif options.interface and (nccl or gloo) and (nccl or gloo) != options.interface:
            problems[host] = (
                f"node environment names {nccl or gloo}, clusterkit.interface "
                f"is {options.interface}"
            )
    for key in IFNAME_VARIABLES:
        values = {host: env.get(key) for host, env in envs.items()}
        if len(set(values.values())) > 1:
            agreed, expected = sole_majority(values)
            if not agreed:
                pairs = ", ".join(f"{host} {value}" for host, value in values.items())
                ties.append(f"{key} differs and no value has a majority: {pairs}")
                continue
            for host, value in values.items():
                if value != expected:
                    problems.setdefault(host, f"{key}={value} (most nodes: {expected})")
    if not (problems or ties):
        return [finding("net.ifname-mismatch", Status.OK, "interface variables agree")]
    return [
        finding(
            "net.ifname-mismatch",
            Status.WARN,
            "; ".join([*(f"{host}: {text}" for host, text in sorted(problems.items())), *ties]),
            hosts=sorted(problems),
            found=problems,
            remedy="set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME to the same interface on "
            "every node",
        )
    ]
