"""Listeners the nodes could not bind: ports held by another program (pure).

Check ids: net.rendezvous-port-in-use, net.port-in-use. Apart because a port in use is no
fault of the network: its paths are not tested, nor explained by a firewall.
"""

from __future__ import annotations

from collections.abc import Mapping

from clusterkit.checks.model import Finding, Status
from clusterkit.net.finding import finding
from clusterkit.net.messages import (
    ListenerReport,
)


def port_in_use_finding(master: str, in_use: Mapping[int, ListenerReport]) -> Finding:
    """net.rendezvous-port-in-use: the master could not listen on a rendezvous port."""
    parts, found = [], []
    for port, item in sorted(in_use.items()):
        parts.append(f"{item['role']}: {_unbound_text(master, item)}")
        found.append({"port": port, "role": item["role"], "holder": item["holder"] or None})
    held = ", ".join(str(port) for port in sorted(in_use))
    return finding(
        "net.rendezvous-port-in-use",
        Status.FAIL,
        "; ".join(parts) + "; a previous job may still be running",
        hosts=[master],
        found=found,
        remedy=f"stop the process holding {held} on {master} or choose another port "
        "(clusterkit.master_port / clusterkit.rdzv_port)",
    )


def port_findings(unbound: Mapping[str, list[ListenerReport]]) -> list[Finding]:
    """net.port-in-use: listeners a node could not bind (host -> its listener reports), but
    the master's rendezvous ports. The paths to such a port are not tested: another program
    holds it, which is no fault of the network and no firewall's doing."""
    if not unbound:
        return []
    parts = [_unbound_text(host, item) for host, items in unbound.items() for item in items]
    found = [
        {
            "host": host,
            "port": item["port"] or None,
            "role": item["role"],
            "state": item["state"],
            "error": item["error"],
            "holder": item["holder"],
        }
        for host, items in unbound.items()
        for item in items
    ]
    return [
        finding(
            "net.port-in-use",
            Status.FAIL,
            "; ".join(parts) + "; paths to these ports were not tested",
            hosts=sorted(unbound),
            found=found,
            remedy="stop the process holding the port on that node, or list other ports in "
            "clusterkit.network.extra_ports; a node with no free port left has exhausted "
            "net.ipv4.ip_local_port_range",
        )
    ]


def _unbound_text(host: str, item: ListenerReport) -> str:
    """What kept a node from listening on one port, in words."""
    port, holder = item["port"], item["holder"]
    if item["state"] == "in_use":
        who = f" (pid {holder['pid']}: {holder['command']})" if holder and holder["pid"] else ""
        return f"port {port} on {host} is in use by another process{who}"
    if not port:
        return f"{host} could not listen on any free port: {item['error']}"
    return f"{host} could not listen on port {port}: {item['error']}"
