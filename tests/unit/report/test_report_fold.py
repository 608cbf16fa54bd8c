"""Folding what repeats in the text report (issue 37 items 10 and 11): hostlists, findings
that differ only in their host, GPUs that say the same, each remedy once, and a passing
4-node check that fits one 80-column screen on a terminal while -v lists every check."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest

from clusterkit.checks.gpu_health import gpu_health_findings
from clusterkit.checks.model import Finding, Status, over_hosts, per_host
from clusterkit.environment import Environment
from clusterkit.hostlist import fold_hostlist, parse_hostlist
from clusterkit.node.probe_gpu import parse_gpu_csv
from clusterkit.report import emit
from clusterkit.report.fold import (
    fold_gpu_remedy,
    fold_gpus,
    fold_host_rows,
    fold_host_runs,
    fold_lines,
    hosts_cell,
    stage_counts,
)
from clusterkit.report.model import Report
from tests.unit.checks.test_gpu_health import H100_IDLE, PENDING

REPORTS = Path(__file__).parent.parent.parent / "fixtures" / "reports"
NODES = ["node1", "node2", "node3", "node4"]
SCREEN = 24  # lines of a terminal's first screen (80 x 24)


@pytest.mark.parametrize(
    ("names", "folded"),
    [
        (NODES, "node[1-4]"),
        (["node2"], "node2"),
        (["node4", "node1", "node3", "node1"], "node[1,3-4]"),
        (["n08", "n09", "n10", "n12"], "n[08-10,12]"),
        (["gpu001", "gpu002", "gpu1"], "gpu[001-002],gpu1"),
        (["login", "node9", "node10", "r1-n2", "r1-n3"], "login,node[9-10],r1-n[2-3]"),
        (["10.0.0.11", "10.0.0.12"], "10.0.0.[11-12]"),
        ([], ""),
    ],
)
def test_a_folded_hostlist_expands_to_the_same_hosts(names: list[str], folded: str) -> None:
    assert fold_hostlist(names) == folded
    assert sorted(parse_hostlist(folded)) == sorted(set(names))


def test_a_name_in_hostlist_syntax_is_never_folded_into_another() -> None:
    assert fold_hostlist(["a[1-2]", "b,c", "node1"]) == "a[1-2],b,c,node1"


def refused(host: str, address: str) -> Finding:
    return Finding(
        "host.reachable",
        Status.ERROR,
        f"{host}: connection refused by root@{address}:22",
        [host],
        remedy=f"is sshd running on {host}?",
        stage="connect",
    )


def test_the_same_finding_on_several_hosts_is_one_line_naming_every_host() -> None:
    addresses = {h: f"10.0.0.1{i}" for i, h in enumerate(NODES, 1)}
    findings = [refused(h, addresses[h]) for h in ("node4", "node2", "node3")]
    (line,) = fold_lines(findings, NODES, addresses)
    assert line.count == 3 and line.status is Status.ERROR
    assert line.hosts == "node[2-4]"
    assert line.message == "node[2-4]: connection refused by root@10.0.0.[12-14]:22"
    assert line.remedy == "is sshd running on node4,node2,node3?"


def test_findings_that_differ_beyond_the_host_stay_apart() -> None:
    findings = [refused("node1", "10.0.0.11"), refused("node2", "10.0.0.12")]
    findings[1].message += " (after 3 tries)"
    assert [line.hosts for line in fold_lines(findings, NODES)] == ["node1", "node2"]


def test_a_provision_remedy_stays_a_command_when_findings_merge() -> None:
    findings = [
        Finding("env.shm", Status.WARN, f"{h}: /dev/shm 64 MiB", [h],
                remedy=f"clusterkit provision inv.yaml --tags shm --limit {h}")
        for h in ("node1", "node3")
    ]  # fmt: skip
    (line,) = fold_lines(findings, NODES)
    assert line.message == "node[1,3]: /dev/shm 64 MiB"
    assert line.remedy == "clusterkit provision inv.yaml --tags shm --limit node1,node3"


def test_hostile_names_and_marks_never_merge_into_another_hosts_line() -> None:
    odd = ["a b", "c;d"]
    findings = [Finding("env.shm", Status.WARN, f"{h}: low", [h], remedy=f"fix {h}") for h in odd]
    assert [line.remedy for line in fold_lines(findings, odd)] == ["fix a b", "fix c;d"]
    forged = [
        Finding("env.shm", Status.WARN, "node1: low", ["node1"]),
        Finding("env.shm", Status.WARN, "\x00: low", ["node2"]),
    ]
    assert [line.hosts for line in fold_lines(forged, NODES)] == ["node1", "node2"]
    rows = [("node1", "a", "refused by \x00", "?"), ("node2", "b", "refused by \x00", "?")]
    assert fold_host_rows(rows) == rows


def test_the_same_remedy_is_printed_once() -> None:
    same = "clusterkit provision inv.yaml --tags limits --limit node1,node2"
    findings = [
        Finding("env.memlock", Status.WARN, "memlock low", ["node1", "node2"], remedy=same),
        Finding("env.shm", Status.WARN, "/dev/shm small", ["node1", "node2"], remedy=same),
        Finding("env.shm", Status.OK, "fine", NODES),
    ]
    assert [line.remedy for line in fold_lines(findings, NODES)] == [same, None, None]


def test_per_host_evidence_that_repeats_names_the_hosts_once() -> None:
    text = "memlock limit 8192 KiB"
    found = {h: text for h in NODES[:3]} | {"node4": "memlock limit 64 KiB"}
    finding = over_hosts("env.memlock", found, NODES, ok="", failed=f"low: {per_host(found)}")
    (line,) = fold_lines([finding], NODES)
    assert line.message == f"low: node[1-3]: {text}; node4: memlock limit 64 KiB"
    assert line.hosts == "all 4"
    runs = Finding("env.clock", Status.WARN, "off on node1, node2, node3, node4; node1, node3")
    assert fold_lines([runs], NODES)[0].message == "off on all 4 hosts; node[1,3]"
    many = [f"n{i}" for i in range(4096)]
    listed = f"down on {', '.join(many[:4000])}, x1, {many[4001]}, {many[4002]}."
    assert fold_host_runs(listed, many) == "down on n[0-3999], x1, n[4001-4002]."


def gpus(line: str, count: int) -> str:
    """`count` GPUs of one node, each `line` with its own index (as test_gpu_health does)."""
    return "".join(line.replace("0, GPU-", f"{i}, GPU-", 1) for i in range(count))


def test_the_same_problem_on_several_gpus_of_a_host_is_one_part() -> None:
    facts = {
        host: {"gpus": {"count": 8, "devices": parse_gpu_csv(gpus(text, 8))}}
        for host, text in (("node1", H100_IDLE), ("node2", PENDING), ("node3", PENDING))
    }
    findings = gpu_health_findings(facts)
    (remap,) = [f for f in findings if f.id == "gpu.row-remap" and f.status is Status.FAIL]
    assert remap.message.count("row remap pending") == 16  # as the check wrote it
    (line,) = [line for line in fold_lines(findings, NODES[:3]) if line.id == "gpu.row-remap"]
    assert line.message.endswith(": node[2-3]: GPUs 0-7: row remap pending")
    assert line.remedy is not None and line.remedy.count("nvidia-smi -r -i") == 8  # one a GPU
    assert "node2 GPU 7, node3 GPU 7: reset the GPU once idle (`nvidia-smi -r -i 7`)" in line.remedy


def test_gpu_evidence_folds_numbers_into_ranges_and_keeps_a_lone_gpu_whole() -> None:
    evidence = "; ".join(
        f"GPU {i} (00000000:{i + 18}:00.0, serial 16549220001{i:02}): slowed, GPU {t} C"
        for i, t in ((0, 88), (1, 86), (2, 87))
    )
    lone = "GPU 5 (00000000:4B:00.0, serial 1654922000105): row remap pending"
    assert fold_gpus(f"{evidence}; {lone}") == f"GPUs 0-2: slowed, GPU 86-88 C; {lone}"
    assert fold_gpus("no GPU here; GPU 1: x") == "no GPU here; GPU 1: x"
    remedy = "; ".join(f"n2 GPU {i} (00000000:{i}A:00.0): check cooling" for i in (0, 1, 3))
    assert fold_gpu_remedy(remedy) == "n2 GPUs 0-1, 3: check cooling"


def test_a_problem_names_every_host_and_a_pass_is_cut() -> None:
    many = [f"node{i:03}" for i in range(1, 200, 2)]
    assert parse_hostlist(hosts_cell(many, NODES, Status.FAIL)) == many
    assert len(hosts_cell(many, NODES, Status.OK)) <= 40
    assert hosts_cell(NODES, NODES, Status.FAIL) == "all 4"


def test_unreachable_hosts_fold_into_one_row_with_their_addresses() -> None:
    rows = [
        (h, f"10.0.0.1{i}", f"refused: connection refused by root@10.0.0.1{i}:22", "?", "?")
        for i, h in enumerate(NODES, 1)
    ]
    ok = ("node5", "10.0.0.15", "ok", "8", "550.54.15")
    assert fold_host_rows([*rows, ok]) == [
        ("node[1-4]", "10.0.0.[11-14]", "refused: connection refused by root@10.0.0.[11-14]:22",
         "?", "?"),
        ok,
    ]  # fmt: skip


def test_stage_counts_say_each_status_found() -> None:
    findings = [Finding("a", Status.OK, ""), Finding("b", Status.OK, ""),
                Finding("c", Status.WARN, ""), Finding("d", Status.SKIP, "")]  # fmt: skip
    assert stage_counts(findings) == "2 ok, 1 skip, 1 warn"


def recorded(name: str) -> Report:
    """A report recorded from the real cluster (tests/fixtures/reports/README.md)."""
    data = json.loads((REPORTS / name).read_text())
    findings = [
        Finding(f["id"], Status(f["status"]), f["message"], f["hosts"], f["expected"],
                f["found"], f["remedy"], f["stage"])
        for f in data["findings"]
    ]  # fmt: skip
    return Report(data["command"], data["inventory"], findings, data["hosts"], data["stages"],
                  data["details"], seconds=data["seconds"])  # fmt: skip


def on_terminal(
    report: Report, *, verbose: bool = False, only_problems: bool = False, columns: int = 80
) -> list[str]:
    environ = {"COLUMNS": str(columns), "LINES": "24", "NO_COLOR": "1"}
    stdout = io.StringIO()
    emit(report, "text", None, Environment(stdout=stdout, environ=environ, stdout_isatty=True),
         verbose=verbose, only_problems=only_problems)  # fmt: skip
    return [line.rstrip() for line in stdout.getvalue().splitlines()]


def test_a_passing_4_node_check_fits_one_80_column_screen() -> None:
    """The recorded check passes with 3 warnings: each is at most two lines at a glance
    (shown whole, with its remedy, they took 20), so the whole report fits 80 x 24; `-q`
    shows each warning whole."""
    report = recorded("check-4-nodes-pass.json")
    assert report.verdict == "pass" and len(report.hosts) == 4
    lines = on_terminal(report)
    assert len(lines) <= SCREEN, "\n".join(lines)
    assert max(map(len, lines)) <= 80
    warned = [f for f in report.findings if f.status is Status.WARN]
    assert len(warned) == 3
    assert [line.split()[1].rstrip(":") for line in lines if line.startswith("  warn ")] == [
        f.id for f in warned
    ]
    body = [line for line in lines if not line.startswith(" ")]
    assert len(body) <= 16, "\n".join(body)  # hosts, stages, hint and verdict
    assert re.search(r"^static\s+\d+ ok, \d+ skip, 3 warn$", "\n".join(lines), re.MULTILINE)
    assert "(-q shows each warning whole, -v every check and host)" in lines
    whole = " ".join(" ".join(on_terminal(report, only_problems=True)).split())
    for finding in warned:
        assert " ".join(str(finding.remedy).split()) in whole


def test_verbose_lists_every_check_and_host_on_the_terminal() -> None:
    report = recorded("check-4-nodes-pass.json")
    text = "\n".join(on_terminal(report, verbose=True, columns=200))
    for finding in report.findings:
        assert re.search(rf"^\s+{finding.status.value}\s+{re.escape(finding.id)}\b", text,
                         re.MULTILINE), finding.id  # fmt: skip
    for host, entry in report.hosts.items():
        assert re.search(rf"^{host}\s.*{re.escape(entry['address'])}", text, re.MULTILINE)


def test_a_failing_report_on_the_terminal_names_every_failing_host() -> None:
    report = recorded("check-4-nodes-pass.json")
    addresses = {h: str(e["address"]) for h, e in report.hosts.items()}
    report.findings += [refused(h, addresses[h]) for h in ("node2", "node3", "node4")]
    lines = on_terminal(report)
    text = " ".join(" ".join(lines).split())
    (named,) = re.findall(r"error host\.reachable: (\S+): connection refused by root@", text)
    assert parse_hostlist(named) == ["node2", "node3", "node4"]


def test_piped_text_keeps_every_line() -> None:
    report = recorded("check-4-nodes-pass.json")
    stdout = io.StringIO()
    emit(report, "text", None, Environment(stdout=stdout, environ={}))
    text = stdout.getvalue()
    for finding in report.findings:
        assert re.search(rf"^  {finding.status.value.upper()}\s+{re.escape(finding.id)} ", text,
                         re.MULTILINE), finding.id  # fmt: skip
    assert all(re.search(rf"^  {h}\s", text, re.MULTILINE) for h in report.hosts)
