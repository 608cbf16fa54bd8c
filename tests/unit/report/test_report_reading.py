"""The text report as a person reads it: only the problems when asked, stages in run order,
counts that agree with their nouns, colour switches that change colour only, a stable
unreachable summary and JUnit testcases a dashboard can tell apart."""

from __future__ import annotations

import io
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from clusterkit.checks.model import Finding, Status
from clusterkit.environment import Environment
from clusterkit.report import emit
from clusterkit.report.junit import render_junit
from clusterkit.report.model import Report
from clusterkit.report.progress import Progress
from clusterkit.report.text import render_plain
from tests.support.cli import run_cli

ANSI = re.compile(r"\x1b\[[0-9;]*m")
STATIC_ONLY = ["--skip", "network,bench,image"]


def _refused_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]  # closed again: connecting is refused


@pytest.fixture
def unreachable_inventory(tmp_path: Path) -> Path:
    """Four hosts, none of them answering: the report that is mostly SKIP rows."""
    port = _refused_port()
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text(
        "all:\n  hosts:\n"
        + "".join(
            f"    node{i}: {{ansible_host: 127.0.0.1, ansible_port: {port}}}\n"
            for i in (4, 1, 3, 2)
        )
    )
    return inventory


def test_only_problems_shows_errors_and_one_count_line(unreachable_inventory: Path) -> None:
    """All hosts unreachable: the full report buries 4 errors among SKIP rows; the short one
    has the errors, the count of what it left out and the verdict, and JSON stays whole."""
    full = run_cli(["check", str(unreachable_inventory), *STATIC_ONLY])
    assert full.status == 3 and "SKIP" in full.stdout
    for flag in ("--only-problems", "-q"):
        short = run_cli(["check", str(unreachable_inventory), *STATIC_ONLY, flag])
        assert short.status == 3, short.stderr
        rows = [line.split() for line in short.stdout.splitlines() if line.startswith("  ")]
        statuses = [row[0] for row in rows if row[0] in ("OK", "SKIP", "WARN", "FAIL", "ERROR")]
        assert statuses.count("ERROR") == 4 and set(statuses) == {"ERROR"}, short.stdout
        skipped = full.stdout.count("  SKIP ")
        counted = re.search(r"^(\d+) OK, (\d+) SKIP(, .*)? not shown$", short.stdout, re.M)
        assert counted and int(counted[2]) == skipped > 0, short.stdout
        assert short.stdout.rstrip().splitlines()[-1].startswith("verdict: INCOMPLETE")
    document = run_cli(
        ["check", str(unreachable_inventory), *STATIC_ONLY, "-q", "--format", "json"]
    ).stdout
    assert any(f["status"] == "skip" for f in json.loads(document)["findings"])


def test_only_problems_is_on_every_command_that_prints_a_report() -> None:
    from clusterkit.cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for name in ("check", "bench", "node-check", "launch"):
        options = commands[name]._option_string_actions
        assert options["-q"].dest == options["--only-problems"].dest == "only_problems"


def report(findings: list[Finding], hosts: int = 1, **stages: str) -> Report:
    return Report(
        command="check",
        inventory=None,
        findings=findings,
        hosts={f"n{i}": {"address": "x", "reachable": True, "facts": None} for i in range(hosts)},
        stages=stages,
        text_blocks={"bench": ["size  busbw-table-line"]},
    )


def test_stages_print_in_run_order_with_the_bench_table_last() -> None:
    """A stage skipped without findings used to be printed after every stage that had some,
    so the bench table came before the network and image stages."""
    findings = [
        Finding("host.reachable", Status.OK, "1 of 1 host connected", ["n0"], stage="connect"),
        Finding("bench.busbw", Status.OK, "fast", ["n0"], stage="bench"),
    ]
    stream = io.StringIO()
    render_plain(report(findings, network="ran", storage="no paths", image="no image"), stream)
    text = stream.getvalue()
    order = ["\nconnect:", "storage: skipped", "image: skipped", "\nbench:", "busbw-table-line"]
    positions = [text.index(marker) for marker in order]
    assert positions == sorted(positions), text


