"""The job's own environment on each node against the settings clusterkit validated.

A MASTER_ADDR, MASTER_PORT, WORLD_SIZE or RANK left in a node's profile is read by jobs that
initialise with `env://` (and by scripts that pass them on to torchrun): the job then waits for
a rendezvous nobody hosts, or forms a world of the wrong size, although every check of the
validated settings passed. Pure: facts and the inventory in, findings out.
"""

from __future__ import annotations

import ipaddress

from clusterkit.checks.interfaces import interface_rank
from clusterkit.checks.model import Finding, Status, over_hosts, per_host
from clusterkit.checks.parity import Facts, torch_cuda
from clusterkit.facts import HostFacts, InterfaceFacts, collected
from clusterkit.inventory.model import Inventory

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


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
        counts = [int(collected(f.get("gpus")).get("count") or 0) for f in facts.values()]
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
        env = collected(f.get("env"))
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
        + per_host(wrong),
        remedy="unset these variables in the nodes' profiles (/etc/environment, ~/.bashrc, "
        "the job script's exports), or set clusterkit.master / master_port to match them",
    )


def _usable(iface: InterfaceFacts) -> bool:
    """Up, with an IPv4 address: what NCCL or gloo could bind."""
    if iface.get("state") not in ("up", "unknown") or "UP" not in (iface.get("flags") or []):
        return False
    return any("." in address for address in iface.get("addresses") or [])


def candidate_interfaces(f: HostFacts, route: str | None = None) -> list[str]:
    """Interfaces NCCL or gloo could pick, by kind (checks/interfaces.py interface_rank): NICs,
    bonds, VLANs and IPoIB; virtual ones (a container's veth) only where no NIC is; never
    loopback, bridges, tunnels or container networks, unless it is `route`, the interface
    that carries the traffic to the master."""
    interfaces = collected(f.get("network")).get("interfaces") or {}
    ranked: dict[str, int] = {}
    for name, iface in sorted(interfaces.items()):
        if "LOOPBACK" in (iface.get("flags") or []) or not _usable(iface):
            continue
        rank = interface_rank(name, iface.get("kind"))
        if rank is None and name == route:
            rank = 0  # a bridge holding the node's address: the NIC under it has none
        if rank is not None:
            ranked[name] = rank
    best = min(ranked.values(), default=0)
    return [name for name, rank in ranked.items() if rank == best or name == route]


def _holding(f: HostFacts, target: IPAddress, *, exact: bool = False) -> str | None:
    """The interface that has `target` (exact), or whose subnet holds it."""
    for name, iface in (collected(f.get("network")).get("interfaces") or {}).items():
        for entry in iface.get("addresses") or []:
            try:
                held = ipaddress.ip_interface(entry)
            except ValueError:
                continue
            if target == held.ip or (not exact and target in held.network):
                return str(name)
    return None


def _longest_prefix(f: HostFacts, target: IPAddress) -> str | None:
    """The device of the main routing table's longest prefix holding `target`."""
    best: tuple[int, str] | None = None
    for route in collected(f.get("network")).get("routes") or []:
        destination = str(route.get("dst"))
        try:
            network = ipaddress.ip_network(
                "0.0.0.0/0" if destination == "default" else destination, strict=False
            )
        except ValueError:
            continue
        longer = best is None or network.prefixlen > best[0]
        if longer and target.version == network.version and target in network:
            best = (network.prefixlen, str(route.get("dev")))
    return best[1] if best else None


def route_interface(f: HostFacts, target: IPAddress) -> str | None:
    """The interface a node sends `target` through, as the kernel picks it: the one having
    the address, else the longest matching prefix of its main routing table (the probe's
    `network.routes`), else (facts without routes) the one whose subnet holds it."""
    return _holding(f, target, exact=True) or _longest_prefix(f, target) or _holding(f, target)


def _default_route(f: HostFacts) -> str | None:
    """The interface of the node's default route, if the probe read one."""
    for route in collected(f.get("network")).get("routes") or []:
        if route.get("dst") == "default":
            return str(route.get("dev"))
    return None


def _collective_route(f: HostFacts, master: IPAddress | None, own: str) -> str | None:
    """The interface the node's collectives should use: the route to the master, else the one
    holding the node's own inventory address (where clusterkit reached it), else the default
    route."""
    for target in (master, _address(own)):
        if target and (device := route_interface(f, target)):
            return device
    return _default_route(f)


def _address(text: str | None) -> IPAddress | None:
    """`text` as an IP address, unless it is not one or is loopback (`localhost` hosts)."""
    try:
        address = ipaddress.ip_address(text or "")
    except ValueError:
        return None
    return None if address.is_loopback else address


def master_address(facts: Facts, inventory: Inventory) -> IPAddress | None:
    """The address peers reach the master at: clusterkit.master or the master's inventory
    address where either is an IP, else the address of the master's own default-route
    interface (a name resolves differently here and on the nodes; the route does not)."""
    settings = inventory.settings
    master = next(
        (h for h in inventory.hosts if settings.master in (h.name, h.address)), inventory.hosts[0]
    )
    for text in (settings.master, master.address):
        if address := _address(text):
            return address
    own = facts.get(master.name) or HostFacts()
    interfaces = collected(own.get("network")).get("interfaces") or {}
    route = _default_route(own)
    for entry in interfaces.get(route, {}).get("addresses", []) if route else []:
        if address := _address(str(entry).split("/")[0]):
            return address
    return None


def _socket_ifname(facts: Facts, inventory: Inventory) -> Finding:
    if inventory.settings.interface:
        return Finding(
            "env.socket-ifname",
            Status.SKIP,
            f"not checked: clusterkit.interface names {inventory.settings.interface}",
        )
    master = master_address(facts, inventory)
    addresses = {host.name: host.address for host in inventory.hosts}
    ambiguous: dict[str, str] = {}
    for host, f in facts.items():
        env = collected(f.get("env"))
        if env.get("NCCL_SOCKET_IFNAME") or env.get("GLOO_SOCKET_IFNAME"):
            continue
        route = _collective_route(f, master, addresses.get(host, ""))
        candidates = candidate_interfaces(f, route)
        if len(candidates) > 1:
            chosen = route if route in candidates else candidates[0]
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
        "ones (or one peers cannot reach): " + per_host(ambiguous),
        remedy="set NCCL_SOCKET_IFNAME and GLOO_SOCKET_IFNAME in the job environment, or "
        "clusterkit.interface, to the interface named above",
    )
