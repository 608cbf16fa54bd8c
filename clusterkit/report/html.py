"""The HTML report: one self-contained page to look at past a handful of nodes (docs/report.md).

A pure function of the same report the JSON carries. The page fetches nothing: inline CSS and
a few lines of inline JS (the findings filter), and a Content-Security-Policy that forbids
every request. Everything a node or the inventory wrote is hostile: made printable, cut to a
bound and HTML-escaped, in text and attributes alike; the script reads no node text.
"""

from __future__ import annotations

import html
import re
import statistics
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from clusterkit.checks.gpu_health import SLOWDOWN_REASONS
from clusterkit.checks.model import Finding, Status
from clusterkit.checks.xid import group_events
from clusterkit.facts import GpuDevice, collected
from clusterkit.hostlist import fold_hostlist
from clusterkit.report.escape import printable
from clusterkit.report.model import STAGE_ORDER, Report

TEXT_MAX = 2000  # characters of one message, expected/found or remedy
NAME_MAX = 128  # characters of a host name, check id or rule
RULE_MAX = 400  # characters of a firewall rule shown on a mesh cell
HOSTS_SHOWN = 12  # a finding's folded hosts are cut at this many names' length
LABELLED_UP_TO = 32  # heat maps of more nodes: no text in cells, names on hover only
FAIL_COLOUR = "#d62728"  # the one colour of a failure; the browser test looks for it