def test_counts_agree_with_their_nouns() -> None:
    stream = io.StringIO()
    render_plain(report([Finding("env.shm", Status.OK, "fine", ["n0"])]), stream)
    assert re.search(r"on 1 host in \d", stream.getvalue()), stream.getvalue()
    stream = io.StringIO()
    render_plain(report([], hosts=2), stream)
    assert "on 2 hosts in" in stream.getvalue()
    log = io.StringIO()
    bar = Progress(enabled=False, log=log)
    bar.phase("connect", 1)
    bar.done("n0", "refused")
    bar.finish()
    assert "0 of 1 host ok" in log.getvalue()


def test_parity_on_one_host_says_host() -> None:
    from clusterkit.checks.parity import parity_finding

    finding = parity_finding("parity.python", "Python", {"n0": "3.11"}, "fix it")
    assert finding.message == "Python: 3.11 on 1 host"
    finding = parity_finding("parity.python", "Python", {"a": "3.11", "b": "3.11"}, "fix it")
    assert finding.message == "Python: 3.11 on all 2 hosts"


def test_unreachable_summary_follows_the_inventory_not_the_answers() -> None:
    log = io.StringIO()
    bar = Progress(enabled=False, log=log)
    bar.phase("connect", 4, ["node4", "node1", "node3", "node2"])
    for host in ("node2", "node3", "node1", "node4"):  # the order they happened to fail in
        bar.done(host, "refused")
    bar.finish()
    assert "(node4: refused; node1: refused; node3: refused; +1 more)" in log.getvalue()


def test_unreachable_summary_of_a_real_run_is_in_inventory_order(
    unreachable_inventory: Path,
) -> None:
    done = run_cli(["check", str(unreachable_inventory), *STATIC_ONLY, "--format", "json"])
    line = next(ln for ln in done.stderr.splitlines() if ln.startswith("clusterkit: connect:"))
    assert "(node4: refused; node1: refused; node3: refused; +1 more)" in line, line


def _emitted(terminal: bool, environ: dict[str, str]) -> str:
    """The text report as a stdout that is (or is not) a terminal gets it in `environ`."""
    env = Environment(environ=environ, stdout_isatty=terminal)
    findings = [
        Finding("env.memlock", Status.WARN, "memlock low", ["n0"], remedy="raise it"),
        Finding("env.shm", Status.OK, "fine", ["n0"]),
    ]
    emit(report(findings, network="a single host"), "text", None, env)
    return env.stdout.getvalue()


def test_force_color_colours_the_piped_layout_without_changing_it() -> None:
    plain = _emitted(False, {})
    forced = _emitted(False, {"FORCE_COLOR": "1"})
    assert "\x1b[" in forced and "\x1b[" not in plain
    assert ANSI.sub("", forced) == plain


def test_no_color_keeps_the_terminal_layout_without_colour() -> None:
    coloured = _emitted(True, {"COLUMNS": "120"})
    uncoloured = _emitted(True, {"COLUMNS": "120", "NO_COLOR": "1"})
    assert "\x1b[" in coloured and "\x1b[" not in uncoloured
    assert uncoloured == ANSI.sub("", coloured)


def test_cost_table_keeps_its_lines_whatever_the_colour(tmp_path: Path) -> None:
    """FORCE_COLOR on a pipe used to swap the ASCII table for the terminal's box lines."""
    from clusterkit.cost.report import render_text
    from tests.unit.cost.test_cost_price_dates import estimate

    result = estimate(tmp_path)
    piped = render_text(result, color=False, terminal=False)
    forced = render_text(result, color=True, terminal=False)
    assert "\x1b[" in forced
    assert ANSI.sub("", forced) == piped


def test_junit_names_each_unreachable_host_apart() -> None:
    findings = [
        Finding("host.reachable", Status.ERROR, f"{h}: refused", [h], stage="connect")
        for h in ("node4", "node1", "node2")
    ]
    findings.append(Finding("host.reachable", Status.OK, "1 of 4 hosts", ["node3"]))
    findings[-1].stage = "connect"
    root = ET.fromstring(render_junit(report(findings)))
    cases = [(c.get("classname"), c.get("name")) for c in root.iter("testcase")]
    assert len(set(cases)) == len(cases) == 4, cases
    assert ("clusterkit.connect", "host.reachable[node1]") in cases
