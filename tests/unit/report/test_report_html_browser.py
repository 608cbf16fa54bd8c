"""The HTML report in a real headless browser (Debian's Chromium; scripts/test.sh installs
it): the filter's script runs, the page makes no request but its own (every host name maps
to a recording localhost server), and the failing node shows in the picture; a screenshot
of a failing 16-node cluster keeps its shape. Skipped only without Chromium and without
root (root installs it: a missing browser there is a failure)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.report.html import FAIL_COLOUR, render_html
from tests.support.browser import CHROMIUM, Image, dump_dom, read_png, screenshot, serve
from tests.support.fleet_report import fleet_report

FAIL_RGB = (int(FAIL_COLOUR[1:3], 16), int(FAIL_COLOUR[3:5], 16), int(FAIL_COLOUR[5:7], 16))
WIDTH, HEIGHT = 1280, 2600

if not CHROMIUM.exists():
    if os.geteuid() == 0:
        pytest.fail("no /usr/bin/chromium: apt-get install -y chromium (scripts/test.sh does)")
    pytest.skip("no /usr/bin/chromium and not root to install it", allow_module_level=True)


def failing_page() -> bytes:
    report = fleet_report(16, blocked="node05", slow="node11", xid="node03")
    return render_html(report).encode()


def test_the_filter_script_runs_in_the_browser() -> None:
    with serve({"/report.html": failing_page()}) as server:
        everything = dump_dom(server.url("/report.html"), server.port)
        failures = dump_dom(server.url("/report.html#status=fail"), server.port)
        node11 = dump_dom(server.url("/report.html#host=node11&status=problems"), server.port)
    # the count is written by the script only: it ran, with the filter from the address
    assert 'id="f-count">5 of 5 findings shown<' in everything
    assert 'id="f-count">4 of 5 findings shown<' in failures
    assert re.findall(r'<tr data-status="(\w+)"[^>]*hidden=""', failures) == ["ok"]
    assert 'id="f-count">2 of 5 findings shown<' in node11
    # the heat maps are in the rendered page: the blocked node's column of 15 failed pairs
    assert everything.count('<td class="x" title="') == 15


def test_no_request_but_the_report_itself() -> None:
    report = fleet_report(4, blocked="node02")
    hostile = "<img src=http://evil.example/pixel.png><link rel=stylesheet href=//x.example/s>"
    report.findings.append(Finding("net.mesh", Status.FAIL, hostile, hosts=[hostile]))
    control = b"<!DOCTYPE html><body><img src=http://evil.example/pixel.png></body>"
    with serve({"/report.html": render_html(report).encode(), "/control.html": control}) as server:
        dom = dump_dom(server.url("/report.html"), server.port)
        assert server.page_requests() == ["/report.html"]
        assert "&lt;img src=http://evil.example/pixel.png&gt;" in dom
        # the same markup unescaped does reach the server: the record would show a leak
        dump_dom(server.url("/control.html"), server.port)
        assert "/pixel.png" in server.page_requests()


def test_the_failing_node_is_red_in_the_picture_and_a_passing_cluster_has_no_red(
    tmp_path: Path,
) -> None:
    passing = render_html(fleet_report(16)).encode()
    with serve({"/fail.html": failing_page(), "/pass.html": passing}) as server:
        screenshot(server.url("/fail.html"), server.port, tmp_path / "f.png", WIDTH, HEIGHT)
        screenshot(server.url("/pass.html"), server.port, tmp_path / "p.png", WIDTH, HEIGHT)
    failed, passed = read_png(tmp_path / "f.png"), read_png(tmp_path / "p.png")
    assert (failed.width, failed.height) == (WIDTH, HEIGHT)
    assert failed.count(FAIL_RGB) > 5000 and passed.count(FAIL_RGB) == 0
    assert failed.pixel(40, 30) == FAIL_RGB  # the verdict banner
    # the mesh: the blocked node's column, its 15 failed pairs one under another, all red
    assert longest_red_column(failed) >= 15 * 12


def test_the_page_keeps_its_shape(tmp_path: Path) -> None:
    """A screenshot check: the 16-node page is neither blank nor cut nor grown past a
    screen's worth of scrolling, and its picture holds the expected colours in order."""
    with serve({"/report.html": failing_page()}) as server:
        screenshot(server.url("/report.html"), server.port, tmp_path / "r.png", WIDTH, HEIGHT)
    image = read_png(tmp_path / "r.png")
    white = (255, 255, 255)
    used = [y for y, row in enumerate(image.rows) if row.count(b"\xff\xff\xff\xff") < WIDTH]
    assert 1600 <= used[-1] < HEIGHT - 40, used[-1]  # all of it fits, nothing beyond
    assert image.pixel(WIDTH - 5, HEIGHT - 5) == white
    red_rows = image.rows_with(FAIL_RGB)
    assert red_rows[0] < 100 and red_rows[-1] > 1500  # banner on top ... the GPU grid below
    assert image.count((0x2C, 0xA0, 0x2C)) > 50_000  # the healthy cells' green


def longest_red_column(image: Image) -> int:
    """The longest run of fail-coloured pixels down any one column below the banner, across
    the white lines between table cells (gaps of up to 3 pixels)."""
    want, best = bytes(FAIL_RGB), 0
    for x in range(0, image.width, 2):
        run = gap = 0
        for row in image.rows[150:]:
            if row[4 * x : 4 * x + 3] == want:
                run, gap = run + 1 + gap, 0
            elif run and gap < 3:
                gap += 1
            else:
                run = gap = 0
            best = max(best, run)
    return best
