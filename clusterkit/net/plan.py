"""Settings of the network stage and the mesh plan built from every node's facts (pure).

The control side chooses every port and address between the facts and the mesh, so each
node knows which ports it binds and which peers' ports it connects to.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from clusterkit.inventory.model import Inventory
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
    hold: float = 3.0  # listeners stay up this long after the connect window

    @property
    def window(self) -> float:
        """All of a node's connects end within this (at most 32 run at once per node)."""
        return self.connect_timeout + 2.0

    @property
    def rendezvous_ports(self) -> tuple[tuple[int, str], ...]:
        return ((self.master_port, "master_port"), (self.rdzv_port, "rdzv_port"))

    @property
    def mesh_seconds(self) -> float:
        """The longest the mesh step can run on a node before it exits by itself."""
        return self.window + self.connect_timeout + self.hold + 2.0

    @classmethod
    def from_inventory(cls, inventory: Inventory) -> NetworkOptions:
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


def mesh_args(
    hosts: Sequence[str],
    facts_by_host: dict[str, dict[str, Any]],
    choices: dict[str, InterfaceChoice],
    ssh_addresses: dict[str, str],
    options: NetworkOptions,
) -> dict[str, dict[str, Any]]:
    """The mesh plan for every node in `hosts` (those whose facts came back)."""
    listen_by_host: dict[str, list[dict[str, Any]]] = {}
    for host in hosts:
        listen = [{"port": facts_by_host[host].get("mesh_port"), "role": "mesh"}]
        listen = [item for item in listen if item["port"]]
        listen += [{"port": port, "role": "extra"} for port in options.extra_ports]
        if host == options.master_host:
            listen += [{"port": port, "role": role} for port, role in options.rendezvous_ports]
        listen_by_host[host] = listen

    plans: dict[str, dict[str, Any]] = {}
    for host in hosts:
        targets = []
        for peer in hosts:
            if peer == host:
                continue
            address = fabric_address(choices[peer], ssh_addresses[peer])
            for item in listen_by_host[peer]:
                if item["role"] in ("mesh", "extra"):
                    targets.append({"peer": peer, "address": address, **item})
        resolved = master_address(facts_by_host[host])
        if resolved and options.master_host in listen_by_host:
            for port, role in options.rendezvous_ports:
                targets.append(
                    {"peer": options.master_host, "address": resolved, "port": port, "role": role}
                )
        expected = {}
        for item in listen_by_host[host]:
            if item["role"] in ("mesh", "extra"):
                expected[str(item["port"])] = [peer for peer in hosts if peer != host]
            else:
                expected[str(item["port"])] = [
                    peer for peer in hosts if master_address(facts_by_host[peer])
                ]
        plans[host] = {
            "name": host,
            "listen": listen_by_host[host],
            "targets": targets,
            "source": choices[host].address,
            "expected_peers": expected,
            "window": options.window,
            "hold": options.hold,
            "connect_timeout": options.connect_timeout,
        }
    return plans
