"""The network stage's messages, typed: what clusterkit/node/net.py reports at each step, and
what the control side sends it.

A node is not trusted: each report is checked against these types where it arrives
(`NodeSessions` in net/sessions.py), so a report of the wrong shape, an unknown key included,
fails that node's step with the path of the first bad value, and the stage reads typed
reports: a renamed key is a mypy error, not a finding that silently skips. The node program
is composed from the same checkout as the control side, so there is no version to skew;
change its output and these types change with it (tests/unit/net/test_net_messages.py runs the
real program's reports through these parsers).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from typing import Literal, TypedDict, TypeVar, cast

from clusterkit.net.firewall.model import RuleDump
from clusterkit.shape import shape_problem

Role = Literal["mesh", "extra", "master_port", "rdzv_port"]
# "wrong_node": set by the control side when another node's listener answered
ConnectOutcome = Literal[
    "ok", "refused", "unreachable", "timeout", "error", "foreign", "wrong_node"
]


class MalformedMessage(ValueError):
    """A node's report does not have the shape of its step; the message names where."""


# --- the facts step ----------------------------------------------------------------------


class InterfaceAddress(TypedDict):
    family: Literal["inet", "inet6"]
    address: str
    prefixlen: int | None


class _Interface(TypedDict):
    name: str
    up: bool | None  # IFF_UP; None where sysfs could not be read
    operstate: str | None
    mtu: int | None
    flags: list[str] | None  # `ip -j addr`'s; None where ip did not list it
    addresses: list[InterfaceAddress]


class NodeInterface(_Interface, total=False):
    kind: str | None  # from sysfs only (prelude.interface_kind)


class _Lookup(TypedDict):
    name: str
    addresses: list[str]  # in the resolver's order; empty when it failed


class NameLookup(_Lookup, total=False):
    error: str  # why it failed


class PortHolder(TypedDict):
    pid: int | None
    command: str | None


class FirewallDump(RuleDump, total=False):
    exit_code: int


class IfnameEnv(TypedDict, total=False):
    NCCL_SOCKET_IFNAME: str | None
    GLOO_SOCKET_IFNAME: str | None


class FactsReport(TypedDict):
    phase: Literal["facts"]
    hostname: str
    uid: int
    interfaces: list[NodeInterface]
    interfaces_error: str | None
    env: IfnameEnv
    ephemeral_range: list[int] | None  # [low, high] of net.ipv4.ip_local_port_range
    reserved_in_use: dict[str, PortHolder | None]  # port -> who holds it
    firewall: dict[str, FirewallDump]  # tool -> its rule dump
    master: NameLookup | None  # None: no master name was asked for
    own_name: NameLookup


# --- a mesh round --------------------------------------------------------------------------


class ListenerReport(TypedDict):
    port: int  # the kernel's choice where the plan said 0
    role: Role
    state: Literal["ok", "in_use", "error"]
    error: str | None
    holder: PortHolder | None  # who holds a port in use
    seen: list[str] | None  # who reached it; None: the node never said (control side)


class BoundReport(TypedDict):
    phase: Literal["bound"]
    listeners: list[ListenerReport]


class Target(TypedDict):
    peer: str
    address: str
    port: int
    role: Role


class _Tried(Target):
    result: ConnectOutcome
    detail: str  # the name that answered when "ok"


class ConnectResult(_Tried, total=False):
    seconds: float  # absent when the connect never returned


class MeshReport(TypedDict):
    phase: Literal["mesh"]
    round: int
    connects: list[ConnectResult]
    seconds: float
    cpu: float  # the node process's CPU seconds so far


class ListenersReport(TypedDict):
    phase: Literal["listeners"]
    round: int
    listeners: list[ListenerReport]


_Source = TypedDict("_Source", {"from": str, "round": int})


class Connect(ConnectResult, _Source):
    """One connect as the control side records it: whose it was and in which round."""


# --- what the control side sends -----------------------------------------------------------


class FactsArgs(TypedDict):
    master: str
    reserved_ports: list[int]


class ListenSpec(TypedDict):
    port: int  # 0: any free port
    role: Role


class ListenPlan(TypedDict):
    name: str
    round: int
    listen: list[ListenSpec]
    source: str | None  # the address connects leave from
    window: float
    connect_timeout: float


class GoMessage(TypedDict):
    go: bool
    targets: list[Target]


class CloseMessage(TypedDict):
    close: bool


# --- parsing --------------------------------------------------------------------------------


def parse_facts_report(raw: object) -> FactsReport:
    """The facts step's report, checked: MalformedMessage naming the first bad value."""
    report = _checked(raw, FactsReport, "facts")
    problem = _range_problem(report["ephemeral_range"]) or _address_problem(report)
    if problem:
        raise MalformedMessage(problem)
    return report


def parse_bound(raw: object) -> BoundReport:
    return _checked(raw, BoundReport, "bound")


def parse_mesh(raw: object) -> MeshReport:
    return _checked(raw, MeshReport, "mesh")


def parse_listeners(raw: object) -> ListenersReport:
    return _checked(raw, ListenersReport, "listeners")


_Report = TypeVar("_Report")


def _checked(raw: object, shape: type[_Report], path: str) -> _Report:
    problem = shape_problem(raw, shape, path)
    if problem is not None:
        raise MalformedMessage(problem)
    return cast(_Report, raw)


def _range_problem(ports: list[int] | None) -> str | None:
    if ports is None or (len(ports) == 2 and 0 < ports[0] <= ports[1] < 65536):
        return None
    return f"facts.ephemeral_range: two ports, low to high, expected, got {ports!r:.40}"


def _address_problem(report: FactsReport) -> str | None:
    """The first address that is none: the analysis parses every one."""
    for i, interface in enumerate(report["interfaces"]):
        for j, entry in enumerate(interface["addresses"]):
            prefix = "" if entry["prefixlen"] is None else f"/{entry['prefixlen']}"
            if not _parses(ipaddress.ip_interface, entry["address"] + prefix):
                path = f"facts.interfaces[{i}].addresses[{j}]"
                return f"{path}: not an IP address: {entry['address'] + prefix!r:.40}"
    lookups = (("master", report["master"]), ("own_name", report["own_name"]))
    for key, lookup in lookups:
        for j, address in enumerate(lookup["addresses"] if lookup else []):
            if not _parses(ipaddress.ip_address, address):
                return f"facts.{key}.addresses[{j}]: not an IP address: {address!r:.40}"
    return None


def _parses(parse: Callable[[str], object], text: str) -> bool:
    try:
        parse(text)
    except ValueError:
        return False
    return True
