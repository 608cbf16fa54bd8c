"""Which interface NCCL and gloo will use on a node, with their own name-matching rules.

NCCL_SOCKET_IFNAME: a comma list of name prefixes; a leading `^` excludes the listed names
instead, and a leading `=` (after any `^`) makes them exact names. Unset, NCCL skips `lo`
and `docker*` and prefers `ib*`. GLOO_SOCKET_IFNAME: a comma list of exact names.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

from clusterkit.checks.interfaces import DEFAULT_EXCLUDED
from clusterkit.net.messages import IfnameEnv, NodeInterface


@dataclass(frozen=True)
class IfnameSpec:
    """One parsed NCCL_SOCKET_IFNAME value."""

    names: tuple[str, ...]
    exclude: bool = False
    exact: bool = False

    def matches(self, ifname: str) -> bool:
        hit = any(ifname == name if self.exact else ifname.startswith(name) for name in self.names)
        return hit != self.exclude


def parse_nccl_ifname(value: str) -> IfnameSpec:
    """Parse NCCL's syntax: `eth`, `=eth0`, `^docker,lo`, `^=eth1`, `ib0:1` (port ignored)."""
    text = value.strip()
    exclude = text.startswith("^")
    if exclude:
        text = text[1:]
    exact = text.startswith("=")
    if exact:
        text = text[1:]
    names = tuple(
        part.split(":", 1)[0].strip() for part in text.split(",") if part.split(":", 1)[0].strip()
    )
    return IfnameSpec(names, exclude, exact)


def parse_gloo_ifname(value: str) -> IfnameSpec:
    """Gloo takes exact names only, one device per name."""
    return IfnameSpec(tuple(part.strip() for part in value.split(",") if part.strip()), exact=True)


@dataclass(frozen=True)
class InterfaceChoice:
    """The interface a node's collectives will use, and why that one."""

    name: str | None  # None: nothing matches on this node
    source: str  # "clusterkit.interface", "NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "default"
    spec: str | None  # the value that selected it
    address: str | None = None
    prefixlen: int | None = None
    mtu: int | None = None
    up: bool | None = None

    @property
    def network(self) -> ipaddress.IPv4Network | ipaddress.IPv6Network | None:
        if self.address is None or self.prefixlen is None:
            return None
        return ipaddress.ip_network(f"{self.address}/{self.prefixlen}", strict=False)


def primary_address(interface: NodeInterface) -> tuple[str | None, int | None]:
    """First IPv4 address, else the first IPv6 that is not link-local (what NCCL binds)."""
    for family in ("inet", "inet6"):
        for entry in interface["addresses"]:
            if entry["family"] != family:
                continue
            if ipaddress.ip_address(entry["address"]).is_link_local:
                continue
            return entry["address"], entry["prefixlen"]
    return None, None


def is_up(interface: NodeInterface) -> bool:
    down_states = {"down", "lowerlayerdown", "notpresent", "dormant"}
    return bool(interface["up"]) and interface["operstate"] not in down_states


def choose_interface(
    interfaces: Sequence[NodeInterface],
    *,
    setting: str | None,
    env: IfnameEnv,
    master_address: str | None = None,
) -> InterfaceChoice:
    """Apply the first of: clusterkit.interface, NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME (all
    in the node's own environment), else NCCL's default order, preferring the interface whose
    subnet holds the master address (the path rendezvous takes)."""
    with_address = [item for item in interfaces if primary_address(item)[0]]
    if setting:
        source, spec, pool = "clusterkit.interface", setting, parse_nccl_ifname(setting)
    elif nccl := env.get("NCCL_SOCKET_IFNAME"):
        source, spec, pool = "NCCL_SOCKET_IFNAME", nccl, parse_nccl_ifname(nccl)
    elif gloo := env.get("GLOO_SOCKET_IFNAME"):
        source, spec, pool = "GLOO_SOCKET_IFNAME", gloo, parse_gloo_ifname(gloo)
    else:
        return _default_choice(with_address, master_address)
    for item in with_address:
        if pool.matches(item["name"]):
            return _choice(item, source, spec)
    for item in interfaces:  # matches, but carries no address: still name it
        if pool.matches(item["name"]):
            return _choice(item, source, spec)
    return InterfaceChoice(None, source, spec)


def _default_choice(
    candidates: Sequence[NodeInterface], master_address: str | None
) -> InterfaceChoice:
    usable = [
        item
        for item in candidates
        if not any(item["name"].startswith(prefix) for prefix in DEFAULT_EXCLUDED)
    ]
    if master_address:
        master = ipaddress.ip_address(master_address)
        for item in usable:
            for entry in item["addresses"]:
                network = ipaddress.ip_network(
                    f"{entry['address']}/{entry['prefixlen'] or 32}", strict=False
                )
                if master.version == network.version and master in network:
                    return _choice(item, "default", None)
    ordered = sorted(usable, key=lambda item: not item["name"].startswith("ib"))
    if ordered:
        return _choice(ordered[0], "default", None)
    return InterfaceChoice(None, "default", None)


def _choice(interface: NodeInterface, source: str, spec: str | None) -> InterfaceChoice:
    address, prefixlen = primary_address(interface)
    return InterfaceChoice(
        interface["name"],
        source,
        spec,
        address=address,
        prefixlen=prefixlen,
        mtu=interface["mtu"],
        up=is_up(interface),
    )
