"""Settings of the network stage and the mesh plan built from every node's facts (pure).

The control side plans every listener and address between the facts and the mesh; a node
binds its mesh port wherever the kernel finds one free, and learns the peers' bound ports
with "go", so each node knows which ports it binds and which peers' ports it connects to.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from clusterkit.inventory.model import Inventory, NetworkSettings
from clusterkit.net.cover import UNKNOWN_SUBNET, Pair
from clusterkit.net.ifname import InterfaceChoice, choose_interface
from clusterkit.net.messages import (
    FactsReport,
    GoMessage,
    ListenerReport,
    ListenPlan,
    ListenSpec,
    Role,
    Target,
)

RENDEZVOUS: tuple[Role, ...] = ("master_port", "rdzv_port")  # the master's fixed ports


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
    def rendezvous_ports(self) -> tuple[tuple[int, Role], ...]:
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


def master_address(facts: FactsReport) -> str | None:
    """The address MASTER_ADDR resolves to on this node (the first, which connect tries)."""
    master = facts["master"]
    return master["addresses"][0] if master and master["addresses"] else None


def interface_choices(
    facts_by_host: Mapping[str, FactsReport], options: NetworkOptions
) -> dict[str, InterfaceChoice]:
    return {
        host: choose_interface(
            facts["interfaces"],
            setting=options.interface,
            env=facts["env"],
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


def listen_plans(
    hosts: Sequence[str],
    choices: dict[str, InterfaceChoice],
    options: NetworkOptions,
    *,
    round_number: int = 1,
) -> dict[str, ListenPlan]:
    """One round's listeners for every node in `hosts` (those whose facts came back). The
    mesh port is 0: the node binds whatever free ephemeral port the kernel gives it and
    reports it, so checks run at once on the same nodes never plan the same port. The
    user's ports (extra ports; the rendezvous ports on the master, first round only) are
    fixed. Where to connect follows in "go" (`go_messages`), from the ports actually bound."""
    plans: dict[str, ListenPlan] = {}
    for host in hosts:
        listen = [ListenSpec(port=0, role="mesh")]
        listen += [ListenSpec(port=port, role="extra") for port in options.extra_ports]
        if round_number == 1 and host == options.master_host:
            listen += [ListenSpec(port=port, role=role) for port, role in options.rendezvous_ports]
        plans[host] = {
            "name": host,
            "round": round_number,
            "listen": listen,
            "source": choices[host].address,
            "window": options.window,
            "connect_timeout": options.connect_timeout,
        }
    return plans


def go_messages(
    bound: Mapping[str, list[ListenerReport]],
    facts_by_host: Mapping[str, FactsReport],
    choices: Mapping[str, InterfaceChoice],
    ssh_addresses: Mapping[str, str],
    options: NetworkOptions,
    pairs: Collection[Pair] | None = None,
) -> dict[str, GoMessage]:
    """The "go" of one round for every node that bound (`bound`: host -> its listeners as
    reported, in host order): which peers' ports it connects to. `pairs`: the (connects,
    accepts) pairs of this round, every pair when None. A port its node could not bind is
    no target: another program holds it (net.port-in-use), and talking to it would only
    disturb that program and blame the network for it."""
    hosts = list(bound)
    open_ports = {
        host: [item for item in listeners if item["state"] == "ok" and _port_number(item)]
        for host, listeners in bound.items()
    }
    connects_to = _connects_to(hosts, pairs)
    addresses = {host: fabric_address(choices[host], ssh_addresses[host]) for host in hosts}
    master = options.master_host
    rendezvous = [item for item in open_ports.get(master, []) if item["role"] in RENDEZVOUS]
    messages: dict[str, GoMessage] = {}
    for host in hosts:
        targets = [
            Target(peer=peer, address=addresses[peer], port=item["port"], role=item["role"])
            for peer in connects_to[host]
            for item in open_ports[peer]
            if item["role"] in ("mesh", "extra")
        ]
        resolved = master_address(facts_by_host[host])
        if resolved:
            targets += [
                Target(peer=master, address=resolved, port=item["port"], role=item["role"])
                for item in rendezvous
            ]
        messages[host] = {"go": True, "targets": targets}
    return messages


def _port_number(item: ListenerReport) -> bool:
    """A node's report names a real port: what it says goes to its peers' connects."""
    return 0 < item["port"] < 65536


def _connects_to(hosts: list[str], pairs: Collection[Pair] | None) -> dict[str, list[str]]:
    """Each host's peers to connect to, in host order."""
    if pairs is None:
        return {host: [peer for peer in hosts if peer != host] for host in hosts}
    order = {host: index for index, host in enumerate(hosts)}
    connects_to: dict[str, list[str]] = {host: [] for host in hosts}
    for a, b in sorted(
        (pair for pair in pairs if pair[0] in order and pair[1] in order),
        key=lambda pair: (order[pair[0]], order[pair[1]]),
    ):
        connects_to[a].append(b)
    return connects_to