Pair = tuple[str, str]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:16px 24px;color:#222;background:#fff}
h1{font-size:22px;margin:0}h2{font-size:17px;margin:22px 0 6px}
.verdict{padding:10px 14px;border-radius:6px;color:#fff}
.v-pass{background:#2ca02c}.v-fail{background:#d62728}.v-incomplete{background:#9467bd}
.note{color:#555;font-size:12px;margin:2px 0 8px}
table.f{border-collapse:collapse;width:100%}
table.f td,table.f th{border-bottom:1px solid #ddd;padding:3px 6px;text-align:left;
vertical-align:top}
table.f td.msg{word-break:break-word}table.f td.h{max-width:26ch;word-break:break-word}
.rem{color:#555;font-size:12px}td.id{white-space:nowrap}
.s{display:inline-block;min-width:44px;text-align:center;border-radius:3px;color:#fff;
font-size:12px;font-weight:600}
.s-ok{background:#2ca02c}.s-warn{background:#f0a020}.s-fail{background:#d62728}
.s-skip{background:#999}.s-error{background:#9467bd}
.filters{margin:6px 0}.filters label{margin-right:12px}
table.hm{border-collapse:collapse}
table.hm td,table.hm th{padding:0;border:1px solid #fff}
table.hm th{font-weight:normal;font-size:11px;text-align:right;padding-right:4px;
white-space:nowrap}
table.hm th.col{writing-mode:vertical-rl;transform:rotate(180deg);text-align:left;
padding:0 0 4px}
.o{background:#2ca02c}.o1{background:#8cc63f}.o2{background:#d5d52a}.o3{background:#f0a020}
.x{background:#d62728}.u{background:#bbb}.me{background:#444}.na{background:#f4f4f4}
.w{background:#f0a020}.e{background:#9467bd}.k{background:#999}
th.bad{color:#fff;background:#d62728}th.err{color:#fff;background:#9467bd}
.strip{display:flex;flex-wrap:wrap;gap:2px}
.strip div{color:#fff;font-size:11px;text-align:center;overflow:hidden;white-space:nowrap}
.legend span{display:inline-block;width:12px;height:12px;vertical-align:middle;margin:0 4px 0 10px}
td.g{font-size:11px;color:#fff;text-align:center;min-width:30px}
table.small td,table.small tbody th{height:5px;font-size:0;line-height:0;border-width:0 1px}
"""

SCRIPT = """
(function(){
var st=document.getElementById('f-status'),sg=document.getElementById('f-stage'),
ho=document.getElementById('f-host'),out=document.getElementById('f-count'),
rows=document.querySelectorAll('#findings tbody tr'),
problems={warn:1,fail:1,error:1};
function keep(r){var s=st.value,q=ho.value.trim().toLowerCase();
return (!s||r.dataset.status===s||(s==='problems'&&problems[r.dataset.status]))&&
(!sg.value||r.dataset.stage===sg.value)&&(!q||r.dataset.hosts.toLowerCase().indexOf(q)>=0);}
function apply(){var n=0;for(var i=0;i<rows.length;i++){var k=keep(rows[i]);
rows[i].hidden=!k;if(k)n++;}out.textContent=n+' of '+rows.length+' findings shown';}
var hash=new URLSearchParams(location.hash.slice(1));
if(hash.has('status'))st.value=hash.get('status');
if(hash.has('stage'))sg.value=hash.get('stage');
if(hash.has('host'))ho.value=hash.get('host');
st.onchange=sg.onchange=apply;ho.oninput=apply;apply();
})();
"""


def text(value: object, limit: int = TEXT_MAX) -> str:
    """Node or inventory text as HTML, in an element or a quoted attribute: one printable
    line (control characters as escapes), at most `limit` characters, every markup character
    escaped, quotes included."""
    line = printable(value)
    if len(line) > limit:
        line = line[: limit - 3] + "..."
    return html.escape(line, quote=True)


def render_html(report: Report) -> str:
    """The report as one HTML page; sections without data are left out."""
    marks = host_marks(report.findings)
    gpu_marks = host_marks(f for f in report.findings if f.id.startswith("gpu."))
    body = [
        verdict_section(report),
        nodes_section(report, marks),
        findings_section(report),
        mesh_section(report, host_marks(f for f in report.findings if f.stage == "network")),
        *bench_sections(report.details.get("bench")),
        gpu_section(report, gpu_marks),
    ]
    title = f"clusterkit {text(report.command, NAME_MAX)}: {report.verdict.upper()}"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        f"<title>{title}</title><style>{STYLE}</style></head>\n<body>\n"
        + "".join(part for part in body if part)
        + f"<script>{SCRIPT}</script>\n</body></html>\n"
    )


def host_marks(findings: Iterable[Finding]) -> dict[str, Status]:
    """host -> the worst status any finding gave it."""
    marks: dict[str, Status] = {}
    for finding in findings:
        for host in finding.hosts:
            if host not in marks or finding.status.rank > marks[host].rank:
                marks[host] = finding.status
    return marks


def verdict_section(report: Report) -> str:
    counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
    where = f" of {text(report.inventory, NAME_MAX)}" if report.inventory else ""
    return (
        f'<header class="verdict v-{report.verdict}" id="verdict">'
        f"<h1>{text(report.command, NAME_MAX)}{where}: {report.verdict.upper()}</h1>"
        f"<div>{len(report.hosts)} nodes, {counts or 'no findings'}, "
        f"{report.seconds:.1f} s</div></header>\n"
    )


# --- nodes and findings ----------------------------------------------------------------------

_MARK_CLASS = {Status.FAIL: "x", Status.ERROR: "e", Status.WARN: "w", Status.SKIP: "o"}


def nodes_section(report: Report, marks: Mapping[str, Status]) -> str:
    """Every node as one cell coloured by its worst finding: the failing node stands out."""
    hosts = list(report.hosts)
    if not hosts:
        return ""
    labelled = len(hosts) <= 64
    size = "min-width:64px;height:20px;padding:0 4px" if labelled else "width:12px;height:12px"
    cells = "".join(
        f'<div class="{_MARK_CLASS.get(marks.get(host, Status.OK), "o")}" style="{size}" '
        f'title="{text(host, NAME_MAX)}: {marks.get(host, Status.OK).value}">'
        f"{text(host, 24) if labelled else ''}</div>"
        for host in hosts
    )
    return (
        '<section id="nodes"><h2>Nodes</h2><p class="note">each node coloured by its worst '
        f'finding</p><div class="strip">{cells}</div></section>\n'
    )


def findings_section(report: Report) -> str:
    findings = sorted(report.findings, key=lambda f: -f.status.rank)
    stages = [s for s in STAGE_ORDER if any(f.stage == s for f in findings)]
    stages += sorted({f.stage for f in findings} - set(stages))
    rows = "".join(finding_row(finding) for finding in findings)
    return (
        '<section id="findings"><h2>Findings</h2>'
        + filters(stages)
        + '<p class="note" id="f-count"></p><table class="f"><thead><tr><th>status</th>'
        "<th>stage</th><th>check</th><th>hosts</th><th>message</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>\n"
    )


def filters(stages: Sequence[str]) -> str:
    statuses = ["problems", *(status.value for status in Status)]
    status_options = "".join(f'<option value="{s}">{s}</option>' for s in statuses)
    stage_options = "".join(
        f'<option value="{text(s, NAME_MAX)}">{text(s, NAME_MAX)}</option>' for s in stages
    )
    return (
        '<div class="filters"><label>status <select id="f-status"><option value="">all'
        f"</option>{status_options}</select></label>"
        '<label>stage <select id="f-stage"><option value="">all</option>'
        f"{stage_options}</select></label>"
        '<label>host <input id="f-host" type="search" placeholder="name"></label></div>'
    )


def finding_row(finding: Finding) -> str:
    hosts = [text(host, NAME_MAX) for host in finding.hosts]
    shown = text(fold_hostlist(list(finding.hosts)), NAME_MAX * HOSTS_SHOWN) if hosts else ""
    remedy = f'<div class="rem">remedy: {text(finding.remedy)}</div>' if finding.remedy else ""
    status = finding.status.value
    return (
        f'<tr data-status="{status}" data-stage="{text(finding.stage, NAME_MAX)}" '
        f'data-hosts="{" ".join(hosts)}"><td><span class="s s-{status}">{status.upper()}'
        f"</span></td><td>{text(finding.stage, NAME_MAX)}</td>"
        f'<td class="id">{text(finding.id, NAME_MAX)}</td><td class="h">{shown}</td>'
        f'<td class="msg">{text(finding.message)}{remedy}</td></tr>'
    )


# --- heat maps -------------------------------------------------------------------------------


def cell_px(count: int) -> int:
    """Cell size that keeps a heat map of `count` nodes near 800 pixels, 18 at most."""
    return max(2, min(18, 800 // max(count, 1)))


def heat_table(hosts: Sequence[str], cells: Iterable[str], marks: Mapping[str, Status]) -> str:
    """A node x node table: `cells` gives each row's <td>s in `hosts` order."""
    px = cell_px(len(hosts))
    labelled = len(hosts) <= LABELLED_UP_TO
    head = ""
    if labelled:
        head = "<tr><th></th>" + "".join(
            f'<th class="col{_bad(host, marks)}">{text(host, 24)}</th>' for host in hosts
        )
    rows = "".join(
        f'<tr><th class="{_bad(host, marks).strip()}" title="{text(host, NAME_MAX)}">'
        f"{text(host, 24) if labelled else ''}</th>{row}</tr>"
        for host, row in zip(hosts, cells)
    )
    lines = "" if px >= 6 else "border:0;"  # below 6 pixels a cell, white lines drown it
    cell = f"table.hm{px} td{{width:{px}px;height:{px}px;{lines}}}.hm{px} th{{min-width:6px}}"
    style = f"<style>{cell}</style>"
    return f'{style}<table class="hm hm{px}">{head}{rows}</table>'


def _bad(host: str, marks: Mapping[str, Status]) -> str:
    mark = marks.get(host)
    return " bad" if mark is Status.FAIL else " err" if mark is Status.ERROR else ""


def legend(items: Sequence[tuple[str, str]], picture: str) -> str:
    """The picture under a key of the colours it uses (a passing cluster's page shows no
    failure colour, not even in a key)."""
    used = [(cls, what) for cls, what in items if re.search(f'class="(g )?{cls}"', picture)]
    return (
        '<p class="note legend">'
        + "".join(f'<span class="{cls}"></span>{what}' for cls, what in used)
        + "</p>"
        + picture
    )


# --- the network mesh ------------------------------------------------------------------------


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


# --- the bench ------------------------------------------------------------------------------


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
        cls = _MARK_CLASS[status] if status in (Status.FAIL, Status.ERROR) else ""
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


# --- GPUs ----------------------------------------------------------------------------------


def gpu_section(report: Report, marks: Mapping[str, Status]) -> str:
    """Per node, per GPU: Xid events since the driver's load (as checks/xid.py judged them),
    row remaps and retired pages, uncorrected ECC, PCIe width below its maximum, an active
    slowdown reason. From the probe's facts; nodes without GPUs are left out."""
    grid = gpu_grid(report)
    if not grid:
        return ""
    columns = max(len(gpus) for gpus in grid.values())
    labelled = len(grid) <= LABELLED_UP_TO
    rows = "".join(
        f'<tr><th class="{_bad(host, marks).strip()}" title="{text(host, NAME_MAX)}">'
        f"{text(host, 24) if labelled else ''}</th>"
        + "".join(gpu_cell(host, cell, labelled) for cell in gpus)
        + "</tr>"
        for host, gpus in grid.items()
    )
    head = "<tr><th></th>" + "".join(f"<th>GPU {n}</th>" for n in range(columns)) + "</tr>"
    return (
        '<section id="gpus"><h2>GPU health</h2>'
        + legend(
            [("o", "healthy"), ("w", "degraded (PCIe width, slowdown)"), ("x", "failing")],
            f'<table class="hm{"" if labelled else " small"}">{head}{rows}</table>',
        )
        + "</section>\n"
    )


def gpu_grid(report: Report) -> dict[str, list[tuple[str, str, list[str]]]]:
    """host -> per GPU (index, class, problems)."""
    grid: dict[str, list[tuple[str, str, list[str]]]] = {}
    for host, entry in report.hosts.items():
        facts = entry.get("facts")
        devices = collected(facts.get("gpus")).get("devices") if facts else None
        if not facts or not devices:
            continue
        xids: dict[str, list[tuple[str, str]]] = {}
        for group in group_events(facts, "xid"):
            if group["counted"] and group["status"] != "ok":
                xids.setdefault(str(group["index"]), []).append(
                    (f"Xid {group['code']} x{group['count']}", group["status"])
                )
        grid[host] = [
            gpu_state(device, xids.get(str(device.get("index")), [])) for device in devices
        ]
    return grid


def gpu_state(device: GpuDevice, xids: list[tuple[str, str]]) -> tuple[str, str, list[str]]:
    fields: Mapping[str, Any] = device
    failing = [what for what, status in xids if status == "fail"]
    degraded = [what for what, status in xids if status != "fail"]
    for field, what in _FAILING_FIELDS:
        if _count(fields.get(field)):
            failing.append(f"{what} {text(fields.get(field), 16)}")
    width, widest = (
        _count(fields.get("pcie.link.width.current")),
        _count(fields.get("pcie.link.width.max")),
    )
    if width and widest and width < widest:
        degraded.append(f"PCIe x{width} of x{widest}")
    mask = _mask(fields.get("clocks_event_reasons.active"))
    degraded += [name for bit, name in SLOWDOWN_REASONS.items() if mask & bit]
    cls = "x" if failing else "w" if degraded else "o"
    return text(device.get("index"), 8), cls, failing + degraded


_FAILING_FIELDS = (
    ("remapped_rows.uncorrectable", "rows remapped (uncorrectable)"),
    ("remapped_rows.pending", "row remap pending"),
    ("remapped_rows.failure", "row remapping failed"),
    ("retired_pages.double_bit.count", "pages retired (double-bit)"),
    ("retired_pages.pending", "page retirement pending"),
    ("ecc.errors.uncorrected.volatile.total", "uncorrected ECC errors"),
)


def gpu_cell(host: str, cell: tuple[str, str, list[str]], labelled: bool) -> str:
    index, cls, problems = cell
    what = "; ".join(problems) or "healthy"
    label = ("!" if problems else "") if labelled else ""
    return f'<td class="g {cls}" title="{text(host, NAME_MAX)} GPU {index}: {what}">{label}</td>'


def _count(value: object) -> int:
    """nvidia-smi's counts and Yes/No flags as numbers; 0 for [N/A], absent or unreadable."""
    word = str(value).strip() if value is not None else ""
    if word in ("Yes", "No"):
        return int(word == "Yes")
    return int(word) if word.isdigit() else 0


def _mask(value: object) -> int:
    try:
        return int(str(value).strip(), 16) if value else 0
    except ValueError:
        return 0
