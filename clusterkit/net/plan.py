"""Settings of the network stage and the mesh plan built from every node's facts (pure).

The control side chooses every port and address between the facts and the mesh, so each
node knows which ports it binds and which peers' ports it connects to.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import Any

from clusterkit.inventory.model import Inventory, NetworkSettings
from clusterkit.net.cover import UNKNOWN_SUBNET, Pair
from clusterkit.net.ifname import InterfaceChoice, choose_interface


@dataclass(frozen=True)
class NetworkOptions:
    """`clusterkit.master`, ports, interface, and the `clusterkit.network` mapping."""

    master_host: str  # inventory name of the master node
    master_name: str  # what MASTER_ADDR names (resolved on every node)
    master_port: int
    rdzv_port: int
    interface: str | None
    extra_ports: tuple[int, ...] = ()
    connect_timeout: float = 3.0  # one connect attempt
    mesh: str = "auto"  # "full": every pair; "auto": every pair up to full_mesh_up_to nodes
    full_mesh_up_to: int = NetworkSettings.full_mesh_up_to

    @property
    def window(self) -> float:
        """All of a node's connects end within this (at most 32 run at once per node)."""
        return self.connect_timeout + 2.0

    @property
    def rendezvous_ports(self) -> tuple[tuple[int, str], ...]:
        return ((self.master_port, "master_port"), (self.rdzv_port, "rdzv_port"))

    @property
    def mesh_seconds(self) -> float:
        """The longest a node's mesh step runs once it has "go": the window, a connect
        started at its end, and the node's bound on joining its connect threads (1 s)."""
        return self.window + self.connect_timeout + 2.0

    def covering(self, nodes: int) -> bool:
        """Whether a mesh over this many nodes tests a covering set rather than every pair."""
        return self.mesh == "auto" and nodes > self.full_mesh_up_to

    @classmethod
    def from_inventory(cls, inventory: Inventory, mesh: str | None = None) -> NetworkOptions:
        """`mesh` (--mesh) wins over `clusterkit.network.mesh`."""
        settings = inventory.settings
        master = inventory.master
        return cls(
            master_host=master.name,
            master_name=settings.master or master.address,
            master_port=settings.master_port,
            rdzv_port=settings.rdzv_port,
            interface=settings.interface,
            extra_ports=settings.network.extra_ports,
            connect_timeout=settings.network.connect_timeout,
            mesh=mesh or settings.network.mesh,
            full_mesh_up_to=settings.network.full_mesh_up_to,
        )


def master_address(facts: dict[str, Any]) -> str | None:
    """The address MASTER_ADDR resolves to on this node (the first, which connect tries)."""
    master = facts.get("master") or {}
    addresses = master.get("addresses") or []
    return addresses[0] if addresses else None


def interface_choices(
    facts_by_host: dict[str, dict[str, Any]], options: NetworkOptions
) -> dict[str, InterfaceChoice]:
    return {
        host: choose_interface(
            facts.get("interfaces") or [],
            setting=options.interface,
            env=facts.get("env") or {},
            master_address=master_address(facts),
        )
        for host, facts in facts_by_host.items()
    }


def fabric_address(choice: InterfaceChoice, ssh_address: str) -> str:
    """Peers connect here: the collective interface's address, the SSH address only when the
    node has no such interface (its interface finding already fails)."""
    return choice.address or ssh_address


def subnets_of(choices: dict[str, InterfaceChoice]) -> dict[str, str]:
    """Each node's collective network (address/prefixlen), the unit a cut is reported in."""
    return {
        host: str(choice.network) if choice.network else UNKNOWN_SUBNET
        for host, choice in choices.items()
    }


def mesh_args(
    hosts: Sequence[str],
    facts_by_host: dict[str, dict[str, Any]],
    choices: dict[str, InterfaceChoice],
    ssh_addresses: dict[str, str],
    options: NetworkOptions,
    pairs: Collection[Pair] | None = None,
    *,
    round_number: int = 1,
) -> dict[str, dict[str, Any]]:
    """One round's plan for every node in `hosts` (those whose facts came back): which of its
    ports it binds, which peers' ports it connects to. `pairs`: the
    (connects, accepts) pairs of this round, every pair when None. The rendezvous ports are
    bound and tried in the first round only."""
    rendezvous = round_number == 1
    listen_by_host: dict[str, list[dict[str, Any]]] = {}
    for host in hosts:
        listen = [{"port": facts_by_host[host].get("mesh_port"), "role": "mesh"}]
        listen = [item for item in listen if item["port"]]
        listen += [{"port": port, "role": "extra"} for port in options.extra_ports]
        if rendezvous and host == options.master_host:
            listen += [{"port": port, "role": role} for port, role in options.rendezvous_ports]
        listen_by_host[host] = listen

    if pairs is None:
        connects_to = {host: [peer for peer in hosts if peer != host] for host in hosts}
    else:
        order = {host: index for index, host in enumerate(hosts)}
        connects_to = {host: [] for host in hosts}
        for a, b in sorted(
            (pair for pair in pairs if pair[0] in order and pair[1] in order),
            key=lambda pair: (order[pair[0]], order[pair[1]]),
        ):
            connects_to[a].append(b)
    addresses = {host: fabric_address(choices[host], ssh_addresses[host]) for host in hosts}

    plans: dict[str, dict[str, Any]] = {}
    for host in hosts:
        targets = [
            {"peer": peer, "address": addresses[peer], **item}
            for peer in connects_to[host]
            for item in listen_by_host[peer]
            if item["role"] in ("mesh", "extra")
        ]
        resolved = master_address(facts_by_host[host])
        if rendezvous and resolved and options.master_host in listen_by_host:
            for port, role in options.rendezvous_ports:
                targets.append(
                    {"peer": options.master_host, "address": resolved, "port": port, "role": role}
                )
        plans[host] = {
            "name": host,
            "round": round_number,
            "listen": listen_by_host[host],
            "targets": targets,
            "source": choices[host].address,
            "window": options.window,
            "connect_timeout": options.connect_timeout,
        }
    return plans
