"""The HTML report as a pure function of the report (clusterkit/report/html.py): hostile node
text shown as text, sections only where there is data, the failing node marked in each
picture, 256 nodes within a stated size, and the real `check` writing it through the CLI.
The cluster's reports come from tests/support/fleet_report.py (real facts and kernel log)."""

from __future__ import annotations

import re
import socket
import time
from pathlib import Path

from clusterkit.checks.model import Finding, Status
from clusterkit.cli import parse
from clusterkit.facts import HostEntry
from clusterkit.report.gpu_map import gpu_state
from clusterkit.report.html import CSP, render_html
from clusterkit.report.model import Report
from tests.support.browser import read_png
from tests.support.cli import run_cli
from tests.support.fleet_report import RULE, fleet_report

HOSTILE = "<script>alert(1)</script>\"'</style><img src=http://example.com/x.png>"
SIZE_256 = 5_000_000  # bytes: 256 nodes, full mesh, find-slow, per-node, 8 GPUs each


def failing() -> str:
    return render_html(fleet_report(16, blocked="node05", slow="node11", xid="node03"))


def tag(page: str, pattern: str) -> list[str]:
    return re.findall(pattern, page)


def test_hostile_host_and_message_are_text_never_markup() -> None:
    names = [f"node{n}" for n in range(1, 4)] + [HOSTILE]
    report = fleet_report(4, blocked=HOSTILE, slow=HOSTILE, xid=HOSTILE, names=names)
    report.findings.append(Finding("net.mesh", Status.WARN, HOSTILE, hosts=[HOSTILE]))
    page = render_html(report)
    # only the page's own elements: one script, the stylesheet and its heat-map rules
    assert page.count("<script") == 1 and page.count("</script>") == 1
    assert page.count("</style>") == page.count("<style>")
    assert "<img" not in page and "alert(1)</" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&quot;&#x27;&lt;/style&gt;&lt;img" in page
    # in attributes too: no quote closes a title or data-hosts early
    for attribute in tag(page, r'(?:title|data-hosts)="([^"]*)"'):
        assert "<" not in attribute and ">" not in attribute


def test_control_characters_and_long_text_are_bounded() -> None:
    long = "x" * 50_000 + "\n\x1b[31mverdict: PASS"
    report = fleet_report(2)
    report.findings.append(Finding("gpu.xid", Status.FAIL, long, hosts=["node01"]))
    page = render_html(report)
    assert "\x1b" not in page and "x" * 2001 not in page
    assert "x" * 1990 + "..." in page


def test_every_section_for_a_failing_cluster_and_the_policy_forbids_requests() -> None:
    page = failing()
    for section in ("verdict", "nodes", "findings", "mesh", "bench-pairs", "bench-nodes", "gpus"):
        assert f'id="{section}"' in page, section
    assert f'<meta http-equiv="Content-Security-Policy" content="{CSP}">' in page
    assert "default-src 'none'" in CSP and "connect-src" not in CSP
    # nothing that could fetch: no external element, no URL in CSS
    assert not re.search(r"<(img|link|iframe|object|embed|audio|video|source)\b", page)
    assert "url(" not in page and "@import" not in page and "http:" not in page


def test_sections_without_data_are_left_out() -> None:
    report = Report(
        command="check",
        inventory=None,
        findings=[Finding("probe.python", Status.OK, "fine", hosts=["a"])],
        hosts={"a": HostEntry(address="a", reachable=True, error=None, facts=None)},
    )
    page = render_html(report)
    assert 'id="findings"' in page and 'id="nodes"' in page
    for section in ("mesh", "bench-pairs", "bench-nodes", "gpus"):
        assert f'id="{section}"' not in page, section
    assert "v-pass" in page


def test_the_failing_nodes_are_marked_in_each_picture() -> None:
    page = failing()
    mesh = page[page.index('id="mesh"') : page.index('id="bench-pairs"')]
    # the blocked node's row is marked, every pair into it red with the rule on hover
    assert re.search(r'<th class="bad" title="node05">node05</th>', mesh)
    assert (
        mesh.count('<td class="x"') == 15 and "node03→node05: timeout, blocked by node05: " in mesh
    )
    assert RULE in mesh
    assert '<th class="" title="node11">' in mesh  # slow in the bench, not in the mesh
    pairs = page[page.index('id="bench-pairs"') : page.index('id="bench-nodes"')]
    assert '<th class="bad" title="node11">' in pairs and "slow node named: node11" in pairs
    assert re.search(r'<div class="x" [^>]*title="node11: 96.3 GB/s', pairs)
    nodes = page[page.index('id="bench-nodes"') : page.index('id="gpus"')]
    assert re.search(r'<div class="x" [^>]*title="node11: 171 GB/s, 0.46x median, fail"', nodes)
    gpus = page[page.index('id="gpus"') :]
    assert re.search(r'<td class="g x" title="node03 GPU 0: Xid 45 x3; Xid 62 x1"', gpus)
    assert gpus.count("g x") == 1 and gpus.count("g o") == 16 * 8 - 1


