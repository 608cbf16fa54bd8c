"""The HTML report's network mesh: every node pair's connect result, the firewall rule that
blocks a failing pair, the connect time (from details.network).

Apart from the page: it reads the network stage's details and net.firewall's found.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping
from typing import Any

from clusterkit.checks.model import Finding, Status
from clusterkit.report.heatmap import Pair, heat_table, legend
from clusterkit.report.markup import NAME_MAX, text
from clusterkit.report.model import Report

RULE_MAX = 400  # characters of a firewall rule shown on a mesh cell


def mesh_section(report: Report, marks: Mapping[str, Status]) -> str:
    """details.network: every pair's result (worst over the mesh ports), the node rule that
    blocks a failing pair where net.firewall named one, and the fastest connect's time."""
    network = report.details.get("network")
    if not isinstance(network, dict) or not isinstance(network.get("matrix"), dict):
        return ""
    matrix = network["matrix"]
    if not matrix:
        return ""
    hosts = [str(host) for host in matrix]
    connects = network.get("connects") or []
    latency = connect_ms(connects)
    rules = blocking_rules(report.findings, connects)
    median = statistics.median(latency.values()) if latency else 0.0
    cells = (
        "".join(
            mesh_cell(src, dst, (matrix.get(src) or {}).get(dst), latency, rules, median)
            for dst in hosts
        )
        for src in hosts
    )
    return (
        '<section id="mesh"><h2>Network mesh</h2><p class="note">row: the node that '
        "connected; column: the node it reached (hover a cell for the pair)</p>"
        + legend(
            [
                ("o", "reachable (the connect time on hover)"),
                ("o2", "reachable, slow connect (over 5x the median)"),
                ("x", "failed (the blocking rule on hover)"),
                ("u", "untested"),
                ("na", "not in the mesh"),
            ],
            heat_table(hosts, cells, marks),
        )
        + "</section>\n"
    )


def connect_ms(connects: Iterable[Any]) -> dict[tuple[str, str], float]:
    """(from, peer) -> the fastest successful mesh connect, in milliseconds."""
    fastest: dict[tuple[str, str], float] = {}
    for item in connects:
        if not isinstance(item, dict) or item.get("result") != "ok":
            continue
        seconds = item.get("seconds")
        if item.get("role") not in ("mesh", "extra") or not isinstance(seconds, (int, float)):
            continue
        key = (str(item.get("from")), str(item.get("peer")))
        fastest[key] = min(fastest.get(key, float("inf")), seconds * 1000)
    return fastest


def blocking_rules(findings: Iterable[Finding], connects: Iterable[Any]) -> dict[Pair, str]:
    """(source, destination) -> "node: rule" from net.firewall's found (node -> rule ->
    ["source -> destination:port", ...]), for the port of the pair's failed mesh connect
    only: a rule on the rendezvous ports does not explain a mesh cell."""
    failed = {
        f"{item.get('from')} -> {item.get('peer')}:{item.get('port')}"
        for item in connects
        if isinstance(item, dict)
        and item.get("role") in ("mesh", "extra")
        and item.get("result") != "ok"
    }
    rules: dict[Pair, str] = {}
    for finding in findings:
        if finding.id != "net.firewall" or not isinstance(finding.found, dict):
            continue
        for node, by_rule in finding.found.items():
            for rule, paths in (by_rule if isinstance(by_rule, dict) else {}).items():
                for path in set(paths if isinstance(paths, list) else []) & failed:
                    source, _, rest = path.partition(" -> ")
                    rules.setdefault((source, rest.rpartition(":")[0]), f"{node}: {rule}")
    return rules


def mesh_cell(
    src: str,
    dst: str,
    result: object,
    latency: Mapping[tuple[str, str], float],
    rules: Mapping[tuple[str, str], str],
    median: float,
) -> str:
    if src == dst:
        return '<td class="me">'
    if result is None:
        return '<td class="na">'
    pair = f"{text(src, NAME_MAX)}→{text(dst, NAME_MAX)}"
    if result == "untested":
        return f'<td class="u" title="{pair}: untested">'
    if result != "ok":
        rule = rules.get((src, dst))
        why = f", blocked by {text(rule, RULE_MAX)}" if rule else ""
        return f'<td class="x" title="{pair}: {text(result, NAME_MAX)}{why}">'
    ms = latency.get((src, dst))
    slow = ms is not None and median > 0 and ms > 5 * median
    shown = f" {ms:.2f} ms" if ms is not None else ""
    return f'<td class="{"o2" if slow else "o"}" title="{pair}{shown}">'
