"""The HTML report: one self-contained page to look at past a handful of nodes (docs/report.md).

A pure function of the same report the JSON carries. The page fetches nothing: inline CSS and
a few lines of inline JS (the findings filter), and a Content-Security-Policy that forbids
every request. Everything a node or the inventory wrote is hostile: made printable, cut to a
bound and HTML-escaped (markup.py), in text and attributes alike; the script reads no node
text. This module holds the page, the verdict, the nodes and the findings; the heat maps are
mesh_map.py, bench_map.py and gpu_map.py, drawn with heatmap.py.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from clusterkit.checks.model import Finding, Status
from clusterkit.contract.names import stage_rank
from clusterkit.hostlist import fold_hostlist
from clusterkit.report.bench_map import bench_sections
from clusterkit.report.gpu_map import gpu_section
from clusterkit.report.heatmap import MARK_CLASS
from clusterkit.report.markup import NAME_MAX, text
from clusterkit.report.mesh_map import mesh_section
from clusterkit.report.model import Report

HOSTS_SHOWN = 12  # a finding's folded hosts are cut at this many names' length
FAIL_COLOUR = "#d62728"  # the one colour of a failure; the browser test looks for it

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


def nodes_section(report: Report, marks: Mapping[str, Status]) -> str:
    """Every node as one cell coloured by its worst finding: the failing node stands out."""
    hosts = list(report.hosts)
    if not hosts:
        return ""
    labelled = len(hosts) <= 64
    size = "min-width:64px;height:20px;padding:0 4px" if labelled else "width:12px;height:12px"
    cells = "".join(
        f'<div class="{MARK_CLASS.get(marks.get(host, Status.OK), "o")}" style="{size}" '
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
    stages = sorted({f.stage for f in findings}, key=lambda s: (stage_rank(s), s))
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
