"""Findings of the network stage from the nodes' facts and connect results (pure).

The stage reads every network finding from here; each concern lives in its own module:
interfaces.py (net.interface, net.subnet, net.mtu, net.ifname-mismatch), master.py
(net.master-resolve, net.master-address, net.hostname-loopback), ports.py
(net.rendezvous-port-in-use, net.port-in-use), reachability.py (net.rendezvous, net.mesh,
net.subnet-cut) and attribution.py (net.firewall, net.firewall-unknown). Check ids are stable
and documented in docs/network.md; net.stage is here.
"""

from __future__ import annotations

from clusterkit.checks.model import Finding, Status
from clusterkit.net.finding import finding
from clusterkit.net.interfaces import ifname_findings, interface_findings
from clusterkit.net.master import master_findings
from clusterkit.net.ports import port_findings
from clusterkit.net.reachability import connect_findings

__all__ = [
    "connect_findings",
    "ifname_findings",
    "interface_findings",
    "master_findings",
    "port_findings",
    "stage_errors",
]


def stage_errors(errors: dict[str, str]) -> list[Finding]:
    return [
        finding(
            "net.stage",
            Status.ERROR,
            f"{host}: the network stage could not run: {reason}",
            hosts=[host],
            remedy="check that the node is reachable and has python3 on PATH "
            "(or set ansible_python_interpreter)",
        )
        for host, reason in sorted(errors.items())
    ]