def test_a_passing_cluster_has_no_failure_colour_anywhere() -> None:
    page = render_html(fleet_report(16))
    assert "v-pass" in page
    body = page[page.index("<body>") :]
    assert not re.search(r'<(td|th|div|span) class="(x|g x|s s-fail|bad)"( title|>)', body)


def test_a_degraded_gpu_is_amber_with_its_reasons() -> None:
    device = {
        "index": "3",
        "pcie.link.width.current": "8",
        "pcie.link.width.max": "16",
        "clocks_event_reasons.active": "0x0000000000000040",
        "remapped_rows.pending": "No",
        "retired_pages.pending": "[N/A]",
    }
    assert gpu_state(device, []) == ("3", "w", ["PCIe x8 of x16", "HW thermal slowdown"])  # type: ignore[arg-type]
    device["remapped_rows.pending"] = "Yes"
    assert gpu_state(device, [])[1] == "x"  # type: ignore[arg-type]


def test_256_nodes_render_small_cells_without_text_under_the_stated_size() -> None:
    names = [f"node{n:03d}" for n in range(1, 257)]
    report = fleet_report(256, blocked="node200", slow="node111", xid="node003", names=names)
    started = time.monotonic()
    page = render_html(report)
    assert time.monotonic() - started < 20
    assert len(page.encode()) < SIZE_256
    mesh = page[page.index('id="mesh"') : page.index('id="bench-pairs"')]
    assert "table.hm3 td{width:3px;height:3px;border:0;}" in mesh  # 768 px across
    assert 'class="col' not in mesh  # no column names; each cell named on hover
    assert mesh.count("<td") == 256 * 256
    assert '<th class="bad" title="node200"></th>' in mesh


def test_check_writes_the_html_report_through_the_cli(tmp_path: Path) -> None:
    """The real `check` of this machine: the page is the run's, its verdict the exit's."""
    out = tmp_path / "report.html"
    done = run_cli(["check", "--skip", "network,bench,image", "--format", "html", "-o", str(out)])
    page = out.read_text()
    verdict = {0: "pass", 1: "fail", 3: "incomplete"}[done.status]
    assert page.startswith("<!DOCTYPE html>") and f"v-{verdict}" in page
    assert (
        f"verdict: {verdict.upper()}" in done.stderr
    )  # the verdict line for the person at the terminal
    bench = ["bench", "inv.yaml", "--format", "html"]
    launch = ["launch", "inv.yaml", "--check-output", "r.html", "--format", "html", "--", "t.py"]
    assert parse(bench).format == parse(launch).format == "html"


def test_the_screenshot_docs_report_shows_is_there() -> None:
    """docs/report.md's picture of the page (scripts/report_screenshot.py makes it)."""
    docs = Path(__file__).resolve().parents[3] / "docs"
    named = re.findall(r"!\[[^]]*\]\((img/[\w.-]+\.png)\)", (docs / "report.md").read_text())
    assert "img/report-html.png" in named
    for path in named:
        image = read_png(docs / path)
        assert image.width >= 1000 and 1000 < image.height < 4000, (path, image.width)


def test_a_rule_on_another_port_does_not_explain_a_mesh_cell() -> None:
    report = fleet_report(4, blocked="node02")
    (firewall,) = [f for f in report.findings if f.id == "net.firewall"]
    firewall.found = {"node02": {RULE: ["node01 -> node02:29500", "node03 -> node02:29501"]}}
    page = render_html(report)
    assert 'title="node01→node02: timeout">' in page  # the rendezvous port's rule: not this
    assert f'title="node03→node02: timeout, blocked by node02: {RULE}">' in page


def test_launch_writes_its_check_as_html_when_the_gate_stops_it(tmp_path: Path) -> None:
    """`launch --check-output FILE --format html`: the one host refuses SSH, so the check
    that gates the job is incomplete and its page says so, the host marked."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]  # closed again: connections are refused at once
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        f"all:\n  hosts:\n    node1: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
    )
    out = tmp_path / "check.html"
    options = ["--ssh-config", "/dev/null", "--host-key-policy", "off", "--connect-timeout", "5"]
    argv = ["launch", str(inventory), *options, "--check-output", str(out), "--format", "html"]
    done = run_cli([*argv, "--", "true"], timeout=120)
    assert done.status == 3, done.stderr
    page = out.read_text()
    assert "v-incomplete" in page and "INCOMPLETE" in page
    assert re.search(r'<tr data-status="error" data-stage="connect" data-hosts="node1">', page)
    assert '<div class="e" ' in page  # the node's cell in the error colour
