"""The master's name and the nodes' own hostnames, as each node resolves them (pure).

Check ids: net.master-resolve, net.master-address, net.hostname-loopback. Apart because they
read the name lookups, not interfaces nor connects.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping

from clusterkit.checks.model import Finding, Status
from clusterkit.checks.parity import sole_majority
from clusterkit.net.finding import finding
from clusterkit.net.messages import (
    FactsReport,
    NameLookup,
)
from clusterkit.net.plan import NetworkOptions, master_address


def _is_loopback(address: str) -> bool:
    return ipaddress.ip_address(address).is_loopback


def master_findings(
    facts_by_host: Mapping[str, FactsReport], options: NetworkOptions
) -> list[Finding]:
    """net.master-resolve, net.master-address, net.hostname-loopback."""
    resolved = {host: master_address(facts) for host, facts in facts_by_host.items()}
    answered = {host: address for host, address in resolved.items() if address}
    # With no majority (1 against 1) there is no address to expect: nobody is the odd one.
    expected = sole_majority(answered)[1] if answered else None
    return [
        _master_resolve_finding(facts_by_host, options.master_name, resolved, expected),
        *_master_address_findings(facts_by_host, options, answered, expected),
        _hostname_finding(facts_by_host),
    ]


def _master_resolve_finding(
    facts_by_host: Mapping[str, FactsReport],
    name: str,
    resolved: dict[str, str | None],
    expected: str | None,
) -> Finding:
    """net.master-resolve: every node resolves the master's name, to the same address."""
    failed = {
        host: _lookup_error(facts["master"]) or "no address"
        for host, facts in facts_by_host.items()
        if resolved[host] is None
    }
    answered = {host: address for host, address in resolved.items() if address}
    odd = sorted(host for host in answered if expected and answered[host] != expected)
    tied = answered if expected is None else {}
    if not (failed or odd or tied):
        return finding(
            "net.master-resolve",
            Status.OK,
            f"{name} resolves to {expected} on every node",
            expected=expected,
        )
    parts = [f"{host}: {name} does not resolve ({reason})" for host, reason in failed.items()]
    parts += [f"{host} resolves {name} to {resolved[host]}" for host in odd]
    if tied:
        pairs = ", ".join(f"{host} {address}" for host, address in tied.items())
        parts.append(f"{name} resolves differently and no address has a majority: {pairs}")
    return finding(
        "net.master-resolve",
        Status.FAIL,
        "; ".join(parts) + (f"; the others to {expected}" if expected else ""),
        hosts=sorted(set(failed) | set(odd)),
        expected=expected,
        found={host: resolved[host] for host in sorted(set(failed) | set(odd) | set(tied))},
        remedy=f"make {name} resolve to the master's fabric address on every node "
        "(DNS or /etc/hosts), or set clusterkit.master to that address",
    )


def _master_address_findings(
    facts_by_host: Mapping[str, FactsReport],
    options: NetworkOptions,
    answered: dict[str, str],
    expected: str | None,
) -> list[Finding]:
    """net.master-address: the name resolves to an address of the master, never loopback
    (none when there is nothing to compare)."""
    name, master = options.master_name, options.master_host
    master_facts = facts_by_host.get(master)
    loopback = sorted(host for host, address in answered.items() if _is_loopback(address))
    if loopback:
        return [
            finding(
                "net.master-address",
                Status.FAIL,
                f"{name} resolves to a loopback address on {', '.join(loopback)}: peers "
                "cannot reach the rendezvous there",
                hosts=loopback,
                found={host: answered[host] for host in loopback},
                remedy=f"remove the 127.x line naming {name} from /etc/hosts on those nodes",
            )
        ]
    if not expected or master_facts is None:
        return []
    own = {entry["address"] for item in master_facts["interfaces"] for entry in item["addresses"]}
    if expected in own:
        return [
            finding(
                "net.master-address",
                Status.OK,
                f"{expected} belongs to {master}",
                hosts=[master],
            )
        ]
    return [
        finding(
            "net.master-address",
            Status.FAIL,
            f"{name} resolves to {expected}, which is not an address of the master "
            f"{master} (has {', '.join(sorted(own)) or 'none'})",
            hosts=[master],
            expected=sorted(own),
            found=expected,
            remedy=f"point {name} at an address of {master}",
        )
    ]


def _lookup_error(lookup: NameLookup | None) -> str | None:
    return lookup.get("error") if lookup else None


def _hostname_finding(facts_by_host: Mapping[str, FactsReport]) -> Finding:
    flagged: dict[str, str] = {}
    for host, facts in facts_by_host.items():
        own = facts["own_name"]
        addresses = own["addresses"]
        hostname = facts["hostname"]
        if not addresses:
            flagged[host] = f"hostname {hostname} does not resolve ({own.get('error')})"
        elif any(_is_loopback(address) for address in addresses):
            flagged[host] = f"hostname {hostname} resolves to {', '.join(addresses)}"
    if not flagged:
        return finding("net.hostname-loopback", Status.OK, "node hostnames resolve off loopback")
    return finding(
        "net.hostname-loopback",
        Status.WARN,
        "; ".join(f"{host}: {text}" for host, text in sorted(flagged.items()))
        + ": gloo's default device and c10d host matching use this address",
        hosts=sorted(flagged),
        found=flagged,
        remedy="map the hostname to the fabric address in /etc/hosts (replace the 127.0.1.1 "
        "line) or set GLOO_SOCKET_IFNAME",
    )
