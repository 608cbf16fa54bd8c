"""The HTML report's bandwidth maps: per pair (bench --find-slow) and per node
(bench --per-node), from details.bench.

Apart from the page: it reads the bench's details and the find-slow rule's threshold.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from clusterkit.checks.model import Status
from clusterkit.report.heatmap import LABELLED_UP_TO, MARK_CLASS, heat_table, legend
from clusterkit.report.markup import NAME_MAX, text


def bench_sections(bench: object) -> Iterator[str]:
    if not isinstance(bench, dict):
        return
    find_slow, per_node = bench.get("find_slow"), bench.get("per_node")
    if isinstance(find_slow, dict) and find_slow.get("rounds"):
        yield pairs_section(find_slow)
    if isinstance(per_node, dict) and per_node.get("nodes"):
        yield per_node_section(per_node)


def ratio_class(ratio: object, fraction: float) -> str:
    """A group's or node's bus bandwidth against the median: below `fraction` of it stands
    out (the find-slow rule's own threshold), a little below shades towards it."""
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool):
        return "u"
    if ratio < fraction:
        return "o3"
    return "o" if ratio >= 0.9 else "o1" if ratio >= (0.9 + fraction) / 2 else "o2"


def pair_ratios(find_slow: Mapping[str, Any]) -> dict[tuple[str, str], tuple[float, float]]:
    """(a, b) -> (ratio, GB/s) of the slowest group that held both nodes."""
    pairs: dict[tuple[str, str], tuple[float, float]] = {}
    for entry in find_slow.get("rounds") or []:
        for group in (entry.get("groups") or []) if isinstance(entry, dict) else []:
            ratio, busbw = group.get("ratio"), group.get("busbw")
            if not isinstance(ratio, (int, float)) or not isinstance(busbw, (int, float)):
                continue
            hosts = [str(host) for host in group.get("hosts") or []]
            for a in hosts:
                for b in hosts:
                    if a != b and ratio < pairs.get((a, b), (float("inf"), 0.0))[0]:
                        pairs[(a, b)] = (float(ratio), float(busbw))
    return pairs


def pairs_section(find_slow: Mapping[str, Any]) -> str:
    """details.bench.find_slow: a node x node map of the groups' bandwidth, the slow node
    named in red (its row and column), and each node's median against the others'."""
    nodes = find_slow.get("nodes")
    if not isinstance(nodes, dict) or not nodes:
        return ""
    hosts = [str(host) for host in nodes]
    slow = {str(host) for host in find_slow.get("slow") or []}
    fraction = _fraction(find_slow)
    pairs = pair_ratios(find_slow)
    slow_marks = {host: Status.FAIL for host in slow}
    cells = ("".join(pair_cell(src, dst, pairs, fraction) for dst in hosts) for src in hosts)
    named = ", ".join(text(host, NAME_MAX) for host in sorted(slow)) or "none"
    return (
        '<section id="bench-pairs"><h2>Bandwidth per pair (bench --find-slow)</h2>'
        f'<p class="note">each pair: the bus bandwidth of the slowest group that held both, '
        f"against its round's median; slow node named: {named}</p>"
        + legend(
            [
                ("o", "90% of the median or more"),
                ("o2", "below"),
                ("o3", f"below {fraction:.0%} of the median"),
                ("na", "not in one group"),
                ("x", "named slow"),
            ],
            heat_table(hosts, cells, slow_marks)
            + '<p class="note">each node: the median of the groups it was in</p>'
            + node_strip(
                hosts,
                {
                    h: (_get(nodes, h, "median_ratio"), _get(nodes, h, "median_busbw"))
                    for h in hosts
                },
                slow_marks,
                fraction,
            ),
        )
        + "</section>\n"
    )


def pair_cell(
    src: str, dst: str, pairs: Mapping[tuple[str, str], tuple[float, float]], fraction: float
) -> str:
    if src == dst:
        return '<td class="me">'
    ratio, busbw = pairs.get((src, dst), (None, None))
    if ratio is None:
        return '<td class="na">'
    pair = f"{text(src, NAME_MAX)} + {text(dst, NAME_MAX)}"
    return (
        f'<td class="{ratio_class(ratio, fraction)}" title="{pair}: {busbw:.3g} GB/s, '
        f'{ratio:.2f}x the round median">'
    )


def per_node_section(per_node: Mapping[str, Any]) -> str:
    nodes = per_node["nodes"]
    hosts = [str(host) for host in nodes]
    fraction = _fraction(per_node)
    statuses = {h: _status(_get(nodes, h, "status")) for h in hosts}
    median = per_node.get("median_busbw")
    shown = f"{median:.3g} GB/s" if isinstance(median, (int, float)) else "none"
    return (
        '<section id="bench-nodes"><h2>Bandwidth per node (bench --per-node)</h2>'
        f'<p class="note">each node alone, against the median of the nodes ({shown})</p>'
        + legend(
            [
                ("o", "90% of the median or more"),
                ("o2", "below"),
                ("o3", f"below {fraction:.0%} of the median"),
                ("x", "failed bench.node-busbw"),
                ("e", "no figure"),
            ],
            node_strip(
                hosts,
                {h: (_get(nodes, h, "ratio"), _get(nodes, h, "busbw")) for h in hosts},
                statuses,
                fraction,
            ),
        )
        + "</section>\n"
    )


def node_strip(
    hosts: Sequence[str],
    figures: Mapping[str, tuple[object, object]],
    statuses: Mapping[str, Status],
    fraction: float,
) -> str:
    """One cell per node: coloured by its ratio to the median, red when its check failed."""
    labelled = len(hosts) <= LABELLED_UP_TO
    size = "width:86px;height:34px" if labelled else "width:14px;height:14px"
    cells = []
    for host in hosts:
        ratio, busbw = figures[host]
        status = statuses.get(host, Status.OK)
        cls = MARK_CLASS[status] if status in (Status.FAIL, Status.ERROR) else ""
        figure = f"{busbw:.3g} GB/s" if isinstance(busbw, (int, float)) else "no figure"
        times = f", {ratio:.2f}x median" if isinstance(ratio, (int, float)) else ""
        label = f"{text(host, 14)}<br>{figure}" if labelled else ""
        cells.append(
            f'<div class="{cls or ratio_class(ratio, fraction)}" style="{size}" '
            f'title="{text(host, NAME_MAX)}: {figure}{times}, {status.value}">{label}</div>'
        )
    return f'<div class="strip">{"".join(cells)}</div>'


def _fraction(details: Mapping[str, Any]) -> float:
    value = details.get("fraction")
    return float(value) if isinstance(value, (int, float)) and 0 < value < 1 else 0.7


def _get(nodes: Mapping[str, Any], host: str, key: str) -> object:
    node = nodes.get(host)
    return node.get(key) if isinstance(node, dict) else None


def _status(value: object) -> Status:
    try:
        return Status(str(value))
    except ValueError:
        return Status.ERROR
